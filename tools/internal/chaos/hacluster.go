package chaos

// The failover scenarios' cluster: pg_auto_failover (a monitor, a primary and a
// synchronous standby) started and driven by scripts/ha.sh, the project's script a
// person would use, in a directory and on ports of the harness's own.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// haCluster is a running pg_auto_failover cluster.
type haCluster struct {
	script string
	dir    string
	port   int // the monitor's; node1 and node2 take the next two
	logf   string
	// URI is the application's connection string: both nodes, target_session_attrs=read-write.
	URI string
	// BouncerURI connects through PgBouncer (scripts/ha.sh pgbouncer), once started.
	BouncerURI string
}

// haNodes are the data nodes' names, as scripts/ha.sh calls them.
var haNodes = []string{"node1", "node2"}

// findScript finds scripts/<name>: $<env>, else in the module that holds the
// working directory (go run ./tools/chaos runs from the repository, the package's
// tests from their own directory). scripts/ha.sh's variable is SKIPLOCK_HA_SCRIPT,
// scripts/citus.sh's SKIPLOCK_CITUS_SCRIPT.
func findScript(name, env string) (string, error) {
	if s := os.Getenv(env); s != "" {
		return s, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", name)
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("chaos: scripts/%s not found above the working directory (set %s)", name, env)
		}
		dir = parent
	}
}

// freePorts returns a port p such that p to p+n-1 are free on 127.0.0.1: for the HA
// cluster (4) the monitor, the two nodes and PgBouncer. The ports are taken below the
// kernel's ephemeral range: a port free now must still be free when a node starts
// minutes later (citus-rebalance's added worker), and any outgoing connection may be
// given a port of that range in between (CI once lost worker3's start to that).
func freePorts(n int) (int, error) {
	lo, hi := portWindow(n)
	for try := 0; try < 50; try++ {
		base := lo + rand.IntN(hi-lo)
		ok := true
		var held []net.Listener
		for i := 0; i < n && ok; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			held = append(held, l)
		}
		for _, l := range held {
			l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("chaos: no %d consecutive free ports for a cluster in %d..%d", n, lo, hi+n-1)
}

// portWindow is where freePorts picks a first port of n: from 20000 up to the
// kernel's ephemeral range (net.ipv4.ip_local_port_range; 32768 when unreadable),
// so that the last of the n ports stays below it.
func portWindow(n int) (lo, hi int) {
	lo, eph := 20000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				eph = v
			}
		}
	}
	hi = eph - n
	if hi-lo < 1000 { // a range starting low: use what is above 1024 instead
		lo = 1024
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// startHA creates and starts a cluster under a new temporary directory; its script's
// output goes to logDir/ha.log.
func startHA(ctx context.Context, logDir string) (*haCluster, error) {
	script, err := findScript("ha.sh", "SKIPLOCK_HA_SCRIPT")
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("pg_autoctl"); err != nil {
		return nil, errors.New("chaos: pg_autoctl not found: the failover scenarios need postgresql-15-auto-failover (make deps installs it)")
	}
	dir, err := os.MkdirTemp("", "skiplock-chaos-ha-")
	if err != nil {
		return nil, fmt.Errorf("chaos: creating the HA directory: %w", err)
	}
	port, err := freePorts(4)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &haCluster{script: script, dir: dir, port: port, logf: filepath.Join(logDir, "ha.log")}
	if _, err := c.run(ctx, "start"); err != nil {
		c.destroy()
		return nil, err
	}
	uri, err := c.run(ctx, "uri")
	if err != nil {
		c.destroy()
		return nil, err
	}
	c.URI = strings.TrimSpace(uri)
	return c, nil
}

// run runs scripts/ha.sh cmd and returns its standard output; its standard error is
// appended to the harness's ha.log, and its tail is in the error.
func (c *haCluster) run(ctx context.Context, cmd string) (string, error) {
	return runScript(ctx, c.script, c.logf, []string{"SKIPLOCK_HA_DIR=" + c.dir, "SKIPLOCK_HA_PORT=" + strconv.Itoa(c.port),
		"SKIPLOCK_HA_TIMING=fast", "SKIPLOCK_HA_WAIT=90"}, cmd)
}

// runScript runs a script of scripts/ (bash script args…) with env added, in a
// process group of its own, and returns its standard output; its standard error is
// appended to logf, and its tail is in the error.
func runScript(ctx context.Context, script, logf string, env []string, args ...string) (string, error) {
	x := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	x.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own process group: signals for the harness's stay out
	x.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	x.Stdout, x.Stderr = &out, &errb
	err := x.Run()
	name, what := filepath.Base(script), strings.Join(args, " ")
	if f, ferr := os.OpenFile(logf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); ferr == nil {
		fmt.Fprintf(f, "%s %s %s\n%s", wallNow().UTC().Format(time.RFC3339Nano), name, what, errb.Bytes())
		f.Close()
	}
	if err != nil {
		tail := errb.String()
		if len(tail) > 600 {
			tail = "…" + tail[len(tail)-600:]
		}
		return out.String(), fmt.Errorf("scripts/%s %s: %w: %s", name, what, err, strings.TrimSpace(tail))
	}
	return out.String(), nil
}

// destroy keeps the cluster's evidence (collect) in logDir, then stops the cluster
// and removes its directory.
func (c *haCluster) destroy() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.collect(ctx)
	c.run(ctx, "destroy")
	os.RemoveAll(c.dir)
}

// haEvidence are the cluster's logs destroy keeps, as named in logDir: each node's
// pg_autoctl and PostgreSQL log, PgBouncer's and its follower's.
var haEvidence = map[string]string{
	"monitor.log": "ha-monitor.log", "node1.log": "ha-node1.log", "node2.log": "ha-node2.log",
	"pgbouncer/pgbouncer.log": "ha-pgbouncer.log", "pgbouncer/follower.log": "ha-follower.log",
}

// collect copies the cluster's logs and the monitor's events (every state it assigned
// and each node reported, with its reason) beside the children's logs: what a failed
// round's failover did, kept with its logs once the cluster is gone.
func (c *haCluster) collect(ctx context.Context) {
	dir := filepath.Dir(c.logf)
	if events, err := c.run(ctx, "events"); err == nil {
		os.WriteFile(filepath.Join(dir, "ha-events.txt"), []byte(events), 0o644)
	}
	for from, to := range haEvidence {
		if b, err := os.ReadFile(filepath.Join(c.dir, from)); err == nil {
			os.WriteFile(filepath.Join(dir, to), b, 0o644)
		}
	}
}

// nodeURL connects to one node only, whatever its role: how the write probe reaches
// the old primary.
func (c *haCluster) nodeURL(node string) string {
	p := c.port + 1
	if node == "node2" {
		p = c.port + 2
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", p)
}

// useHA points the harness at the HA cluster (started on first use) for the round
// to come — with bouncer, the application's processes through PgBouncer (started on
// first use, with its follower); usePlain back at the throwaway server.
func (h *harness) useHA(ctx context.Context, bouncer bool) error {
	h.dropCitus()
	if h.ha == nil {
		h.log.Info("chaos: starting the pg_auto_failover cluster (scripts/ha.sh)")
		ha, err := startHA(ctx, h.logDir)
		if err != nil {
			return err
		}
		h.ha = ha
		if h.haPool, err = openPool(ctx, ha.URI, harnessApp, 16, 2*time.Second); err != nil {
			return fmt.Errorf("chaos: the harness pool on the HA cluster: %w", err)
		}
	}
	h.pool, h.proxyURL, h.appPool = h.haPool, h.ha.URI, h.haPool
	if !bouncer {
		return nil
	}
	if h.bouncerPool == nil {
		h.log.Info("chaos: starting PgBouncer and its follower (scripts/ha.sh pgbouncer)")
		if _, err := h.ha.run(ctx, "pgbouncer"); err != nil {
			return err
		}
		uri, err := h.ha.run(ctx, "pgbouncer-uri")
		if err != nil {
			return err
		}
		h.ha.BouncerURI = strings.TrimSpace(uri)
		if h.bouncerPool, err = openPool(ctx, h.ha.BouncerURI, harnessApp+"-bounced", 16, 2*time.Second); err != nil {
			return fmt.Errorf("chaos: the harness pool through PgBouncer: %w", err)
		}
	}
	h.proxyURL, h.appPool = h.ha.BouncerURI, h.bouncerPool
	return nil
}

// dropHA stops the HA cluster, if one runs, and closes the harness's pools on it: a
// Citus round does not share the two cores with an idle monitor, its nodes and
// PgBouncer (their health checks took a core's worth during CI's Citus rounds). A
// later HA round starts it again.
func (h *harness) dropHA() {
	if h.ha == nil {
		return
	}
	h.log.Info("chaos: stopping the pg_auto_failover cluster (the next round does not use it)")
	closePools(h.haPool, h.bouncerPool)
	h.ha.destroy()
	h.ha, h.haPool, h.bouncerPool = nil, nil, nil
}

func (h *harness) usePlain() { h.pool, h.proxyURL, h.appPool = h.plainPool, h.plainURL, h.plainPool }

// listenURL is where a round's workers and relays LISTEN: behind PgBouncer
// (failover-pgbouncer), PostgreSQL itself by the multi-host string, as
// docs/operations.md recommends; otherwise where their pool goes ("").
func (h *harness) listenURL(s *scenario) string {
	if s.pgbouncer && h.ha != nil {
		return h.ha.URI
	}
	return ""
}
