package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// PgBouncer is a running PgBouncer in front of a cluster.
type PgBouncer struct {
	// URL connects through the pooler as user postgres to database postgres.
	URL  string
	Port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// FindPgBouncer returns the pgbouncer binary's path, or an error saying how to
// install it.
func FindPgBouncer() (string, error) {
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	return "", errors.New("pgcluster: pgbouncer not found (apt-get install pgbouncer)")
}

// StartPgBouncer starts PgBouncer on a free port in front of c with the given
// pool_mode ("transaction", "session"). The caller must call Stop.
func (c *Cluster) StartPgBouncer(ctx context.Context, poolMode string) (*PgBouncer, error) {
	bin, err := FindPgBouncer()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "skiplock-pgbouncer-")
	if err != nil {
		return nil, err
	}
	if c.cred != nil {
		os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid))
	}
	conf := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,application_name
logfile = %s
pidfile = %s
`, c.Port, port, filepath.Join(dir, "users.txt"), poolMode, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	for name, body := range map[string]string{"pgbouncer.ini": conf, "users.txt": `"postgres" ""` + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	setPdeathsig(cmd.SysProcAttr, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: starting pgbouncer: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	b := &PgBouncer{Port: port, dir: dir, cmd: cmd, done: done,
		URL: "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable"}
	if err := waitReady(ctx, b.URL, done); err != nil {
		b.Stop()
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	return b, nil
}

// Stop ends PgBouncer and removes its files.
func (b *PgBouncer) Stop() {
	b.cmd.Process.Signal(syscall.SIGINT)
	<-b.done
	os.RemoveAll(b.dir)
}
