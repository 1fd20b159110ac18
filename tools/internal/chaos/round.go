package chaos

// One round (one scenario run): its timings, the run itself (load, warm-up, faults,
// drain, check), the worker and relay processes it starts and stops, and the faults
// and notes it records.

import (
	"context"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/pgcluster"
)

// Timings every process of a round shares. Short leases make lease expiry, the
// reclaimer and the zombie fit in seconds.
const (
	leaseDuration  = 2 * time.Second
	heartbeatEvery = 500 * time.Millisecond
	pollEvery      = 200 * time.Millisecond
	reclaimEvery   = 300 * time.Millisecond
	warmup         = 3 * time.Second
	tail           = 3 * time.Second
	// drainTimeout bounds a drain that stopped moving: the round's jobs and events
	// still open (not finished, not consumed) have not decreased for that long. A
	// drain that keeps moving may take up to drainCap: a Citus round's workers on a
	// loaded machine worked a couple of thousand jobs at 10 to 25 a second (CI's citus
	// round left 736 of 2,193 open at a flat 90 s, moving).
	drainTimeout = 90 * time.Second
	drainCap     = 8 * time.Minute
)

func (h *harness) workerSpec(manual bool) workerSpec {
	return workerSpec{MaxWorkers: 4, Lease: leaseDuration, Heartbeat: heartbeatEvery, Poll: pollEvery, Reclaim: reclaimEvery, Manual: manual}
}

// round is one scenario run.
type round struct {
	h        *harness
	s        *scenario
	p        params
	schema   string
	rng      *mrand.Rand
	log      *slog.Logger
	workers  []*proc
	relays   []*proc
	inproc   []*inProcWorker
	prod     *producer
	mu       sync.Mutex
	faults   []fault
	holdIDs  map[string]bool
	notes    []string
	relaySeq int
	workSeq  int
	// The rate-limit scenario: its first start and when it lifted the limit (the
	// database's clock).
	rateFirst, rateFreed time.Time
	// The fair scenario: each light batch's enqueue call, [start, end] (fair.go).
	fairBatches [][2]time.Time
	// The mvcc-pin scenario's windows (pin.go).
	pin     *pinRun
	stopped bool
	// The lang-sigkill scenario's HTTP worker gateway (lang.go): its URL and its stop.
	gatewayURL  string
	gatewayStop func()
	// The failover scenarios' watchers (hawatch.go) and write probes of the old primary.
	ha     *haRun
	probes []*producer
	// The citus-rebalance scenario's move (citusrebalance.go).
	rebalance *rebalanceRun
}

// fault is one injected fault: when it began and when it was lifted.
type fault struct {
	what           string
	start, cleared time.Time
}

func (r *round) mark(what string, start time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, fault{what: what, start: start, cleared: wallNow()})
	r.log.Info("chaos: fault", "scenario", r.s.name, "fault", what, "took", time.Since(start).Round(time.Millisecond))
}

func (r *round) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (h *harness) runRound(ctx context.Context, s *scenario, p params) (*Row, error) {
	h.round++
	r := &round{h: h, s: s, p: p, schema: fmt.Sprintf("chaos_%02d_%s", h.round, strings.ReplaceAll(s.name, "-", "_")),
		rng: mrand.New(mrand.NewPCG(h.cfg.Seed, uint64(h.round))), log: h.log, holdIDs: map[string]bool{}}
	if s.broker {
		if reason := h.brokerUnavailable(ctx); reason != "" {
			if h.cfg.RequireBrokers {
				return &Row{Scenario: s.name, Runs: 1, Violations: []string{"broker required (SKIPLOCK_REQUIRE_BROKERS): " + reason}}, nil
			}
			return &Row{Scenario: s.name, Skipped: reason}, nil
		}
	}
	if s.langs {
		if reason := langsMissing(); reason != "" {
			if langsRequired() {
				return &Row{Scenario: s.name, Runs: 1, Violations: []string{"Python and Node required (CI, SKIPLOCK_REQUIRE_PYTHON or SKIPLOCK_REQUIRE_NODE): " + reason}}, nil
			}
			return &Row{Scenario: s.name, Skipped: reason}, nil
		}
	}
	if s.failover != "" {
		reason := ""
		if _, err := exec.LookPath("pg_autoctl"); err != nil {
			reason = "pg_autoctl not installed (postgresql-15-auto-failover; make deps installs it)"
		} else if _, err := pgcluster.FindPgBouncer(); err != nil && s.pgbouncer {
			reason = err.Error() + "; make deps installs it"
		}
		if reason != "" {
			if h.cfg.RequireHA {
				return &Row{Scenario: s.name, Runs: 1, Violations: []string{"HA cluster required (SKIPLOCK_REQUIRE_HA): " + reason}}, nil
			}
			return &Row{Scenario: s.name, Skipped: reason}, nil
		}
		if err := h.useHA(ctx, s.pgbouncer); err != nil {
			return nil, err
		}
	} else if s.citus {
		if reason := citusMissing(ctx); reason != "" {
			if citusRequired() {
				return &Row{Scenario: s.name, Runs: 1, Violations: []string{"Citus required (CI, SKIPLOCK_REQUIRE_CITUS): " + reason}}, nil
			}
			return &Row{Scenario: s.name, Skipped: reason}, nil
		}
		if err := h.useCitus(ctx); err != nil {
			return nil, err
		}
	} else {
		h.usePlain()
	}
	h.log.Info("chaos: round", "n", h.round, "scenario", s.name, "schema", r.schema)
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	defer r.stopAll()
	if err := r.startLoad(ctx); err != nil {
		return nil, err
	}
	if s.setup != nil {
		if err := s.setup(ctx, r); err != nil {
			return nil, err
		}
	}
	prodCtx, stopProd := context.WithCancel(ctx)
	var prodWG sync.WaitGroup
	prodWG.Go(func() { r.prod.run(prodCtx, p.rate) })
	if s.feed != nil {
		prodWG.Go(func() { s.feed(prodCtx, r) })
	}
	var consumerWG sync.WaitGroup
	consCtx, stopCons := context.WithCancel(ctx)
	defer func() { stopCons(); consumerWG.Wait() }()
	if s.broker {
		consumerWG.Go(func() { h.consumer.consumeAMQP(consCtx, h.rabbit.url, r.schema) })
	}
	baselineFrom := wallNow().Add(time.Second)
	if err := pause(ctx, warmup); err != nil {
		stopProd()
		prodWG.Wait()
		return nil, err
	}
	faultsFrom := wallNow()
	injectErr := s.inject(ctx, r)
	if injectErr == nil {
		// Keep producing a little after the last fault, so recovery is measured
		// against fresh work rather than the end of the load.
		injectErr = pause(ctx, tail)
	}
	stopProd()
	prodWG.Wait()
	if injectErr != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.note("fault injection failed: %v", injectErr)
	}
	// A transaction Citus committed in two phases whose worker node crashed between
	// PREPARE and COMMIT PREPARED is committed by the coordinator's recovery; until
	// then its rows are invisible (and locked). Its maintenance daemon runs it every
	// citus.recover_2pc_interval (a minute by default): run it now, before the drain
	// (a completion left prepared holds its job) and after (what the drain's last
	// work left), draining again what it made visible.
	if s.citus {
		if _, err := r.recoverPrepared(ctx); err != nil {
			return nil, err
		}
	}
	drained, err := r.drain(ctx)
	if err != nil {
		return nil, err
	}
	if s.citus && drained {
		n, err := r.recoverPrepared(ctx)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			if drained, err = r.drain(ctx); err != nil {
				return nil, err
			}
		}
	}
	if !drained {
		r.note("not drained: nothing moved for %s, or still open after %s", drainTimeout, drainCap)
	}
	if s.citus {
		r.stopAll() // the copy is the final state: nothing may change the tables after it
		if err := r.snapshotCitus(ctx); err != nil {
			return nil, err
		}
	}
	row, err := r.check(ctx, baselineFrom, faultsFrom)
	if err != nil {
		return nil, err
	}
	if injectErr != nil {
		row.Violations = append(row.Violations, "fault injection failed: "+injectErr.Error())
	}
	if row.ok() {
		r.stopAll() // before the drop: clients still running would fail on the missing schema
		r.dropSchema()
	}
	return row, nil
}

func (h *harness) brokerUnavailable(ctx context.Context) string {
	if h.rabbit == nil {
		return "RabbitMQ node not started"
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := h.rabbit.wait(wctx); err != nil {
		return err.Error()
	}
	return ""
}

// pause waits d (fault timing) or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// startLoad starts the round's workers, relays and in-process clients and the producer.
func (r *round) startLoad(ctx context.Context) error {
	if r.s.langs {
		// One worker on the HTTP gateway beside the Python and Node ones.
		if err := r.startGateway(ctx); err != nil {
			return err
		}
		if _, err := r.startLangWorker(ctx, langGateway); err != nil {
			return err
		}
	}
	for i := 0; i < r.h.cfg.Workers-r.s.inProcess; i++ {
		if r.s.langs {
			if _, err := r.startLangWorker(ctx, langOrder[i%len(langOrder)]); err != nil {
				return err
			}
			continue
		}
		if _, err := r.startWorker(ctx, r.s.zombie && i == 0); err != nil {
			return err
		}
	}
	for i := 0; i < r.s.inProcess; i++ {
		w, err := r.startInProc(ctx, i)
		if err != nil {
			return err
		}
		r.inproc = append(r.inproc, w)
	}
	if r.s.outbox {
		for i := 0; i < 2; i++ {
			if _, err := r.startRelay(ctx, 0); err != nil {
				return err
			}
		}
	}
	var err error
	r.prod, err = newProducer(r.h.appPool, r.schema, r.s.outbox, mrand.New(mrand.NewPCG(r.h.cfg.Seed, uint64(r.h.round)<<32|1)), r.log)
	if err == nil && r.s.zombie {
		r.prod.manualShare = 0.15
	}
	if err == nil && r.s.citus {
		r.prod.keys, r.prod.open = citusKeys, true
	}
	return err
}

// startWorker starts a worker process (through the fault proxy) and waits until it runs.
func (r *round) startWorker(ctx context.Context, manual bool) (*proc, error) {
	r.workSeq++
	id := fmt.Sprintf("r%02d-worker-%d", r.h.round, r.workSeq)
	if manual {
		id += "-zombie"
	}
	spec := r.h.workerSpec(manual)
	spec.Queues = r.s.queues
	spec.Periodic = r.s.failover != ""
	spec.ListenURL = r.h.listenURL(r.s)
	spec.Citus = r.s.citus
	return r.launch(ctx, childSpec{Role: "worker", URL: r.h.proxyURL, Schema: r.schema, ID: id, Worker: spec}, &r.workers)
}

// launch starts a child process, waits for it to say "ready" and records it in list.
func (r *round) launch(ctx context.Context, spec childSpec, list *[]*proc) (*proc, error) {
	p, err := r.h.procs.spawn(spec)
	if err != nil {
		return nil, err
	}
	if _, err := p.waitLine(ctx, "ready", 30*time.Second); err != nil {
		p.kill()
		return nil, err
	}
	r.mu.Lock()
	*list = append(*list, p)
	r.mu.Unlock()
	return p, nil
}

// startRelay starts a relay process; holdAfter > 0 makes it stop between publish and
// mark after that many publishes.
func (r *round) startRelay(ctx context.Context, holdAfter int) (*proc, error) {
	r.relaySeq++
	spec := childSpec{Role: "relay", URL: r.h.proxyURL, Schema: r.schema, ID: fmt.Sprintf("r%02d-relay-%d", r.h.round, r.relaySeq),
		Relay: relaySpec{Lease: leaseDuration, Poll: pollEvery, Batch: 20, HoldAfter: holdAfter, ListenURL: r.h.listenURL(r.s)}}
	if r.s.broker {
		spec.Relay.AMQPURL, spec.Relay.Queue = r.h.rabbit.url, r.schema
	} else {
		spec.Relay.WebhookURL, spec.Relay.Secret = r.h.consumer.url, r.h.secret
	}
	return r.launch(ctx, spec, &r.relays)
}

// liveWorkers returns the worker processes still running.
func (r *round) liveWorkers() []*proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*proc
	for _, p := range r.workers {
		if !p.exited() {
			out = append(out, p)
		}
	}
	return out
}

// stopAll stops the round's processes and clients; calls after the first do nothing.
func (r *round) stopAll() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	all := append(append([]*proc(nil), r.workers...), r.relays...)
	r.mu.Unlock()
	if r.ha != nil {
		r.ha.stop()
	}
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { p.terminate(5 * time.Second) })
	}
	for _, w := range r.inproc {
		wg.Go(w.stop)
	}
	wg.Wait()
	if r.gatewayStop != nil {
		r.gatewayStop()
	}
}

// drain waits until every committed job is finished and every committed event is
// published and consumed, polling the database.
func (r *round) drain(ctx context.Context) (bool, error) {
	began := wallNow()
	stall := drainStall{last: began}
	q := ident.Quote(r.schema)
	for {
		var open, unconsumed int64
		// On Citus joined by the key as well, the distribution column of both (the
		// producer writes its job's key there; other writers of chaos_enqueued on one
		// node leave it '').
		on := "j.id = e.job_id"
		if r.s.citus {
			on += " AND j.concurrency_key = e.concurrency_key"
		}
		err := r.h.pool.QueryRow(ctx, `SELECT count(*) FROM `+q+`.chaos_enqueued e JOIN `+q+`.jobs j ON `+on+`
WHERE j.status NOT IN ('succeeded', 'failed', 'cancelled')`).Scan(&open)
		if err == nil {
			// Events committed less those consumed: the consumer's table is a plain one
			// on Citus, which a correlated subquery cannot join with the distributed
			// chaos_enqueued. Only committed events are ever published.
			var committed, consumed int64
			err = r.h.pool.QueryRow(ctx, `SELECT count(*) FROM `+q+`.chaos_enqueued WHERE event_id IS NOT NULL`).Scan(&committed)
			if err == nil {
				err = r.h.pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM `+q+`.chaos_consumed`).Scan(&consumed)
			}
			unconsumed = committed - consumed
		}
		if err == nil && open == 0 && unconsumed == 0 {
			return true, nil
		}
		now := wallNow()
		if err == nil {
			stall.observe(open+unconsumed, now)
		}
		if stall.over(now, began) {
			return false, nil
		}
		if err := pause(ctx, 200*time.Millisecond); err != nil {
			return false, err
		}
	}
}

// drainStall follows a drain's progress: the fewest jobs and events it has seen
// open, and when that last fell.
type drainStall struct {
	fewest int64 // the fewest open seen, once seen
	seen   bool
	last   time.Time // when fewest last fell (the drain's start before any)
}

// observe records that open jobs and events were still open at now.
func (d *drainStall) observe(open int64, now time.Time) {
	if !d.seen || open < d.fewest {
		d.fewest, d.seen, d.last = open, true, now
	}
}

// over says whether a drain begun at began should give up at now: nothing moved for
// drainTimeout, or drainCap has passed.
func (d *drainStall) over(now, began time.Time) bool {
	return now.Sub(d.last) > drainTimeout || now.Sub(began) > drainCap
}
