// Package pgcluster starts a throwaway PostgreSQL server from the PostgreSQL binaries
// installed on the machine (initdb + postgres in a temporary directory, on a free
// loopback port). Tests, `make demo` and `skiplock bench` all use it.
//
// The postmaster is started directly as a child process rather than through
// `pg_ctl start`: that way the server's lifetime is tied to the process that started
// it (Linux parent-death signal), so an interrupted `go test` does not leave an
// orphaned server behind. Stop and Restart still use the same signals pg_ctl sends.
//
// PostgreSQL refuses to run as root. When the caller is root, the data directory is
// handed to the unprivileged "postgres" user (created by Debian's package) and the
// server runs as that user.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/backoff"
)

// Options configure a throwaway cluster.
type Options struct {
	// BinDir holds initdb and postgres. Default: $SKIPLOCK_PG_BIN, else the newest
	// /usr/lib/postgresql/*/bin, else the directory of `initdb` on PATH.
	BinDir string
	// Durable keeps fsync, synchronous_commit and full_page_writes on (the PostgreSQL
	// defaults). Tests leave it false: they check behaviour, not durability, and run
	// several times faster without disk syncs. Benchmarks set it true.
	Durable bool
	// MaxConnections is the server's max_connections. Default 300.
	MaxConnections int
	// Settings are extra postgresql.conf lines, name → value.
	Settings map[string]string
	// Log receives the server's output. Default: a file "server.log" in the data dir.
	Log *os.File
}

// Cluster is a running throwaway server.
type Cluster struct {
	// URL is a connection string for the superuser "postgres", database "postgres".
	URL string
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Dir is the temporary directory holding the data directory and sockets.
	Dir string

	opts    Options
	binDir  string
	dataDir string
	cred    *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start creates and starts a cluster. The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = 300
	}
	dir, err := os.MkdirTemp("", "skiplock-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: creating temp dir: %w", err)
	}
	c := &Cluster{Dir: dir, opts: opts, binDir: bin, dataDir: filepath.Join(dir, "data")}
	if os.Geteuid() == 0 {
		cred, err := postgresCredential()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.cred = cred
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgcluster: chown %s: %w", dir, err)
		}
	}
	if err := c.initdb(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func findBinDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("SKIPLOCK_PG_BIN")
	}
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			return "", fmt.Errorf("pgcluster: no initdb in %s: %w", dir, err)
		}
		return dir, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
	if len(matches) > 0 {
		return filepath.Dir(matches[0]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("pgcluster: PostgreSQL server binaries not found (install postgresql, e.g. `apt-get install postgresql`, or set SKIPLOCK_PG_BIN)")
}

func versionOf(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root needs the unprivileged user \"postgres\" (Debian's postgresql package creates it): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	return cmd
}

func (c *Cluster) initdb(ctx context.Context) error {
	cmd := c.command(ctx, "initdb", "-D", c.dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-instructions", "--locale=C")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}
	settings := map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"unix_socket_directories": "'" + c.Dir + "'",
		"max_connections":         strconv.Itoa(c.opts.MaxConnections),
		"shared_buffers":          "'256MB'",
		"timezone":                "'UTC'",
		"log_timezone":            "'UTC'",
		"logging_collector":       "off",
		"log_min_messages":        "warning",
		"max_wal_size":            "'2GB'",
	}
	if !c.opts.Durable {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range c.opts.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("\n# skiplock throwaway cluster\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: opening postgresql.conf: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(b.String()); err != nil {
		return fmt.Errorf("pgcluster: writing postgresql.conf: %w", err)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start launches the postmaster; on a restart it reuses the port.
func (c *Cluster) start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lastErr error
	for try := 0; try < 5; try++ {
		port := c.Port
		if port == 0 || try > 0 && c.URL == "" {
			p, err := freePort()
			if err != nil {
				return err
			}
			port = p
		}
		cmd := c.command(context.Background(), "postgres", "-D", c.dataDir, "-p", strconv.Itoa(port))
		setPdeathsig(cmd.SysProcAttr, syscall.SIGQUIT)
		cmd.SysProcAttr.Setpgid = true
		logf := c.opts.Log
		if logf == nil {
			f, err := os.OpenFile(filepath.Join(c.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("pgcluster: opening server log: %w", err)
			}
			defer f.Close()
			logf = f
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("pgcluster: starting postgres: %w", err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		if err := waitReady(ctx, url, done); err != nil {
			cmd.Process.Signal(syscall.SIGQUIT)
			<-done
			lastErr = fmt.Errorf("%w (server log: %s)", err, filepath.Join(c.Dir, "server.log"))
			if c.URL != "" { // a restart must keep its port
				return lastErr
			}
			continue
		}
		c.cmd, c.done, c.Port, c.URL = cmd, done, port, url
		return nil
	}
	return lastErr
}

// waitReady polls until the server accepts connections, the process exits, or ctx ends.
func waitReady(ctx context.Context, url string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	retry := backoff.Backoff{Initial: 5 * time.Millisecond, Max: 320 * time.Millisecond}
	for {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		t := time.NewTimer(retry.Next())
		select {
		case <-exited:
			t.Stop()
			return errors.New("pgcluster: postgres exited during startup")
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pgcluster: waiting for postgres: %w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// ShutdownMode names a PostgreSQL shutdown mode, as `pg_ctl -m` does.
type ShutdownMode int

const (
	// Fast disconnects clients and shuts down cleanly (SIGINT).
	Fast ShutdownMode = iota
	// Immediate aborts without a checkpoint, like a crash; recovery runs on start (SIGQUIT).
	Immediate
)

func (c *Cluster) halt(mode ShutdownMode) error {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.cmd = nil
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	sig := syscall.SIGINT
	if mode == Immediate {
		sig = syscall.SIGQUIT
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgcluster: signalling postgres: %w", err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	return nil
}

// Restart stops the server with the given mode and starts it again on the same port,
// like `pg_ctl restart -m immediate`.
func (c *Cluster) Restart(ctx context.Context, mode ShutdownMode) error {
	if err := c.halt(mode); err != nil {
		return err
	}
	return c.start(ctx)
}

// Halt stops the server without removing its files (see Resume).
func (c *Cluster) Halt(mode ShutdownMode) error { return c.halt(mode) }

// Resume starts a halted server again on the same port.
func (c *Cluster) Resume(ctx context.Context) error { return c.start(ctx) }

// Stop shuts the server down and removes its directory.
func (c *Cluster) Stop() error {
	err := c.halt(Fast)
	if rmErr := os.RemoveAll(c.Dir); err == nil && rmErr != nil {
		err = fmt.Errorf("pgcluster: removing %s: %w", c.Dir, rmErr)
	}
	return err
}
