package chaos

// The failover scenarios (issue #48): a real pg_auto_failover cluster (hacluster.go)
// loses its primary under the usual load — producers enqueuing jobs with their
// business rows (chaos_enqueued) and outbox events in one transaction, worker
// processes, relays publishing — and every process reaches it the way users do, with
// the multi-host connection string and target_session_attrs=read-write.
//
//	failover       a planned switchover (pg_autoctl perform failover): the primary is
//	               demoted, the synchronous standby promoted, the old primary rejoins
//	failover-kill  the primary's machine is lost (SIGKILL of its pg_autoctl and
//	               postgres): the monitor promotes the standby; the lost node is then
//	               started again and rejoins as a standby (pg_rewind)
//	failover-async the same with asynchronous replication: what the lost primary
//	               takes with it is measured (verifyAsync), not a violation
//
// Besides the usual invariants (lost, double success, stale writes — the lease token
// carries across the promotion, so a worker that claimed on the old primary cannot
// complete on the new one unless its lease still holds there), the round checks:
//
//   - the old primary never accepts a skiplock write once the standby has been
//     promoted: a probe enqueues through a connection to the old primary alone
//     (no target_session_attrs) every 50 ms, from before the fault until it is a
//     standby again; what it was told was committed must exist at the end
//   - leases held at the failover are reclaimed only after they expired
//   - the periodic schedule (every second, on every worker) fires each fire time
//     once: none twice, none missed
//   - /readyz (package health) answers not-ready while no node is a writable primary
//     (one whose commits return: out of recovery is not enough, see watchNode)
//   - an outage is logged once per process and operation, not once per retry
//   - (failover-kill) the limits scenario's concurrency limits are never exceeded
//
// and measures, per failover, how long after its start each component worked again
// (producer, workers, relay, dashboard, metrics, /readyz) and the pickup latency of
// the jobs enqueued around it.

import (
	"context"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/health"
	"github.com/skiplock/skiplock/metrics"
	"github.com/skiplock/skiplock/outbox"
)

var switchoverScenario = &scenario{
	name:    "failover",
	summary: "pg_auto_failover switchover (perform failover) under load; the old primary rejoins as a standby",
	outbox:  true, relayFaults: true, failover: "switchover",
	setup: setupHA, inject: injectFailover, verify: verifyHA, recoverOn: "jobs",
}

// killPrimaryScenario also runs the limits scenario's saturated queue (limits.go): its
// concurrency limits must hold across the promotion, replayed by the same audit.
var killPrimaryScenario = &scenario{
	name:    "failover-kill",
	summary: "the primary's machine is lost (SIGKILL of pg_autoctl and postgres); the standby is promoted; the old primary returns as a standby and never takes a write; concurrency limits hold",
	outbox:  true, relayFaults: true, failover: "kill",
	queues: map[string]int{limQueue: limWorkers},
	setup: func(ctx context.Context, r *round) error {
		if err := setupHA(ctx, r); err != nil {
			return err
		}
		return setupLimits(ctx, r)
	},
	feed:   feedLimits,
	inject: injectFailover,
	verify: func(ctx context.Context, r *round, row *Row) error {
		if err := verifyHA(ctx, r, row); err != nil {
			return err
		}
		return verifyLimits(ctx, r, row)
	},
	recoverOn: "jobs",
}

// asyncKillScenario measures, rather than promises: with both nodes out of the
// replication quorum, a lost primary takes with it what it had committed and not yet
// sent. How many acknowledged commits that is (the RPO at the producer's rate) is
// reported; each must be lost whole — its job, its business row and its event, never
// one without the others — which the audit tables show. Not in the short profile.
var asyncKillScenario = &scenario{
	name:    "failover-async",
	summary: "asynchronous replication, then the primary's machine is lost: measures the acknowledged commits lost (RPO), each lost whole",
	outbox:  true, relayFaults: true, failover: "kill", async: true,
	setup: func(ctx context.Context, r *round) error {
		if _, err := r.h.ha.run(ctx, "async"); err != nil {
			return err
		}
		return setupHA(ctx, r)
	},
	inject: injectFailover, verify: verifyAsync, recoverOn: "jobs",
}

// bouncerScenario is the application behind PgBouncer: producer, workers, relays,
// dashboard, metrics and /readyz reach the cluster through one PgBouncer in
// transaction pooling (pgx in exec mode), which its follower repoints when the
// monitor names a new primary (scripts/ha.sh pgbouncer); the workers' and relays'
// LISTEN connections go to PostgreSQL itself (Config.ListenURL, the multi-host string).
// A switchover in the short profile; a soak alternates switchovers and lost primaries.
var bouncerScenario = &scenario{
	name:    "failover-pgbouncer",
	summary: "the application reaches the pair through PgBouncer (transaction pooling), repointed by a follower of the monitor; a switchover (a soak alternates with lost primaries)",
	outbox:  true, relayFaults: true, failover: "mixed", pgbouncer: true,
	setup: setupHA, inject: injectFailover, verify: verifyHA, recoverOn: "jobs",
}

// haRun watches a failover round: each node's role, the in-process components and
// the failovers themselves.
type haRun struct {
	r      *round
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	close  []func()

	mu        sync.Mutex
	state     map[string]string      // node → "primary" (its commits return), "blocked", "standby" or "down"
	writable  map[string][]time.Time // node → when each of its watcher's checks that found it writable began
	changes   []nodeChange
	probes    map[string][]probeResult // component → its probes, in order
	failovers []*failoverRec
}

type nodeChange struct {
	at          time.Time
	node, state string
}

type probeResult struct {
	start, end time.Time
	ok         bool
}

// failoverRec is one failover: when it began, when the new primary was first seen
// writable, when both nodes were primary and secondary again, and the writes the old
// primary was sent (by when each began) and accepted.
type failoverRec struct {
	kind, old, new string
	start          time.Time
	oldLost        time.Time // the old primary first seen not writable
	promoted       time.Time // the new primary first seen writable
	healthy        time.Time
	tries          int
	accepted       []time.Time
}

// componentNames are the probed components, in report order.
var componentNames = []string{"dashboard", "metrics", "readyz"}

func setupHA(ctx context.Context, r *round) error {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &haRun{r: r, cancel: cancel, state: map[string]string{}, writable: map[string][]time.Time{}, probes: map[string][]probeResult{}}
	r.ha = w
	for _, n := range haNodes {
		w.wg.Go(func() { w.watchNode(wctx, n) })
	}
	probes, err := w.components(ctx)
	if err != nil {
		return err
	}
	for name, probe := range probes {
		w.wg.Go(func() { w.probeLoop(wctx, name, probe) })
	}
	// The round starts only once the watchers have seen the cluster.
	_, err = w.waitPrimary(ctx, 30*time.Second)
	return err
}

// stop ends the watchers and probers; later calls do nothing.
func (w *haRun) stop() {
	w.once.Do(func() {
		w.cancel()
		w.wg.Wait()
		for _, c := range w.close {
			c()
		}
		if w.r.s.async { // the next round's cluster is synchronous again
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := w.r.h.ha.run(ctx, "sync"); err != nil {
				w.r.note("restoring synchronous replication: %v", err)
			}
		}
	})
}

// watchNode records node's role every 50 ms over a connection to it alone.
func (w *haRun) watchNode(ctx context.Context, node string) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	url := w.r.h.ha.nodeURL(node)
	for ctx.Err() == nil {
		state := "down"
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			c, err := pgx.Connect(cctx, url)
			cancel()
			if err == nil {
				conn = c
			}
		}
		began := wallNow()
		if conn != nil {
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			var recovering bool
			err := conn.QueryRow(qctx, "SELECT pg_is_in_recovery()").Scan(&recovering)
			cancel()
			switch {
			case err != nil:
				conn.Close(context.Background())
				conn = nil
			case recovering:
				state = "standby"
			default:
				// Out of recovery is not writable yet: pg_auto_failover fences a primary it
				// is demoting (draining), and one it is promoting until it has seen the old
				// one go, with default_transaction_read_only; and a commit waits for the
				// synchronous standbys it requires. The check is Client.CheckWritable's.
				state = "blocked"
				wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				var readOnly bool
				var xid int64
				err := conn.QueryRow(wctx, "SELECT current_setting('transaction_read_only')::bool, txid_current()").Scan(&readOnly, &xid)
				cancel()
				switch {
				case err == nil && !readOnly:
					state = "primary"
				case conn.IsClosed():
					conn = nil
				}
			}
		}
		w.mu.Lock()
		if state == "primary" {
			w.writable[node] = append(w.writable[node], began)
		}
		if w.state[node] != state {
			w.state[node] = state
			w.changes = append(w.changes, nodeChange{at: wallNow(), node: node, state: state})
		}
		w.mu.Unlock()
		if pause(ctx, 50*time.Millisecond) != nil {
			return
		}
	}
}

// waitPrimary waits until one node is primary and the other standby, and returns the primary.
func (w *haRun) waitPrimary(ctx context.Context, within time.Duration) (string, error) {
	deadline := wallNow().Add(within)
	for {
		w.mu.Lock()
		var primary string
		standbys := 0
		for _, n := range haNodes {
			switch w.state[n] {
			case "primary":
				primary = n
			case "standby":
				standbys++
			}
		}
		w.mu.Unlock()
		if primary != "" && standbys == 1 {
			return primary, nil
		}
		if wallNow().After(deadline) {
			return "", fmt.Errorf("no primary with a standby within %s (nodes: %v)", within, w.snapshotState())
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return "", err
		}
	}
}

// waitState waits until node is in state.
func (w *haRun) waitState(ctx context.Context, node, state string, within time.Duration) error {
	deadline := wallNow().Add(within)
	for {
		w.mu.Lock()
		s := w.state[node]
		w.mu.Unlock()
		if s == state {
			return nil
		}
		if wallNow().After(deadline) {
			return fmt.Errorf("%s not %s within %s (nodes: %v)", node, state, within, w.snapshotState())
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func (w *haRun) snapshotState() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	for k, v := range w.state {
		out[k] = v
	}
	return out
}

// firstChange returns when node was first seen in (or, with not, out of) state at or
// after from; zero if never.
func (w *haRun) firstChange(node, state string, not bool, from time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.changes {
		if c.node == node && !c.at.Before(from) && (c.state == state) != not {
			return c.at
		}
	}
	return time.Time{}
}

// components builds the in-process dashboard, metrics and /readyz of a client that
// connects as users do (the multi-host URI), and returns their probes.
func (w *haRun) components(ctx context.Context) (map[string]func(context.Context) bool, error) {
	pool, err := openPool(ctx, w.r.h.proxyURL, fmt.Sprintf("chaos-r%02d-components", w.r.h.round), 6, time.Second)
	if err != nil {
		return nil, fmt.Errorf("the components' pool: %w", err)
	}
	quiet := slog.New(slog.DiscardHandler)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: w.r.schema, Logger: quiet})
	if err != nil {
		pool.Close()
		return nil, err
	}
	ob, err := outbox.New(client, outbox.Config{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	dash, err := dashboard.New(client, ob, dashboard.Options{Logger: quiet})
	if err != nil {
		pool.Close()
		return nil, err
	}
	m := metrics.New(client, metrics.Options{MinInterval: 100 * time.Millisecond, Timeout: time.Second})
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		m.Close()
		pool.Close()
		return nil, err
	}
	ready := health.Handler(client, health.Options{Timeout: time.Second})
	w.close = append(w.close, func() { m.Close(); client.Close(); pool.Close() })
	get := func(h http.Handler, path string) func(context.Context) bool {
		return func(ctx context.Context) bool {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
			return rec.Code == http.StatusOK
		}
	}
	return map[string]func(context.Context) bool{
		"dashboard": get(dash, "/"),
		"readyz":    get(ready, "/readyz"),
		"metrics": func(context.Context) bool {
			mfs, err := reg.Gather()
			if err != nil {
				return false
			}
			for _, mf := range mfs {
				if mf.GetName() == "skiplock_stats_up" && len(mf.GetMetric()) == 1 {
					return mf.GetMetric()[0].GetGauge().GetValue() == 1
				}
			}
			return false
		},
	}, nil
}

// probeLoop runs probe every 100 ms (each bounded by 2 s) and records the results.
func (w *haRun) probeLoop(ctx context.Context, name string, probe func(context.Context) bool) {
	for ctx.Err() == nil {
		start := wallNow()
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		w.probes[name] = append(w.probes[name], probeResult{start: start, end: wallNow(), ok: ok})
		w.mu.Unlock()
		if pause(ctx, 100*time.Millisecond) != nil {
			return
		}
	}
}

func otherNode(n string) string {
	if n == "node1" {
		return "node2"
	}
	return "node1"
}

// injectFailover fails over once (a soak: at least twice, each from the node the last
// one promoted, so a switchover round always switches back).
func injectFailover(ctx context.Context, r *round) error {
	began := wallNow()
	n := 1
	if r.h.cfg.Soak {
		n = max(2, r.p.faults/2)
	}
	for i := 0; i < n; i++ {
		kind := r.s.failover
		if kind == "mixed" { // switchover first, then a lost primary, and so on
			kind = []string{"switchover", "kill"}[i%2]
		}
		if err := r.ha.failover(ctx, kind); err != nil {
			return err
		}
	}
	return finishPhase(ctx, r, began)
}

// failover runs one failover of kind ("switchover" or "kill") while probing the old
// primary with writes, and returns once both nodes are primary and standby again.
func (w *haRun) failover(ctx context.Context, kind string) error {
	r := w.r
	// Only once the primary's commits wait for the standby (scripts/ha.sh wait checks
	// pg_stat_replication on the primary, not only the monitor's states; an async round
	// took both nodes out of the quorum and skips that): a failover begun while the
	// monitor has the primary committing alone (wait_primary, the standby found
	// unhealthy) may lose what it acknowledged, which is what the async round
	// measures, not a fault of skiplock's.
	if _, err := r.h.ha.run(ctx, "wait"); err != nil {
		return err
	}
	old, err := w.waitPrimary(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	rec := &failoverRec{kind: kind, old: old, new: otherNode(old), start: wallNow()}
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() { defer close(probeDone); w.probeOld(probeCtx, rec) }()
	fail := func(err error) error {
		stopProbe()
		<-probeDone
		return err
	}
	switch kind {
	case "switchover":
		if _, err := r.h.ha.run(ctx, "failover"); err != nil {
			return fail(err)
		}
	case "kill":
		if _, err := r.h.ha.run(ctx, "kill"); err != nil {
			return fail(err)
		}
		if err := w.waitState(ctx, rec.new, "primary", 90*time.Second); err != nil {
			return fail(fmt.Errorf("after the kill: %w", err))
		}
		// The lost machine comes back: its node starts again and must rejoin as a standby.
		if _, err := r.h.ha.run(ctx, "start"); err != nil {
			return fail(err)
		}
	default:
		return fail(fmt.Errorf("unknown failover kind %q", kind))
	}
	if _, err := w.waitPrimary(ctx, 60*time.Second); err != nil {
		return fail(err)
	}
	rec.healthy = wallNow()
	// Keep writing to the old primary, a standby now, a little longer.
	err = pause(ctx, 2*time.Second)
	stopProbe()
	<-probeDone
	rec.oldLost = w.firstChange(old, "primary", true, rec.start)
	rec.promoted = w.firstChange(rec.new, "primary", false, rec.start)
	w.mu.Lock()
	w.failovers = append(w.failovers, rec)
	w.mu.Unlock()
	r.mark(fmt.Sprintf("%s %s → %s", kind, old, rec.new), rec.start)
	return err
}

// probeOld enqueues a job (with its business row, in one transaction) every 50 ms
// through a pool connected to the old primary alone, recording when each accepted
// one began. Its acknowledged jobs join the round's: they must exist at the end.
func (w *haRun) probeOld(ctx context.Context, rec *failoverRec) {
	r := w.r
	pool, err := openPool(ctx, r.h.ha.nodeURL(rec.old), fmt.Sprintf("chaos-r%02d-old-primary-probe", r.h.round), 2, time.Second)
	if err != nil {
		r.note("the old primary's write probe could not start: %v", err)
		return
	}
	defer pool.Close()
	p, err := newProducer(pool, r.schema, false, mrand.New(mrand.NewPCG(r.h.cfg.Seed, uint64(r.h.round)<<32|7)), slog.New(slog.DiscardHandler))
	if err != nil {
		return
	}
	defer p.client.Close()
	r.mu.Lock()
	r.probes = append(r.probes, p)
	r.mu.Unlock()
	for ctx.Err() == nil {
		began := wallNow()
		ok := p.enqueueOne(ctx, false)
		w.mu.Lock()
		rec.tries++
		if ok {
			rec.accepted = append(rec.accepted, began)
		}
		w.mu.Unlock()
		if pause(ctx, 50*time.Millisecond) != nil {
			return
		}
	}
}

// writableAfter returns the watcher's writable checks of node (the begin times of
// those whose commit returned) that began in (from, to]: begun once the other node
// was already seen writable, such a commit could not have waited for the standby,
// which had been promoted — the old primary returned commits by itself, a split
// brain, and what it took then is lost when it rejoins (pg_rewind). A commit begun
// before the promotion may return after it (its standby acknowledged it first), so
// checks are judged by when they began.
func writableAfter(checks []time.Time, from, to time.Time) (n int, first, last time.Time) {
	for _, t := range checks {
		if t.After(from) && !t.After(to) {
			if n == 0 {
				first = t
			}
			n, last = n+1, t
		}
	}
	return n, first, last
}
