package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/pgcluster"
	"github.com/skiplock/skiplock/skiplocktest"
)

// scenario is one kind of fault.
type scenario struct {
	name    string
	summary string
	outbox  bool // relays and the consumer run
	broker  bool // the relays publish to RabbitMQ instead of webhooks
	// relayFaults: the fault can hit a relay between publish and mark (or its
	// database), so duplicate deliveries are allowed.
	relayFaults bool
	holdOnly    bool // duplicates only for events of a batch killed between publish and mark
	inProcess   int  // workers that are in-process clients with fake clocks
	zombie      bool // the first worker also runs the low-level loop the zombie fault freezes
	// langs: the worker processes are the Python and Node clients and a worker on the
	// HTTP gateway (lang.go), not Go.
	langs     bool
	recoverOn string
	inject    func(ctx context.Context, r *round) error
	// The flow-control scenarios (limits.go): queues every worker also serves (with
	// their MaxWorkers); setup runs once the workers run, before the producer starts;
	// feed runs beside the producer until it stops; verify adds checks to the row.
	queues map[string]int
	setup  func(ctx context.Context, r *round) error
	feed   func(ctx context.Context, r *round)
	verify func(ctx context.Context, r *round, row *Row) error
	// failover: the round runs on the pg_auto_failover cluster (hacluster.go), its
	// workers also run a periodic schedule, and the fault is a "switchover" or a
	// "kill" of the primary (hawatch.go).
	failover string
	// async: the round runs with asynchronous replication (hawatch.go): acknowledged
	// commits a lost primary takes with it are measured, not violations.
	async bool
	// pgbouncer: the application's processes (producer, workers, relays, components)
	// reach the HA cluster through PgBouncer in transaction pooling, which its
	// follower points at the primary (scripts/ha.sh pgbouncer); workers and relays
	// LISTEN on PostgreSQL itself (Config.ListenURL: the multi-host string).
	pgbouncer bool
	// citus: the round runs on a Citus cluster (citus.go) with the distributed layout.
	citus bool
}

// Scenarios lists the scenario names in the order a short run uses.
func Scenarios() []string {
	out := make([]string, len(allScenarios))
	for i, s := range allScenarios {
		out[i] = s.name
	}
	return out
}

// ScenarioSummary describes a scenario.
func ScenarioSummary(name string) string {
	for _, s := range allScenarios {
		if s.name == name {
			return s.summary
		}
	}
	return ""
}

var allScenarios = []*scenario{
	{name: "worker-sigkill", summary: "SIGKILL worker processes mid-job at random moments; restart them", inject: injectSigkill, recoverOn: "jobs"},
	langScenario,
	{name: "terminate-backend", summary: "pg_terminate_backend of every worker, listener and relay connection", outbox: true, relayFaults: true, inject: injectTerminate, recoverOn: "jobs"},
	{name: "pg-restart", summary: "PostgreSQL immediate restart (crash) under load", outbox: true, relayFaults: true, inject: injectRestart, recoverOn: "jobs"},
	{name: "proxy-drop", summary: "the proxy between workers/relays and PostgreSQL drops every connection", outbox: true, relayFaults: true, inject: injectProxyDrop, recoverOn: "jobs"},
	{name: "proxy-stall", summary: "the proxy stops forwarding for longer than a lease, then resumes", outbox: true, relayFaults: true, inject: injectProxyStall, recoverOn: "jobs"},
	{name: "zombie-sigstop", summary: "SIGSTOP a worker past its lease, SIGCONT it: its late completions must change nothing", zombie: true, inject: injectZombie, recoverOn: "jobs"},
	{name: "clock-jump", summary: "in-process clients whose injected clocks jump forward and backward", inProcess: 2, inject: injectClockJump, recoverOn: "jobs"},
	{name: "idle-in-tx", summary: "a session idle in transaction holds back xmin", inject: injectIdleTx, recoverOn: "jobs"},
	pinScenario,
	{name: "migrators", summary: "10 migrator processes start at once against the live system", inject: injectMigrators, recoverOn: "jobs"},
	limitsScenario,
	rateScenario,
	fairScenario,
	{name: "relay-kill", summary: "relays SIGKILLed between publish and mark", outbox: true, relayFaults: true, holdOnly: true, inject: injectRelayKill, recoverOn: "events"},
	{name: "broker-restart", summary: "RabbitMQ stopped (stop_app) and started again under load", outbox: true, broker: true, relayFaults: true, inject: injectBrokerRestart, recoverOn: "events"},
	switchoverScenario,
	killPrimaryScenario,
	asyncKillScenario,
	bouncerScenario,
	citusScenario,
	citusRebalanceScenario,
}

func selectScenarios(names []string) ([]*scenario, error) {
	if len(names) == 0 {
		return allScenarios, nil
	}
	var out []*scenario
	for _, n := range names {
		n = strings.TrimSpace(n)
		found := false
		for _, s := range allScenarios {
			if s.name == n {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("%w %q (have: %s)", errNoScenario, n, strings.Join(Scenarios(), ", "))
		}
	}
	return out, nil
}

// spread returns n instants spread over d with random jitter, as offsets from now.
func (r *round) spread(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	slot := d / time.Duration(n)
	for i := range out {
		out[i] = time.Duration(i)*slot + time.Duration(r.rng.Int64N(int64(slot)))
	}
	return out
}

// atTimes calls fn at each offset from now (fault timing), in order.
func atTimes(ctx context.Context, offsets []time.Duration, fn func(i int) error) error {
	start := wallNow()
	for i, off := range offsets {
		if err := pause(ctx, time.Until(start.Add(off))); err != nil {
			return err
		}
		if err := fn(i); err != nil {
			return err
		}
	}
	return nil
}

// finishPhase waits out the rest of the fault phase.
func finishPhase(ctx context.Context, r *round, began time.Time) error {
	return pause(ctx, time.Until(began.Add(r.p.faultPhase)))
}

func injectSigkill(ctx context.Context, r *round) error {
	began := wallNow()
	if err := atTimes(ctx, r.spread(max(r.p.faults, 2), r.p.faultPhase), func(int) error {
		return r.killWorker(ctx)
	}); err != nil {
		return err
	}
	return finishPhase(ctx, r, began)
}

// killWorker SIGKILLs a random live worker process and starts a new one.
func (r *round) killWorker(ctx context.Context) error {
	live := r.liveWorkers()
	if len(live) == 0 {
		return errors.New("no live worker to kill")
	}
	victim := live[r.rng.IntN(len(live))]
	start := wallNow()
	victim.kill()
	_, err := r.startWorker(ctx, false)
	r.mark("SIGKILL "+victim.name, start)
	return err
}

// terminateBackends ends the chaos children's backends (workers' pools, listeners,
// relays), leaving the harness's own sessions alone.
func (r *round) terminateBackends(ctx context.Context) (int, error) {
	var n int
	err := r.h.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
FROM pg_stat_activity WHERE application_name LIKE 'chaos-r%' AND pid <> pg_backend_pid()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("terminating backends: %w", err)
	}
	return n, nil
}

// reconnectWait bounds how long a termination fault waits for the children to
// have a backend again. Two faults can fall a few milliseconds apart (spread picks
// a random instant in each slot), and after the first every child is between its
// lost connection and its next one; finding none then is the children's normal
// reconnect, not a failed injection. A child that has no backend for this long
// has stopped reconnecting, which is a failure.
const reconnectWait = 10 * time.Second

// terminateWhenConnected ends the chaos children's backends, first waiting up to
// reconnectWait for at least one to exist. It returns how many it ended.
func (r *round) terminateWhenConnected(ctx context.Context) (int, error) {
	deadline := wallNow().Add(reconnectWait)
	for {
		n, err := r.terminateBackends(ctx)
		if err != nil || n > 0 {
			return n, err
		}
		if wallNow().After(deadline) {
			return 0, fmt.Errorf("pg_terminate_backend found no chaos backend for %v: the children stopped reconnecting", reconnectWait)
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

func injectTerminate(ctx context.Context, r *round) error {
	began := wallNow()
	if err := atTimes(ctx, r.spread(r.p.faults, r.p.faultPhase), func(int) error {
		start := wallNow()
		n, err := r.terminateWhenConnected(ctx)
		if err != nil {
			return err
		}
		r.mark(fmt.Sprintf("terminated %d backends", n), start)
		return nil
	}); err != nil {
		return err
	}
	return finishPhase(ctx, r, began)
}

func injectRestart(ctx context.Context, r *round) error {
	began := wallNow()
	restarts := 1
	if r.h.cfg.Soak {
		restarts = 1 + r.rng.IntN(3)
	}
	if err := atTimes(ctx, r.spread(restarts, r.p.faultPhase-time.Second), func(int) error {
		start := wallNow()
		if err := r.h.cluster.Restart(ctx, pgcluster.Immediate); err != nil {
			return fmt.Errorf("restarting PostgreSQL: %w", err)
		}
		r.mark("immediate restart", start)
		return nil
	}); err != nil {
		return err
	}
	return finishPhase(ctx, r, began)
}

func injectProxyDrop(ctx context.Context, r *round) error {
	began := wallNow()
	if err := atTimes(ctx, r.spread(r.p.faults, r.p.faultPhase), func(int) error {
		start := wallNow()
		n := r.h.proxy.DropAll()
		r.mark(fmt.Sprintf("proxy dropped %d connections", n), start)
		return nil
	}); err != nil {
		return err
	}
	return finishPhase(ctx, r, began)
}

func injectProxyStall(ctx context.Context, r *round) error {
	began := wallNow()
	if err := pause(ctx, time.Duration(r.rng.Int64N(int64(time.Second)))); err != nil {
		return err
	}
	start := wallNow()
	r.h.proxy.Stall()
	err := pause(ctx, r.p.stall)
	r.h.proxy.Resume()
	if err != nil {
		return err
	}
	r.mark(fmt.Sprintf("proxy stalled %s", r.p.stall.Round(time.Millisecond)), start)
	return finishPhase(ctx, r, began)
}

// injectZombie freezes the worker that runs the low-level loop right after it
// claimed jobs, keeps it frozen past its lease (the others reclaim and finish its
// jobs), then thaws it: its Complete calls must all come back ErrLeaseLost.
func injectZombie(ctx context.Context, r *round) error {
	began := wallNow()
	var zombie *proc
	for _, p := range r.liveWorkers() {
		if strings.HasSuffix(p.name, "-zombie") {
			zombie = p
		}
	}
	if zombie == nil {
		return errors.New("no zombie worker")
	}
	stops := 1
	if r.h.cfg.Soak {
		stops = max(1, r.p.faults/2)
	}
	for i := 0; i < stops; i++ {
		zombie.drainLines()
		if _, err := zombie.waitLine(ctx, "holding", 30*time.Second); err != nil {
			return err
		}
		start := wallNow()
		if err := zombie.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		err := pause(ctx, r.p.zombieStop)
		if cerr := zombie.signal(syscall.SIGCONT); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		r.mark(fmt.Sprintf("SIGSTOP %s for %s", zombie.name, r.p.zombieStop.Round(time.Millisecond)), start)
	}
	return finishPhase(ctx, r, began)
}

// inProcWorker is a client in the harness process on a fake clock that follows the
// wall clock plus an offset, which the clock-jump scenario changes.
type inProcWorker struct {
	w      *worker
	pool   *pgxpool.Pool
	clock  *skiplocktest.FakeClock
	mu     sync.Mutex
	offset time.Duration
	stopCh chan struct{}
	done   chan struct{}
}

func (r *round) startInProc(ctx context.Context, i int) (*inProcWorker, error) {
	cfg, err := pgxpool.ParseConfig(r.h.proxyURL)
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("r%02d-inproc-%d", r.h.round, i)
	cfg.MaxConns = 8
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	cfg.ConnConfig.RuntimeParams["application_name"] = "chaos-" + id
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening %s's pool: %w", id, err)
	}
	ip := &inProcWorker{pool: pool, clock: skiplocktest.NewFakeClock(wallNow()), stopCh: make(chan struct{}), done: make(chan struct{})}
	go ip.tick()
	w, err := newWorker(pool, r.schema, id, r.h.workerSpec(false), ip.clock, r.log)
	if err == nil {
		err = w.start(ctx)
	}
	if err != nil {
		close(ip.stopCh)
		<-ip.done
		pool.Close()
		return nil, err
	}
	ip.w = w
	return ip, nil
}

// tick keeps the fake clock at wall time plus the offset.
func (ip *inProcWorker) tick() {
	defer close(ip.done)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ip.stopCh:
			return
		case <-t.C:
		}
		ip.mu.Lock()
		ip.clock.Set(wallNow().Add(ip.offset))
		ip.mu.Unlock()
	}
}

func (ip *inProcWorker) jump(offset time.Duration) {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	ip.offset = offset
	ip.clock.Set(wallNow().Add(offset))
}

func (ip *inProcWorker) stop() {
	ip.jump(0)
	ip.w.stop(3 * time.Second)
	close(ip.stopCh)
	<-ip.done
	ip.pool.Close()
}

// injectClockJump jumps one client's clock forward past every lease (its reclaimer
// then takes everyone's running jobs, whose completions must be fenced out) and the
// other's backward (its heartbeats write leases that have already expired for
// everyone else), then brings both back.
func injectClockJump(ctx context.Context, r *round) error {
	if len(r.inproc) < 2 {
		return errors.New("clock-jump needs two in-process clients")
	}
	began := wallNow()
	jumps := r.spread(max(r.p.faults, 2), r.p.faultPhase-2*time.Second)
	if err := atTimes(ctx, jumps, func(i int) error {
		fwd, back := r.inproc[0], r.inproc[1]
		if i%2 == 1 {
			fwd, back = back, fwd
		}
		ahead := leaseDuration*2 + time.Duration(r.rng.Int64N(int64(3*time.Second)))
		behind := -(time.Minute + time.Duration(r.rng.Int64N(int64(time.Minute))))
		start := wallNow()
		fwd.jump(ahead)
		back.jump(behind)
		err := pause(ctx, 1500*time.Millisecond)
		fwd.jump(0)
		back.jump(0)
		r.mark(fmt.Sprintf("clocks jumped %s and %s", ahead.Round(time.Millisecond), behind.Round(time.Second)), start)
		return err
	}); err != nil {
		return err
	}
	return finishPhase(ctx, r, began)
}

// injectIdleTx holds a transaction with an xid and a snapshot open, idle, so vacuum
// cannot remove the dead rows every claim and completion leave behind.
func injectIdleTx(ctx context.Context, r *round) error {
	began := wallNow()
	conn, err := r.h.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquiring the idle session: %w", err)
	}
	defer conn.Release()
	start := wallNow()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return fmt.Errorf("beginning the idle transaction: %w", err)
	}
	defer tx.Rollback(context.Background())
	var xid int64
	if err := tx.QueryRow(ctx, "SELECT txid_current() FROM "+ident.Quote(r.schema)+".jobs LIMIT 1").Scan(&xid); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("taking a snapshot: %w", err)
	}
	if err := pause(ctx, r.p.idleTx); err != nil {
		return err
	}
	var dead int64
	r.h.pool.QueryRow(ctx, "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'", r.schema).Scan(&dead)
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("ending the idle transaction: %w", err)
	}
	r.mark(fmt.Sprintf("idle in transaction %s", r.p.idleTx.Round(time.Second)), start)
	r.note("dead job tuples held back at release: %d", dead)
	return finishPhase(ctx, r, began)
}

// injectMigrators starts 10 migrator processes at once; each migrates the live
// schema (nothing to do) and a fresh one (all of them race to create it).
func injectMigrators(ctx context.Context, r *round) error {
	began := wallNow()
	fresh := r.schema + "_fresh"
	defer r.h.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+ident.Quote(fresh)+" CASCADE")
	start := wallNow()
	var ps []*proc
	for i := 0; i < 10; i++ {
		p, err := r.h.procs.spawn(childSpec{Role: "migrator", URL: r.h.cluster.URL, ID: fmt.Sprintf("r%02d-migrator-%d", r.h.round, i),
			Migrate: []string{r.schema, fresh}})
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	var failed []string
	for _, p := range ps {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Minute):
			p.kill()
		}
		if p.err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", p.name, p.err))
		}
	}
	r.mark("10 concurrent migrators", start)
	if len(failed) > 0 {
		return fmt.Errorf("migrators failed: %s (logs in %s)", strings.Join(failed, "; "), r.h.logDir)
	}
	var versions, distinct int
	if err := r.h.pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT version) FROM "+ident.Quote(fresh)+".schema_migrations").Scan(&versions, &distinct); err != nil {
		return fmt.Errorf("reading %s.schema_migrations: %w", fresh, err)
	}
	if versions != distinct || versions == 0 {
		return fmt.Errorf("fresh schema has %d migration rows for %d versions", versions, distinct)
	}
	r.note("10 migrators: all exited 0, fresh schema has %d versions", versions)
	return finishPhase(ctx, r, began)
}

// injectRelayKill replaces the relays with ones that stop between publish and mark
// after a few batches; each is SIGKILLed there and replaced. The events of a killed
// batch were delivered but not marked: they must be delivered again, and they are the
// only events allowed to be.
func injectRelayKill(ctx context.Context, r *round) error {
	began := wallNow()
	kills := 0
	for time.Since(began) < r.p.faultPhase && kills < r.p.faults+1 {
		p, err := r.startRelay(ctx, 1+r.rng.IntN(3))
		if err != nil {
			return err
		}
		line, err := p.waitLine(ctx, "hold ", r.p.faultPhase)
		if err != nil {
			p.kill()
			return err
		}
		start := wallNow()
		p.kill()
		ids := strings.Split(strings.TrimPrefix(line, "hold "), ",")
		r.mu.Lock()
		for _, id := range ids {
			r.holdIDs[id] = true
		}
		r.mu.Unlock()
		r.mark(fmt.Sprintf("SIGKILL %s between publish and mark (%d events)", p.name, len(ids)), start)
		kills++
	}
	return finishPhase(ctx, r, began)
}

func injectBrokerRestart(ctx context.Context, r *round) error {
	began := wallNow()
	if err := pause(ctx, time.Duration(r.rng.Int64N(int64(time.Second)))); err != nil {
		return err
	}
	start := wallNow()
	if err := r.h.rabbit.ctl(ctx, "stop_app"); err != nil {
		return err
	}
	if err := pause(ctx, 2*time.Second); err != nil {
		return err
	}
	if err := r.h.rabbit.ctl(ctx, "start_app"); err != nil {
		return err
	}
	r.mark("RabbitMQ stop_app/start_app", start)
	return finishPhase(ctx, r, began)
}
