package chaos

// The Citus scenarios (issue #46): the same invariants on a Citus cluster started by
// scripts/citus.sh, the project's script a person would use, in a directory and on
// ports of the harness's own.
//
//	citus            worker processes SIGKILLed, client backends terminated on the
//	                 worker nodes (the coordinator's connections to them) and on the
//	                 coordinator (the children's), and worker nodes stopped — one
//	                 crash (immediate), one fast shutdown — and started again, while
//	                 a producer enqueues jobs and outbox events over many keys
//	citus-rebalance  online growth: a worker node added (citus.sh add-worker) and
//	                 citus_rebalance_start() moving shards onto it while producers,
//	                 workers and relays run; the pickup latency per window before,
//	                 during and after the move, and each move's time (citusrebalance.go)
//
// Both run the distributed layout (skiplock.MigrateOpts{Citus: true}) with the audit
// of audit.go: its tables that are written in a job's transaction or by its trigger
// (chaos_enqueued, chaos_transitions, chaos_revivals) are distributed by
// concurrency_key and co-located with jobs, so that each write stays on the job's
// node; chaos_audit and chaos_consumed stay plain tables on the coordinator. When the
// round has drained, the tables the check reads are copied into a plain schema on the
// coordinator (snapshotCitus) and the check (check.go) runs on that copy unchanged:
// its joins by job id are not joins Citus can run across shards.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/migrate"
)

// citusFaultPhase is the least fault phase of a Citus round.
const citusFaultPhase = 12 * time.Second

// citusKeys is how many concurrency keys the producer spreads its jobs and events
// over on Citus: enough for every shard of every node to hold some.
const citusKeys = 64

// citusRateShare is the share of the configured rate the producer offers in a Citus
// round. Three worker processes on the cluster, sharing 2 cores with its three
// servers and the producer, worked 10 to 25 jobs a second there, each claim walking the
// keys one statement at a time (docs/citus.md, "Workers on Citus"). At 40 a second the
// backlog grew through the round, pickup measured only the backlog (p50 25 s before
// CI's rebalance, 149 s during it), and CI's drain still held 736 and 905 jobs open at
// 90 s. A quarter (10 a second by default) the workers keep up with.
const citusRateShare = 4

// citusMaxWorkers bounds the worker nodes a cluster of the harness can grow to
// (citus-rebalance adds one per round): the ports reserved for it.
const citusMaxWorkers = 6

// citusShardCount is the shard count of the rounds' distributed tables (the
// coordinator's citus.shard_count). Citus's
// default is 32; 16 keeps a rebalance round's moves (a third of the shards, each
// copying six co-located shards) within CI's budget while every node holds several.
const citusShardCount = 16

var citusScenario = &scenario{
	name: "citus",
	summary: "on a Citus cluster (scripts/citus.sh, the distributed layout, jobs over 64 keys): worker processes SIGKILLed, client backends " +
		"terminated on the worker nodes and the coordinator, worker nodes crashed (immediate) and stopped (fast) and started again",
	citus: true, outbox: true, relayFaults: true, inject: injectCitus, recoverOn: "jobs",
}

var citusRebalanceScenario = &scenario{
	name: "citus-rebalance",
	summary: "online growth on Citus: a worker node added (citus.sh add-worker) and citus_rebalance_start() moving shards " +
		"under load; nothing lost or run twice, pickup p50/p99 per window before, during and after the move",
	// Moves with block_writes end with the shard's old placement dropped: a relay's
	// mark in flight may fail and its batch be delivered again (at least once).
	citus: true, outbox: true, relayFaults: true, inject: injectRebalance, verify: verifyRebalance, recoverOn: "jobs",
}

// citusCluster is a running cluster of scripts/citus.sh.
type citusCluster struct {
	script string
	dir    string
	port   int // the coordinator's; worker n takes port+n
	logf   string
	URL    string
}

// citusRequired reports whether a missing Citus fails the Citus scenarios (CI, or
// SKIPLOCK_REQUIRE_CITUS set) rather than skipping them.
func citusRequired() bool {
	return os.Getenv("CI") == "true" || os.Getenv("SKIPLOCK_REQUIRE_CITUS") != ""
}

// citusMissing says why the Citus scenarios cannot run here ("" when they can).
func citusMissing(ctx context.Context) string {
	script, err := findScript("citus.sh", "SKIPLOCK_CITUS_SCRIPT")
	if err != nil {
		return err.Error()
	}
	if out, err := exec.CommandContext(ctx, "bash", script, "installed").CombinedOutput(); err != nil {
		return "Citus is not installed (" + strings.TrimSpace(string(out)) + "; scripts/citus.sh build, or make test, installs it)"
	}
	return ""
}

// startCitus starts a cluster under a new temporary directory, on free ports, with
// synchronous_commit on: a node's crash must not lose what it acknowledged (the
// script's own clusters run with it off, as test clusters).
func startCitus(ctx context.Context, logDir string) (*citusCluster, error) {
	script, err := findScript("citus.sh", "SKIPLOCK_CITUS_SCRIPT")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "skiplock-chaos-citus-")
	if err != nil {
		return nil, fmt.Errorf("chaos: creating the Citus directory: %w", err)
	}
	os.Chmod(dir, 0o755) // as root, the script hands it to the postgres user
	port, err := freePorts(1 + citusMaxWorkers)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &citusCluster{script: script, dir: filepath.Join(dir, "cluster"), port: port, logf: filepath.Join(logDir, "citus.log")}
	out, err := c.run(ctx, "start")
	if err != nil {
		c.destroy()
		return nil, err
	}
	c.URL = strings.TrimSpace(out)
	for _, node := range []string{"coordinator", "worker1", "worker2"} {
		stmts := []string{"ALTER SYSTEM SET synchronous_commit = on"}
		if node == "coordinator" {
			stmts = append(stmts, "ALTER SYSTEM SET citus.shard_count = "+strconv.Itoa(citusShardCount))
		}
		if err := c.sql(ctx, node, append(stmts, "SELECT pg_reload_conf()")...); err != nil {
			c.destroy()
			return nil, err
		}
	}
	return c, nil
}

// nodeURL connects to one node directly.
func (c *citusCluster) nodeURL(node string) string {
	p := c.port
	if n, ok := strings.CutPrefix(node, "worker"); ok {
		k, _ := strconv.Atoi(n)
		p += k
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=%d", p, int(sessionWait.Seconds()))
}

// sql runs statements on one node, on a connection of its own.
func (c *citusCluster) sql(ctx context.Context, node string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, c.nodeURL(node))
	if err != nil {
		return fmt.Errorf("chaos: connecting to Citus node %s: %w", node, err)
	}
	defer conn.Close(context.Background())
	for _, st := range stmts {
		if _, err := conn.Exec(ctx, st); err != nil {
			return fmt.Errorf("chaos: on Citus node %s: %s: %w", node, st, err)
		}
	}
	return nil
}

// logTail is the last lines of one node's server log (what a node that did not start
// said), or why it cannot be read.
func (c *citusCluster) logTail(node string, lines int) string {
	b, err := os.ReadFile(filepath.Join(c.dir, node+".log"))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// run runs scripts/citus.sh with args (runScript).
func (c *citusCluster) run(ctx context.Context, args ...string) (string, error) {
	return runScript(ctx, c.script, c.logf, []string{"SKIPLOCK_CITUS_DIR=" + c.dir, "SKIPLOCK_CITUS_PORT=" + strconv.Itoa(c.port)}, args...)
}

// destroy keeps the nodes' logs beside the children's, then stops the cluster and
// removes its directory.
func (c *citusCluster) destroy() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			os.WriteFile(filepath.Join(filepath.Dir(c.logf), "citus-"+filepath.Base(l)), b, 0o644)
		}
	}
	c.run(ctx, "clean")
	os.RemoveAll(filepath.Dir(c.dir))
}

// dropCitus stops the Citus cluster, if one runs, and closes the harness's pools on
// it, as dropHA does for the HA cluster.
func (h *harness) dropCitus() {
	if h.citus == nil {
		return
	}
	h.log.Info("chaos: stopping the Citus cluster (the next round does not use it)")
	closePools(h.citusPool, h.citusAppPool)
	h.citus.destroy()
	h.citus, h.citusPool, h.citusAppPool = nil, nil, nil
}

// useCitus points the harness at the Citus coordinator (the cluster started on
// first use) for the round to come: the harness, the producer and the children all
// connect to it directly.
func (h *harness) useCitus(ctx context.Context) error {
	h.dropHA()
	if h.citus == nil {
		h.log.Info("chaos: starting the Citus cluster (scripts/citus.sh)")
		c, err := startCitus(ctx, h.logDir)
		if err != nil {
			return err
		}
		h.citus = c
		if h.citusPool, err = openPool(ctx, c.URL, harnessApp, 16, sessionWait); err != nil {
			return fmt.Errorf("chaos: the harness pool on the Citus coordinator: %w", err)
		}
		// The open producer's: a connection for each enqueue in flight, so that those
		// waiting for a moving shard hold up no other; one cut short keeps its session
		// (cancelOnTimeout).
		if h.citusAppPool, err = openPool(ctx, c.URL, harnessApp+"-producer", openInFlight, sessionWait, cancelOnTimeout); err != nil {
			return fmt.Errorf("chaos: the producer's pool on the Citus coordinator: %w", err)
		}
	} else {
		// A round before this one crashed nodes and terminated backends: a pooled
		// coordinator session may hold a cached connection to a worker node that is
		// gone, and fail its next distributed statement (08006). Fresh sessions open
		// fresh connections to the workers.
		h.citusPool.Reset()
		h.citusAppPool.Reset()
	}
	h.pool, h.proxyURL, h.appPool = h.citusPool, h.citus.URL, h.citusAppPool
	return nil
}

// onCoordinator runs one of the harness's own statements on the coordinator (not
// the load's), again after a connection error: a pooled session a fault terminated
// fails with 57P01, and one whose cached connection to a worker node died with that
// node's crash fails with class 08. The pool is reset before the next try, so it
// runs on a fresh session.
func (r *round) onCoordinator(ctx context.Context, what string, fn func() error) error {
	var err error
	for try := range 4 {
		if try > 0 {
			r.h.pool.Reset()
			if perr := pause(ctx, time.Duration(try)*250*time.Millisecond); perr != nil {
				break
			}
		}
		if err = fn(); err == nil || ctx.Err() != nil || !connectionError(err) {
			break
		}
		r.h.log.Warn("chaos: a harness statement on the Citus coordinator hit a connection error; trying again on a fresh session", "what", what, "err", err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// connectionError reports whether err is a lost connection: the client's own, a
// backend terminated (57P01), or a distributed statement's connection to a worker
// node (SQLSTATE class 08).
func connectionError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "57P01" || strings.HasPrefix(pe.Code, "08")
	}
	// A new session that did not come up in time (a coordinator slow to accept on a
	// loaded machine: one CI run's "failed to connect … timeout").
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	return pgconn.SafeToRetry(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// prepareCitus migrates the round's schema with the distributed layout and installs
// the audit: auditDDL's tables and functions, the tables written beside a job
// distributed by its key and co-located with jobs, then the triggers (on every shard
// of jobs; their writes name the row's key, so they stay on its node — what Citus
// calls an unsafe trigger, as the layout's own are).
func (r *round) prepareCitus(ctx context.Context) error {
	if _, err := skiplock.MigrateWith(ctx, r.h.pool, r.schema, skiplock.MigrateOpts{Citus: true}); err != nil {
		return fmt.Errorf("migrating %s with the Citus layout: %w", r.schema, err)
	}
	q := ident.Quote(r.schema)
	var stmts []string
	stmts = append(stmts, "SET LOCAL citus.enable_unsafe_triggers = on", "SET LOCAL citus.multi_shard_modify_mode = 'sequential'")
	stmts = append(stmts, migrate.Statements(auditDDL(r.schema))...)
	for _, t := range []string{"chaos_enqueued", "chaos_transitions", "chaos_revivals"} {
		stmts = append(stmts, fmt.Sprintf("SELECT create_distributed_table('%s.%s', 'concurrency_key', colocate_with => '%s.jobs')", q, t, q))
	}
	stmts = append(stmts, migrate.Statements(auditTriggersDDL(r.schema))...)
	err := pgx.BeginFunc(ctx, r.h.pool, func(tx pgx.Tx) error {
		for _, st := range stmts {
			if _, err := tx.Exec(ctx, st, pgx.QueryExecModeSimpleProtocol); err != nil {
				return fmt.Errorf("%w\n%s", err, st)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("installing the audit in %s on Citus: %w", r.schema, err)
	}
	return nil
}

// recoverPrepared runs the coordinator's recovery of two-phase commits and notes
// what it finished.
func (r *round) recoverPrepared(ctx context.Context) (int, error) {
	var n int
	if err := r.onCoordinator(ctx, "recover_prepared_transactions", func() error {
		return r.h.pool.QueryRow(ctx, "SELECT recover_prepared_transactions()").Scan(&n)
	}); err != nil {
		return 0, err
	}
	if n > 0 {
		r.note("recover_prepared_transactions() finished %d prepared transactions left by a crashed node (committed or rolled back as the coordinator decided)", n)
	}
	return n, nil
}

// snapshotTables are the tables the check reads; citusSnapshotIdx their indexes in the copy.
var (
	snapshotTables   = []string{"jobs", "outbox", "chaos_enqueued", "chaos_audit", "chaos_transitions", "chaos_revivals", "chaos_consumed"}
	citusSnapshotIdx = []string{"jobs (id)", "outbox (id)", "chaos_enqueued (job_id)", "chaos_audit (job_id, lease_token)",
		"chaos_transitions (job_id, seq)", "chaos_transitions (old_token)", "chaos_consumed (event_id)"}
)

// snapshotSchema is where a Citus round's check reads (auditSchema).
func (r *round) snapshotSchema() string { return r.schema + "_check" }

// auditSchema is the schema the check reads: the round's, or on Citus the plain copy
// snapshotCitus made of it.
func (r *round) auditSchema() string {
	if r.s.citus {
		return r.snapshotSchema()
	}
	return r.schema
}

// snapshotCitus copies the tables the check reads, once the round has drained, into
// plain tables of a schema of their own on the coordinator.
func (r *round) snapshotCitus(ctx context.Context) error {
	src, dst := ident.Quote(r.schema), ident.Quote(r.snapshotSchema())
	stmts := []string{"DROP SCHEMA IF EXISTS " + dst + " CASCADE", "CREATE SCHEMA " + dst}
	for _, t := range snapshotTables {
		stmts = append(stmts, "CREATE TABLE "+dst+"."+t+" AS SELECT * FROM "+src+"."+t)
	}
	for _, ix := range citusSnapshotIdx {
		stmts = append(stmts, "CREATE INDEX ON "+dst+"."+ix)
	}
	for _, st := range stmts {
		if _, err := r.h.pool.Exec(ctx, st); err != nil {
			return fmt.Errorf("copying the audit of %s for the check: %s: %w", r.schema, st, err)
		}
	}
	return nil
}

// injectCitus runs the citus scenario's faults, spread over the fault phase in a
// fixed rotation (so each kind comes at least once): a worker process SIGKILLed,
// the worker nodes' client backends terminated, a worker node crashed and started,
// the children's backends on the coordinator terminated, a worker node stopped
// (fast) and started.
func injectCitus(ctx context.Context, r *round) error {
	began := wallNow()
	kinds := []string{"sigkill", "terminate-workers", "crash-node", "terminate-coordinator", "sigkill", "stop-node"}
	n := max(r.p.faults*2, len(kinds))
	node := 1 + r.rng.IntN(2)
	if err := atTimes(ctx, r.spread(n, r.p.faultPhase-2*time.Second), func(i int) error {
		start := wallNow()
		switch k := kinds[i%len(kinds)]; k {
		case "sigkill":
			return r.killWorker(ctx)
		case "terminate-workers":
			total := 0
			for _, w := range []string{"worker1", "worker2"} {
				n, err := r.terminateOnNode(ctx, w)
				if err != nil {
					return err
				}
				total += n
			}
			r.mark(fmt.Sprintf("terminated %d client backends on the worker nodes", total), start)
		case "terminate-coordinator":
			n, err := r.terminateWhenConnected(ctx)
			if err != nil {
				return err
			}
			r.mark(fmt.Sprintf("terminated %d children's backends on the coordinator", n), start)
		case "crash-node", "stop-node":
			mode := "immediate"
			if k == "stop-node" {
				mode = "fast"
			}
			w := "worker" + strconv.Itoa(node)
			node = 3 - node // the other one next time
			if _, err := r.h.citus.run(ctx, "stop-node", w, mode); err != nil {
				return err
			}
			if err := pause(ctx, time.Second); err != nil { // statements for its keys fail meanwhile
				return err
			}
			if _, err := r.h.citus.run(ctx, "start"); err != nil {
				return err
			}
			r.mark(fmt.Sprintf("%s stopped (%s) and started", w, mode), start)
		}
		return nil
	}); err != nil {
		return err
	}
	return finishPhase(ctx, r, began)
}

// terminateOnNode ends the client backends on one node — on a worker node, the
// coordinator's connections to it, whatever statement or transaction they are in —
// and returns how many.
func (r *round) terminateOnNode(ctx context.Context, node string) (int, error) {
	conn, err := pgx.Connect(ctx, r.h.citus.nodeURL(node))
	if err != nil {
		return 0, fmt.Errorf("connecting to %s: %w", node, err)
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = current_database()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("terminating backends on %s: %w", node, err)
	}
	return n, nil
}
