package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitNode is a private RabbitMQ node for the broker scenario. The harness stops
// and starts its application; a private node keeps that from disturbing anyone else
// using the machine's broker (scripts/rabbitmq.sh's node on 5672).
type rabbitNode struct {
	name   string
	url    string
	dir    string
	bin    string
	cred   *syscall.Credential
	home   string
	cmd    *exec.Cmd
	exited chan struct{}
	ready  chan struct{}
	err    error // why the node is unusable; valid after ready is closed
}

// findRabbit returns the directory of rabbitmq-server and rabbitmqctl.
func findRabbit() (string, error) {
	for _, dir := range []string{"/usr/lib/rabbitmq/bin", "/usr/sbin", "/usr/local/sbin"} {
		if _, err := os.Stat(filepath.Join(dir, "rabbitmq-server")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "rabbitmqctl")); err == nil {
				return dir, nil
			}
		}
	}
	if p, err := exec.LookPath("rabbitmq-server"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("RabbitMQ is not installed (apt-get install rabbitmq-server, or bash scripts/rabbitmq.sh start)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRabbit boots a private node in the background; wait reports when it is up.
func startRabbit() *rabbitNode {
	n := &rabbitNode{ready: make(chan struct{}), exited: make(chan struct{})}
	if err := n.launch(); err != nil {
		n.err = err
		close(n.ready)
		close(n.exited)
		return n
	}
	go n.boot()
	return n
}

func (n *rabbitNode) launch() error {
	bin, err := findRabbit()
	if err != nil {
		return err
	}
	n.bin = bin
	n.home = os.Getenv("HOME")
	if os.Geteuid() == 0 {
		// The Erlang node runs as the broker's own user, with its cookie.
		u, err := user.Lookup("rabbitmq")
		if err != nil {
			return fmt.Errorf("running as root needs the user \"rabbitmq\" (Debian's package creates it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		n.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		n.home = u.HomeDir
	}
	amqpPort, err := freePort()
	if err != nil {
		return err
	}
	distPort, err := freePort()
	if err != nil {
		return err
	}
	n.dir, err = os.MkdirTemp("", "skiplock-chaos-rabbit-")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		return err
	}
	if n.cred != nil {
		for _, p := range []string{n.dir, filepath.Join(n.dir, "enabled_plugins")} {
			if err := os.Chown(p, int(n.cred.Uid), int(n.cred.Gid)); err != nil {
				return fmt.Errorf("chown %s: %w", p, err)
			}
		}
	}
	n.name = fmt.Sprintf("skiplock-chaos-%d@localhost", os.Getpid())
	n.url = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", amqpPort)
	cmd := exec.Command(filepath.Join(bin, "rabbitmq-server"))
	cmd.Dir = n.dir
	cmd.Env = append(n.env(),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(amqpPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.dir, "pid"),
		// The start script then execs the Erlang VM instead of keeping it as a child,
		// so the parent-death signal reaches the VM if the harness dies.
		"RUNNING_UNDER_SYSTEMD=1",
	)
	logf, err := os.Create(filepath.Join(n.dir, "console.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting rabbitmq-server: %w", err)
	}
	n.cmd = cmd
	go func() { cmd.Wait(); close(n.exited) }()
	return nil
}

func (n *rabbitNode) env() []string {
	return append(os.Environ(), "HOME="+n.home, "RABBITMQ_NODENAME="+n.name, "LC_ALL=C.UTF-8")
}

// boot waits until the node accepts AMQP connections.
func (n *rabbitNode) boot() {
	defer close(n.ready)
	deadline := wallNow().Add(3 * time.Minute)
	for wallNow().Before(deadline) {
		select {
		case <-n.exited:
			n.err = fmt.Errorf("rabbitmq-server exited during startup (see %s)", filepath.Join(n.dir, "console.log"))
			return
		case <-time.After(time.Second):
		}
		if c, err := amqp.Dial(n.url); err == nil {
			c.Close()
			return
		}
	}
	n.err = errors.New("RabbitMQ did not accept connections within 3 minutes")
}

// wait blocks until the node is up (nil) or known unusable.
func (n *rabbitNode) wait(ctx context.Context) error {
	select {
	case <-n.ready:
		return n.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ctl runs rabbitmqctl against the node, e.g. ctl(ctx, "stop_app").
func (n *rabbitNode) ctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(n.bin, "rabbitmqctl"), append([]string{"-n", n.name, "-q", "--timeout", "60"}, args...)...)
	cmd.Dir = n.dir
	cmd.Env = n.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rabbitmqctl %v: %w: %s", args, err, out)
	}
	return nil
}

// stop shuts the node down and removes its files.
func (n *rabbitNode) stop() {
	if n.cmd == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-n.exited:
	default:
		if err := n.ctl(ctx, "stop"); err != nil {
			syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		}
		select {
		case <-n.exited:
		case <-ctx.Done():
			syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
			<-n.exited
		}
	}
	os.RemoveAll(n.dir)
}
