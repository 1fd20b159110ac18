// Package engine works a client's queues: it claims jobs, runs them through the
// root's handlers, renews their leases and writes their outcomes. It works on store
// rows; what only the public package knows — which handler runs a kind, the
// middleware, how an error becomes an outcome, the events and counters a user sees —
// comes in through Hooks.
//
// A started engine runs, per process:
//
//	producer (one per queue)  wait for NOTIFY, a freed slot or a jittered poll; claim up
//	                          to the free slots in one statement; queue the jobs locally
//	executors (per queue)     MaxWorkers goroutines: Hooks.Run(ctx, job) for each job
//	heartbeater               one UPDATE per tick renews every in-flight lease; a lost
//	                          lease cancels the job's context and drops its outcome
//	completer                 batches outcomes into one fenced UPDATE … FROM unnest(…);
//	                          a slot is freed only once its outcome is durable
//	listener                  one dedicated LISTEN connection, reconnecting
//	warmer                    prepares the claim and the completion on idle connections
//	background                the caller's services (maintenance), under the same stop
//
// Each job in flight is a flight (flight.go) whose state changes only through named
// transitions; each queue's capacity has one owner (capacity.go).
//
// Database connections: the listener's own connection, plus pool connections held
// only for the duration of a statement by at most one claim per queue, the head
// check, the heartbeater, the completer and each background service — independent of
// how many jobs run at once.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/store"
)

// Queue is one queue's concurrency (the public QueueConfig, defaults applied).
type Queue struct {
	MaxWorkers     int
	MaxPrefetch    int // negative: no prefetch
	PrefetchWindow time.Duration
}

// Config is what the engine needs from the client's configuration, defaults applied.
type Config struct {
	Store *store.Store
	Pool  *pgxpool.Pool
	// Clock supplies time to every time-dependent statement; nil is the database's now().
	Clock                interface{ Now() time.Time }
	Log                  *slog.Logger
	WorkerID             string
	Channel              string // the schema's NOTIFY channel
	Queues               map[string]Queue
	LeaseDuration        time.Duration
	HeartbeatInterval    time.Duration
	PollInterval         time.Duration
	PollOnly             bool
	ListenConnConfig     *pgx.ConnConfig // where the LISTEN connection goes; nil: the pool's configuration
	FetchLimit           int
	CompletionBatchSize  int
	CompletionBatchDelay time.Duration
	DeleteOnSuccess      bool
	// Citus: the schema has the Citus layout, so every claim names one key (citus.go).
	// Neither the head check nor the warmer runs: their statements name no key.
	Citus bool
	// LeaseLost is the cause a handler's context is cancelled with when its lease is lost.
	LeaseLost error
	// Failures reports the repeating operations' failures and recoveries.
	Failures Failures
	// Counters receives the engine's figures; the client reads them for its stats.
	Counters *Counters
	// Background runs beside the engine's own components until Stop stops them
	// (after the jobs' outcomes are written): the maintenance services.
	Background []func(ctx context.Context)
	Hooks      Hooks
}

// Failures is the failure reporter of the repeating operations ("claim",
// "heartbeat", "completion", …): a failure is counted and logged (rate-limited), a
// success ends a run of failures.
type Failures interface {
	Warn(op string, err error, attrs ...any)
	OK(op string)
	// Notice logs msg at Warn unless a notice with the same key was logged recently.
	Notice(key, msg string, attrs ...any)
}

// Hooks is what only the public package knows.
type Hooks struct {
	// Adopt makes the caller's job value of a claimed row, once per claim; the engine
	// hands it back to Timeout, Run and Done.
	Adopt func(row *store.Job) any
	// Timeout is the job's handler timeout (0: none).
	Timeout func(job any) time.Duration
	// Run runs the job's handler under ctx and says what to write for it. ctx is
	// cancelled with Config.LeaseLost when the lease is lost, and with ErrShutdown
	// when a stop cuts the job off.
	Run func(ctx context.Context, job any) Result
	// Done reports a job whose outcome is durable or was dropped (never one handed
	// back unstarted).
	Done func(Done)
	// Stopped runs once the engine has stopped, before Stop returns.
	Stopped func()
}

// Result is what Hooks.Run reports for a job.
type Result struct {
	Outcome store.Outcome
	// Err is the handler's error, as it returned it (for events).
	Err error
	// InTx: the handler wrote the job's completion in its own transaction
	// (CompleteTx), so the completer's fenced write may match nothing.
	InTx bool
}

// Done is a job whose run ended.
type Done struct {
	Job any
	// Status is the state the outcome left the job in; "" when the outcome was
	// dropped because the lease was lost.
	Status string
	Action store.Action
	Err    error
	Run    time.Duration // the handler's run time
	Waited time.Duration // from the job's run_at to its handler's start
}

// Counters are the engine's figures, read by the client's stats and metrics.
type Counters struct {
	Claims, Claimed, ClaimNanos  atomic.Int64
	Flushes, Flushed, FlushNanos atomic.Int64
	Throttled                    atomic.Int64
	Handoffs, HandoffsReturned   atomic.Int64
	Warmed                       atomic.Int64
	// LateStarts counts the jobs under a rate limit handed back because their
	// handler could not start within store.RateStartSlack of their claim.
	LateStarts atomic.Int64
	// ClaimsBeside counts the claims sent while another claim of the same queue was
	// in flight (produce: a plain queue's second claim, a fair queue's notified one).
	ClaimsBeside atomic.Int64
}

// ErrShutdown is the cause a handler's context is cancelled with when a stop cuts
// its job off: the job goes back to pending with its attempt given back.
var ErrShutdown = errors.New("skiplock: client shutting down")

// ErrStarted is returned by Start on a running engine.
var ErrStarted = errors.New("skiplock: engine already started")

// Engine works the configured queues between Start and Stop. An engine starts once.
type Engine struct {
	cfg Config

	fetchCtx   context.Context // producers, head checks and the listener
	stopFetch  context.CancelFunc
	jobsCtx    context.Context // handlers
	cancelJobs context.CancelCauseFunc
	bgCtx      context.Context // heartbeater, completer, warmer, limits, background
	stopBg     context.CancelFunc

	producers map[string]*producer
	listener  *notify.Listener

	mu       sync.Mutex
	inflight map[string]*flight // by job id

	outcomes    chan *flight
	prodWG      sync.WaitGroup
	execWG      sync.WaitGroup
	jobsWG      sync.WaitGroup // claim → outcome durable (or dropped)
	bgWG        sync.WaitGroup
	startOnce   sync.Once
	stopOnce    sync.Once
	stopped     chan struct{} // closed when shutdown has finished
	abandonOnce sync.Once
	abandon     chan struct{} // closed when a stopper gives up on running handlers

	limits        atomic.Pointer[limitView] // which claims run limited (limits.go)
	fairQueues    atomic.Pointer[fairView]  // which claims run fair (fair.go)
	limitsChanged chan struct{}             // a limits NOTIFY arrived
	idle          chan struct{}             // a producer began waiting for jobs (warmer.go)
	began         chan struct{}             // a job claimed to wait began to run (heartbeater.go)
}

// New returns an engine for cfg; it touches nothing until Start.
func New(cfg Config) *Engine {
	e := &Engine{
		cfg:           cfg,
		producers:     map[string]*producer{},
		inflight:      map[string]*flight{},
		stopped:       make(chan struct{}),
		abandon:       make(chan struct{}),
		limitsChanged: make(chan struct{}, 1),
		idle:          make(chan struct{}, 1),
		began:         make(chan struct{}, 1),
	}
	if e.cfg.Counters == nil {
		e.cfg.Counters = &Counters{}
	}
	total := 0
	for name, q := range cfg.Queues {
		p := newProducer(name, q)
		e.producers[name] = p
		total += p.cap.size() + cfg.CompletionBatchSize
	}
	e.outcomes = make(chan *flight, total)
	return e
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Start reads the limits and starts every component; ctx bounds the limits' read
// only (the engine runs until Stop). It returns ErrStarted on a second call.
func (e *Engine) Start(ctx context.Context) error {
	started := false
	e.startOnce.Do(func() { started = true })
	if !started {
		return ErrStarted
	}
	if err := e.refreshLimits(ctx); err != nil {
		return fmt.Errorf("skiplock: reading limits: %w", err)
	}
	base := context.WithoutCancel(ctx)
	e.fetchCtx, e.stopFetch = context.WithCancel(base)
	e.jobsCtx, e.cancelJobs = context.WithCancelCause(base)
	e.bgCtx, e.stopBg = context.WithCancel(base)

	if !e.cfg.PollOnly {
		cc := e.cfg.Pool.Config().ConnConfig
		if e.cfg.ListenConnConfig != nil {
			cc = e.cfg.ListenConnConfig
		}
		l, err := notify.New(notify.Config{
			ConnConfig: cc.Copy(),
			Channels:   []string{e.cfg.Channel},
			Logger:     e.cfg.Log,
			// Reconnect as often as a failing claim retries (failBackoff): after a
			// failover the listener is back, and its notifications with it, within
			// about a poll interval.
			MaxBackoff: retryMax(50*time.Millisecond, e.cfg.PollInterval),
			OnNotify: func(_, queue string) {
				if queue == store.LimitsChanged {
					signal(e.limitsChanged)
					return
				}
				if p := e.producers[queue]; p != nil {
					signal(p.wake)
				}
			},
			OnConnect: func() {
				for _, p := range e.producers {
					signal(p.wake)
					signal(p.reconnected)
				}
			},
		})
		if err != nil {
			e.stopFetch()
			e.cancelJobs(err)
			e.stopBg()
			return err
		}
		e.listener = l
		e.prodWG.Add(1)
		go func() { defer e.prodWG.Done(); l.Run(e.fetchCtx) }()
	}
	for _, p := range e.producers {
		e.prodWG.Add(1)
		go e.produce(p)
		if !e.cfg.Citus {
			e.prodWG.Add(1)
			go e.checkHead(p)
		}
		for i := 0; i < p.cap.workers; i++ {
			e.execWG.Add(1)
			go e.executor(p)
		}
	}
	e.bgWG.Add(4)
	go e.watchLimits()
	go e.heartbeat()
	go e.complete()
	go e.warm()
	for _, run := range e.cfg.Background {
		e.bgWG.Add(1)
		go func() { defer e.bgWG.Done(); run(e.bgCtx) }()
	}
	return nil
}

// Stopped is closed once the engine has stopped.
func (e *Engine) Stopped() <-chan struct{} { return e.stopped }

// Stop stops claiming, hands back the jobs claimed but not started, and waits for
// running jobs to finish and their outcomes to be written (cancelJobs: cancels every
// running job's context at once). If ctx ends first, the running jobs' contexts are
// cancelled with ErrShutdown, and Stop returns ctx's error once they have returned —
// at most HeartbeatInterval later: a handler that ignores its context is abandoned
// and its lease left to expire. A second Stop waits for the first.
func (e *Engine) Stop(ctx context.Context, cancelJobs bool) error {
	e.stopOnce.Do(func() { go e.shutdown() })
	if cancelJobs {
		e.cancelJobs(ErrShutdown)
	}
	select {
	case <-e.stopped:
		return nil
	case <-ctx.Done():
	}
	e.cancelJobs(ErrShutdown)
	select {
	case <-e.stopped:
	case <-time.After(e.cfg.HeartbeatInterval):
		e.cfg.Log.Warn("skiplock: stopping with handlers still running; their leases will expire", "running", e.Running())
		e.abandonOnce.Do(func() { close(e.abandon) })
		<-e.stopped
	}
	return ctx.Err()
}

// shutdown drains the engine: producers first (no new claims), then the executors
// (unstarted jobs handed back), then — once every job's outcome is written, or the
// stopper gave up on handlers that ignore their context — the background work.
func (e *Engine) shutdown() {
	e.stopFetch()
	e.prodWG.Wait()
	for _, p := range e.producers {
		p.local.close() // executors hand back what they have not started, then exit
	}
	e.returnSuccessors() // as are successors waiting for a running job's slot
	done := make(chan struct{})
	go func() { e.jobsWG.Wait(); close(done) }()
	abandoned := false
	select {
	case <-done:
	case <-e.abandon:
		abandoned = true
	}
	e.stopBg()
	e.bgWG.Wait()
	if !abandoned {
		e.execWG.Wait()
	}
	if e.cfg.Hooks.Stopped != nil {
		e.cfg.Hooks.Stopped()
	}
	close(e.stopped)
}

// Running counts the jobs in flight: claimed and not yet durable.
func (e *Engine) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inflight)
}

// now is the time parameter of the engine's statements (nil: the database's now()).
func (e *Engine) now() *time.Time { return store.NowParam(e.cfg.Clock) }
