// Package chaos is skiplock's fault-injection harness, run by tools/chaos (make chaos,
// make soak). It runs real worker and relay OS processes (the harness's own binary
// re-executed as a child, see ChildEnv) against a throwaway PostgreSQL cluster,
// injects one kind of fault per scenario while a producer enqueues jobs (and outbox
// events) at a steady rate, lets the system drain, and then checks the contract from
// the database:
//
//	lost             every committed job reached a terminal state (or is pending with
//	                 a future run_at, or running under a valid lease); every
//	                 acknowledged commit exists; nothing rolled back exists; every
//	                 committed outbox event was delivered and processed
//	double success   no job entered 'succeeded' twice (trigger audit of transitions)
//	stale writes     no transition out of 'running' presented a token other than the
//	                 one of the job's latest claim; no completion the library reported
//	                 as ErrLeaseLost changed a row; no acknowledged success is missing
//	duplicates       events delivered more than once; allowed only in scenarios that
//	                 hit the relays (a crash or failure between publish and mark) and,
//	                 with a relay killed between publish and mark, only for the
//	                 events of the killed batch; the consumer (outbox.Inbox) must still
//	                 process each event exactly once
//	recovery         seconds from the end of each fault until throughput is back to
//	                 half the pre-fault rate (worst fault of the scenario)
//
// The audit lives in the scenario's schema, created by the harness (never by
// skiplock's migrations): chaos_enqueued (written in the producer's transaction),
// chaos_audit (handler effects and the outcomes the library reported, with the
// lease token), chaos_transitions (an AFTER UPDATE trigger on jobs: every status or
// token change, with OLD/NEW and the token of the latest claim) and chaos_consumed.
package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/pgcluster"
	"github.com/skiplock/skiplock/tools/internal/faultproxy"
)

// Config configures a chaos run.
type Config struct {
	// Scenarios to run, by name (see Scenarios). Default: all.
	Scenarios []string
	// Seed drives every random choice (fault timing, victims, job mix). Default: random;
	// the report prints it so a run can be replayed.
	Seed uint64
	// FaultPhase is how long each scenario injects faults. Default 6s.
	FaultPhase time.Duration
	// Soak runs randomized rounds (scenario and parameters drawn from Seed) until
	// SoakDuration has passed, instead of each scenario once.
	Soak         bool
	SoakDuration time.Duration
	// Rate is how many jobs per second the producer enqueues. Default 40.
	Rate int
	// Workers is how many worker processes run. Default 3.
	Workers int
	// IdleTx is how long the idle-in-transaction session holds back xmin. Default 5s
	// (in a soak: drawn between 30s and 2m).
	IdleTx time.Duration
	// ChildCommand returns the command that runs a child process; the harness adds
	// ChildEnv with the spec. Default: this executable (tools/chaos, or a test
	// binary) with no arguments; its main must call ChildMain when IsChild.
	ChildCommand func() *exec.Cmd
	// RequireBrokers fails the broker scenario instead of skipping it when RabbitMQ
	// is not available. Default: $SKIPLOCK_REQUIRE_BROKERS is set.
	RequireBrokers bool
	// Logger receives the harness's progress. Default: discard.
	Logger *slog.Logger
	// Progress, if set, receives one line per finished round.
	Progress io.Writer
}

// Run starts a cluster, runs the configured scenarios and returns the report. It
// cleans up every process and cluster it started, also when ctx is cancelled; the
// report then holds the rounds that finished.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Seed == 0 {
		var b [8]byte
		rand.Read(b[:])
		for _, x := range b {
			cfg.Seed = cfg.Seed<<8 | uint64(x)
		}
	}
	if cfg.FaultPhase <= 0 {
		cfg.FaultPhase = 6 * time.Second
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 40
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 3
	}
	if cfg.IdleTx <= 0 {
		cfg.IdleTx = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ChildCommand == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("chaos: finding this executable to re-run as a child: %w", err)
		}
		cfg.ChildCommand = func() *exec.Cmd { return exec.Command(exe) }
	}
	if !cfg.RequireBrokers && os.Getenv("SKIPLOCK_REQUIRE_BROKERS") != "" {
		cfg.RequireBrokers = true
	}
	if cfg.Soak && cfg.SoakDuration <= 0 {
		cfg.SoakDuration = 30 * time.Minute
	}
	selected, err := selectScenarios(cfg.Scenarios)
	if err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, log: cfg.Logger, rng: mrand.New(mrand.NewPCG(cfg.Seed, 0x5eed))}
	report := &Report{Seed: cfg.Seed, Soak: cfg.Soak}
	start := wallNow()
	defer func() { report.Elapsed = time.Since(start) }()
	if err := h.setup(ctx, selected); err != nil {
		h.cleanup(false)
		return report, err
	}
	runErr := h.runAll(ctx, selected, report)
	h.cleanup(report.OK() && runErr == nil)
	if !report.OK() || runErr != nil {
		report.LogDir = h.logDir
	}
	return report, runErr
}

type harness struct {
	cfg Config
	log *slog.Logger
	rng *mrand.Rand

	cluster  *pgcluster.Cluster
	pool     *pgxpool.Pool // the harness's own, direct connections
	proxy    *faultproxy.Proxy
	proxyURL string
	consumer *consumer
	secret   string
	rabbit   *rabbitNode
	procs    *procs
	logDir   string
	round    int
}

func (h *harness) setup(ctx context.Context, selected []*scenario) error {
	var err error
	if h.logDir, err = os.MkdirTemp("", "skiplock-chaos-logs-"); err != nil {
		return fmt.Errorf("chaos: creating the log directory: %w", err)
	}
	h.procs = &procs{all: map[*proc]struct{}{}, logDir: h.logDir, cmd: func(spec []byte) *exec.Cmd {
		cmd := h.cfg.ChildCommand()
		cmd.Env = append(os.Environ(), ChildEnv+"="+string(spec))
		return cmd
	}}
	for _, s := range selected {
		if s.broker {
			h.rabbit = startRabbit() // boots in the background while other scenarios run
			break
		}
	}
	// synchronous_commit=on: an immediate restart must not lose acknowledged commits.
	// fsync stays off: only processes crash here, never the machine.
	h.log.Info("chaos: starting PostgreSQL")
	h.cluster, err = pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
		"synchronous_commit": "on", "max_connections": "400", "shared_buffers": "'128MB'",
	}})
	if err != nil {
		return fmt.Errorf("chaos: starting PostgreSQL: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(h.cluster.URL)
	if err != nil {
		return fmt.Errorf("chaos: parsing the cluster URL: %w", err)
	}
	pcfg.MaxConns = 16
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pcfg.ConnConfig.RuntimeParams["application_name"] = "skiplock-chaos-harness"
	if h.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return fmt.Errorf("chaos: opening the harness pool: %w", err)
	}
	if h.proxy, err = faultproxy.New(fmt.Sprintf("127.0.0.1:%d", h.cluster.Port), h.log); err != nil {
		return err
	}
	h.proxyURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", h.proxy.Port())
	var b [16]byte
	rand.Read(b[:])
	h.secret = hex.EncodeToString(b[:])
	if h.consumer, err = startConsumer(h.pool, h.secret, h.log); err != nil {
		return err
	}
	return nil
}

// cleanup stops everything the harness started. Logs are kept when keepLogs is false.
func (h *harness) cleanup(removeLogs bool) {
	if h.procs != nil {
		h.procs.killAll()
	}
	if h.consumer != nil {
		h.consumer.close()
	}
	if h.proxy != nil {
		h.proxy.Close()
	}
	if h.pool != nil {
		h.pool.Close()
	}
	if h.cluster != nil {
		if err := h.cluster.Stop(); err != nil {
			h.log.Warn("chaos: stopping PostgreSQL", "error", err)
		}
	}
	if h.rabbit != nil {
		h.rabbit.stop()
	}
	if removeLogs && h.logDir != "" {
		os.RemoveAll(h.logDir)
	}
}

func (h *harness) runAll(ctx context.Context, selected []*scenario, report *Report) error {
	runOne := func(s *scenario, p params) error {
		row, err := h.runRound(ctx, s, p)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			row = &Row{Scenario: s.name, Runs: 1, Violations: []string{"harness error: " + err.Error()}}
		}
		report.add(row)
		if h.cfg.Progress != nil {
			fmt.Fprintln(h.cfg.Progress, row.progressLine(p))
		}
		return nil
	}
	if !h.cfg.Soak {
		for _, s := range selected {
			if err := runOne(s, h.shortParams(s)); err != nil {
				return err
			}
		}
		return nil
	}
	// Rounds deal scenarios from a deck shuffled by the seed, so every scenario runs
	// about equally often; each round's fault parameters are drawn too.
	deadline := wallNow().Add(h.cfg.SoakDuration)
	var deck []*scenario
	for wallNow().Before(deadline) {
		if len(deck) == 0 {
			deck = append(deck, selected...)
			h.rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		s := deck[0]
		deck = deck[1:]
		if err := runOne(s, h.soakParams(s)); err != nil {
			return err
		}
	}
	return nil
}

// params are one round's knobs.
type params struct {
	faultPhase time.Duration
	idleTx     time.Duration
	stall      time.Duration
	zombieStop time.Duration
	faults     int // how many faults the scenario injects (kills, drops, …)
	rate       int
}

func (h *harness) shortParams(s *scenario) params {
	return params{faultPhase: h.cfg.FaultPhase, idleTx: h.cfg.IdleTx, stall: 3 * time.Second, zombieStop: 5 * time.Second, faults: 3, rate: h.cfg.Rate}
}

func (h *harness) soakParams(s *scenario) params {
	return params{
		faultPhase: time.Duration(10+h.rng.IntN(31)) * time.Second,
		idleTx:     time.Duration(30+h.rng.IntN(91)) * time.Second,
		stall:      time.Duration(1000+h.rng.IntN(9000)) * time.Millisecond,
		zombieStop: time.Duration(3000+h.rng.IntN(7000)) * time.Millisecond,
		faults:     2 + h.rng.IntN(6),
		rate:       h.cfg.Rate/2 + h.rng.IntN(h.cfg.Rate+1),
	}
}

// Timings every process of a round shares. Short leases make lease expiry, the
// reclaimer and the zombie fit in seconds.
const (
	leaseDuration  = 2 * time.Second
	heartbeatEvery = 500 * time.Millisecond
	pollEvery      = 200 * time.Millisecond
	reclaimEvery   = 300 * time.Millisecond
	warmup         = 3 * time.Second
	tail           = 3 * time.Second
	drainTimeout   = 90 * time.Second
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
	h.log.Info("chaos: round", "n", h.round, "scenario", s.name, "schema", r.schema)
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	defer r.stopAll()
	if err := r.startLoad(ctx); err != nil {
		return nil, err
	}
	prodCtx, stopProd := context.WithCancel(ctx)
	var prodWG sync.WaitGroup
	prodWG.Go(func() { r.prod.run(prodCtx, p.rate) })
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
	drained, err := r.drain(ctx)
	if err != nil {
		return nil, err
	}
	if !drained {
		r.note("not drained within %s", drainTimeout)
	}
	row, err := r.check(ctx, baselineFrom, faultsFrom)
	if err != nil {
		return nil, err
	}
	if injectErr != nil {
		row.Violations = append(row.Violations, "fault injection failed: "+injectErr.Error())
	}
	if row.ok() {
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

// prepare migrates the round's schema and installs the audit tables and trigger.
func (r *round) prepare(ctx context.Context) error {
	if _, err := skiplock.Migrate(ctx, r.h.pool, r.schema); err != nil {
		return fmt.Errorf("migrating %s: %w", r.schema, err)
	}
	if _, err := r.h.pool.Exec(ctx, auditDDL(r.schema)); err != nil {
		return fmt.Errorf("installing the audit in %s: %w", r.schema, err)
	}
	r.h.consumer.reset(r.schema)
	if r.s.broker {
		if err := declareQueue(r.h.rabbit.url, r.schema); err != nil {
			return err
		}
	}
	return nil
}

func (r *round) dropSchema() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.h.pool.Exec(ctx, "DROP SCHEMA "+ident.Quote(r.schema)+" CASCADE"); err != nil {
		r.log.Debug("chaos: dropping schema", "schema", r.schema, "error", err)
	}
}

// startLoad starts the round's workers, relays and in-process clients and the producer.
func (r *round) startLoad(ctx context.Context) error {
	for i := 0; i < r.h.cfg.Workers-r.s.inProcess; i++ {
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
	r.prod, err = newProducer(r.h.pool, r.schema, r.s.outbox, mrand.New(mrand.NewPCG(r.h.cfg.Seed, uint64(r.h.round)<<32|1)), r.log)
	if err == nil && r.s.zombie {
		r.prod.manualShare = 0.15
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
	return r.launch(ctx, childSpec{Role: "worker", URL: r.h.proxyURL, Schema: r.schema, ID: id, Worker: r.h.workerSpec(manual)}, &r.workers)
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
		Relay: relaySpec{Lease: leaseDuration, Poll: pollEvery, Batch: 20, HoldAfter: holdAfter}}
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

// stopAll stops the round's processes and clients.
func (r *round) stopAll() {
	r.mu.Lock()
	all := append(append([]*proc(nil), r.workers...), r.relays...)
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { p.terminate(5 * time.Second) })
	}
	for _, w := range r.inproc {
		wg.Go(w.stop)
	}
	wg.Wait()
}

// drain waits until every committed job is finished and every committed event is
// published and consumed, polling the database.
func (r *round) drain(ctx context.Context) (bool, error) {
	deadline := wallNow().Add(drainTimeout)
	q := ident.Quote(r.schema)
	for {
		var open, unconsumed int64
		err := r.h.pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM `+q+`.chaos_enqueued e JOIN `+q+`.jobs j ON j.id = e.job_id
    WHERE j.status NOT IN ('succeeded', 'failed', 'cancelled')),
  (SELECT count(*) FROM `+q+`.chaos_enqueued e
    WHERE e.event_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM `+q+`.chaos_consumed c WHERE c.event_id = e.event_id::text))`).Scan(&open, &unconsumed)
		if err == nil && open == 0 && unconsumed == 0 {
			return true, nil
		}
		if wallNow().After(deadline) {
			return false, nil
		}
		if err := pause(ctx, 200*time.Millisecond); err != nil {
			return false, err
		}
	}
}

// auditDDL is the chaos audit of schema: tables, and the trigger that records every
// job transition with the token of the job's latest claim.
func auditDDL(schema string) string {
	q := ident.Quote(schema)
	return strings.ReplaceAll(`
CREATE TABLE {s}.chaos_enqueued (
  job_id   uuid PRIMARY KEY,
  event_id uuid,
  at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE {s}.chaos_audit (
  seq         bigserial PRIMARY KEY,
  job_id      uuid NOT NULL,
  worker      text NOT NULL,
  lease_token uuid,
  event       text NOT NULL,
  at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON {s}.chaos_audit (job_id, lease_token);
CREATE TABLE {s}.chaos_consumed (
  event_id text NOT NULL,
  at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE {s}.chaos_transitions (
  seq          bigserial PRIMARY KEY,
  job_id       uuid NOT NULL,
  old_status   text NOT NULL,
  new_status   text NOT NULL,
  old_token    uuid,
  new_token    uuid,
  new_attempts integer NOT NULL,
  worker       text,
  latest_claim uuid,
  stale        boolean NOT NULL,
  app          text NOT NULL DEFAULT current_setting('application_name'),
  at           timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON {s}.chaos_transitions (job_id, seq);
CREATE INDEX ON {s}.chaos_transitions (old_token);

-- Every change of status or token (a heartbeat changes neither and is skipped). A
-- transition out of 'running' is stale when the token it replaced is not the token
-- the job's latest claim received; a running→running change of token is a second
-- claim of a running job. Rows of one job are serialised by its row lock, so seq
-- order is the order of that job's transitions.
CREATE FUNCTION {s}.chaos_audit_transition() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  latest uuid;
BEGIN
  IF OLD.status = NEW.status AND OLD.lease_token IS NOT DISTINCT FROM NEW.lease_token THEN
    RETURN NULL;
  END IF;
  IF OLD.status = 'running' THEN
    SELECT t.new_token INTO latest FROM {s}.chaos_transitions t
    WHERE t.job_id = NEW.id AND t.new_status = 'running' AND t.old_status <> 'running'
    ORDER BY t.seq DESC LIMIT 1;
  END IF;
  INSERT INTO {s}.chaos_transitions (job_id, old_status, new_status, old_token, new_token, new_attempts, worker, latest_claim, stale)
  VALUES (NEW.id, OLD.status, NEW.status, OLD.lease_token, NEW.lease_token, NEW.attempts,
          coalesce(NEW.worker_id, OLD.worker_id), latest,
          OLD.status = 'running' AND (OLD.lease_token IS DISTINCT FROM latest
                                      OR (NEW.status = 'running' AND NEW.lease_token IS DISTINCT FROM OLD.lease_token)));
  RETURN NULL;
END
$$;
CREATE TRIGGER chaos_audit_transition AFTER UPDATE ON {s}.jobs
  FOR EACH ROW EXECUTE FUNCTION {s}.chaos_audit_transition();

-- A deleted job is recorded too: nothing in these scenarios deletes jobs.
CREATE FUNCTION {s}.chaos_audit_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {s}.chaos_transitions (job_id, old_status, new_status, old_token, new_token, new_attempts, worker, latest_claim, stale)
  VALUES (OLD.id, OLD.status, 'deleted', OLD.lease_token, NULL, OLD.attempts, OLD.worker_id, NULL, false);
  RETURN NULL;
END
$$;
CREATE TRIGGER chaos_audit_delete AFTER DELETE ON {s}.jobs
  FOR EACH ROW EXECUTE FUNCTION {s}.chaos_audit_delete();
`, "{s}", q)
}

var errNoScenario = errors.New("chaos: unknown scenario")
