package skiplock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/migrate"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/store"
)

// A started client runs, per process:
//
//	producer (one per queue)  wait for NOTIFY, a freed slot or a jittered poll; claim up
//	                          to the free slots in one statement; start one goroutine per job
//	executor (per job)        handler(ctx, job) with middleware, panic → error, timeout
//	heartbeater               one UPDATE per tick renews every in-flight lease; a lost
//	                          lease cancels the job's context and drops its outcome
//	completer                 batches outcomes into one fenced UPDATE … FROM unnest(…);
//	                          a slot is freed only once its outcome is durable
//	listener                  one dedicated LISTEN connection, reconnecting
//	maintenance               reclaimer (and other services), one client at a time
//
// Database connections: the listener's own connection, plus pool connections held
// only for the duration of a statement by at most one claim per queue, the
// heartbeater, the completer and each maintenance service — independent of how
// many jobs run at once.

// ErrClientStarted is returned by Start on a client that is already running.
var ErrClientStarted = errors.New("skiplock: client already started")

type runtime struct {
	c *Client

	fetchCtx   context.Context // producers and listener
	stopFetch  context.CancelFunc
	jobsCtx    context.Context // handlers
	cancelJobs context.CancelCauseFunc
	bgCtx      context.Context // heartbeater, completer, maintenance
	stopBg     context.CancelFunc

	producers map[string]*producer
	listener  *notify.Listener

	mu       sync.Mutex
	inflight map[string]*inflight

	outcomes    chan *inflight
	prodWG      sync.WaitGroup
	execWG      sync.WaitGroup
	jobsWG      sync.WaitGroup // claim → outcome durable (or dropped)
	bgWG        sync.WaitGroup
	stopOnce    sync.Once
	stopped     chan struct{} // closed when shutdown has finished
	abandonOnce sync.Once
	abandon     chan struct{} // closed when a stopper gives up on running handlers

	limits        atomic.Pointer[limitView] // which claims run limited (limiter.go)
	limitsChanged chan struct{}             // a limits NOTIFY arrived
	idle          chan struct{}             // a producer began waiting for jobs (warmer.go)
}

type inflight struct {
	job      *Job
	p        *producer
	ctx      context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time // zero: none; guarded by runtime.mu
	started  time.Time
	begun    atomic.Bool // the handler was started
	released bool        // never started; handed back at Stop
	unblocks bool        // its outcome can make a job ready behind a claim cursor (cursor.go)
	returned atomic.Bool
	lost     atomic.Bool
	warned   atomic.Bool

	// A limit slot's handoff (limiter.go), both guarded by runtime.mu: next is the
	// successor that runs on this job's executor once its handler returned; closed is
	// set when the executor moved on, after which no successor can be attached.
	next   *inflight
	closed bool
	// refused: a successor of this job was given back, so it takes no other.
	refused bool
	// handedOn: a successor took over its slots, so its outcome frees none.
	handedOn atomic.Bool
	// giveBack returns a successor to pending if its predecessor runs too long.
	giveBack *time.Timer

	outcome store.Outcome
	err     error
	runDur  time.Duration
	wait    time.Duration
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Start checks the schema and begins working the configured queues; it returns once
// the workers run. The client works until Stop or StopAndCancel, or until ctx ends:
// ending ctx (for example a signal.NotifyContext on SIGTERM) is a graceful stop — no
// new claims, running jobs get Config.ShutdownTimeout to finish, then the rest are
// cancelled and go back to pending without spending an attempt.
//
// Start refuses a cancelled ctx, a client without Queues, and a schema that is not
// migrated (ErrNotMigrated) or was migrated by a newer skiplock (ErrSchemaNewer); so
// a worker pointed at a misspelled schema fails at once instead of idling.
func (c *Client) Start(ctx context.Context) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("skiplock: starting client: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rt != nil {
		return ErrClientStarted
	}
	if len(c.cfg.Queues) == 0 {
		return invalid("config", "no Queues to work; a client without queues only enqueues")
	}
	if err := c.checkSchema(ctx); err != nil {
		return err
	}
	// Declared schedules are written before Start returns, so a mistake surfaces here
	// and ScheduleList shows them at once (the scheduler checks again on its first run).
	if len(c.cfg.Periodic) > 0 || c.cfg.PeriodicRemoveUndeclared {
		if err := c.reconcileSchedules(ctx); err != nil {
			return fmt.Errorf("skiplock: writing Config.Periodic: %w", err)
		}
	}
	if err := c.applyConfigLimits(ctx); err != nil {
		return err
	}
	r := &runtime{
		c:         c,
		producers: map[string]*producer{},
		inflight:  map[string]*inflight{},
		stopped:   make(chan struct{}),
		abandon:   make(chan struct{}),

		limitsChanged: make(chan struct{}, 1),
		idle:          make(chan struct{}, 1),
	}
	total := 0
	for name, q := range c.cfg.Queues {
		active := q.MaxWorkers + max(q.MaxPrefetch, 0)
		r.producers[name] = &producer{queue: name, cfg: q, local: make(chan *inflight, active),
			wake: make(chan struct{}, 1), slot: make(chan struct{}, 1), freed: make(chan struct{}, 1),
			orphan: make(chan struct{}, 1)}
		total += active + c.cfg.CompletionBatchSize
	}
	r.outcomes = make(chan *inflight, total)
	if err := r.refreshLimits(ctx); err != nil {
		return fmt.Errorf("skiplock: reading limits: %w", wrapPgError(err))
	}
	base := context.WithoutCancel(ctx)
	r.fetchCtx, r.stopFetch = context.WithCancel(base)
	r.jobsCtx, r.cancelJobs = context.WithCancelCause(base)
	r.bgCtx, r.stopBg = context.WithCancel(base)

	if !c.cfg.PollOnly {
		l, err := notify.New(notify.Config{
			ConnConfig: c.pool.Config().ConnConfig.Copy(),
			Channels:   []string{c.channel},
			Logger:     c.log,
			OnNotify: func(_, queue string) {
				if queue == store.LimitsChanged {
					signal(r.limitsChanged)
					return
				}
				if p := r.producers[queue]; p != nil {
					signal(p.wake)
				}
			},
			OnConnect: func() {
				for _, p := range r.producers {
					signal(p.wake)
				}
			},
		})
		if err != nil {
			return err
		}
		r.listener = l
		r.prodWG.Add(1)
		go func() { defer r.prodWG.Done(); l.Run(r.fetchCtx) }()
	}
	for _, p := range r.producers {
		r.prodWG.Add(2)
		go r.produce(p)
		go r.checkHead(p)
		for i := 0; i < p.cfg.MaxWorkers; i++ {
			r.execWG.Add(1)
			go r.executor(p)
		}
	}
	r.bgWG.Add(4)
	go r.watchLimits()
	go r.heartbeat()
	go r.complete()
	go r.warm()
	for _, svc := range c.services() {
		r.bgWG.Add(1)
		go r.maintain(svc)
	}
	c.rt = r
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
			defer cancel()
			if err := c.Stop(sctx); err != nil {
				c.log.Warn("skiplock: jobs still running at the end of ShutdownTimeout were cancelled and go back to pending",
					"shutdown_timeout", c.cfg.ShutdownTimeout)
			}
		case <-r.stopped:
		}
	}()
	c.log.Info("skiplock: client started", "worker_id", c.cfg.ID, "queues", len(r.producers), "poll_only", c.cfg.PollOnly)
	return nil
}

// Stop stops claiming new jobs, releases the jobs claimed but not started (they are
// claimable by other clients at once), and waits for running jobs to finish and
// their outcomes to be written. If ctx ends first, running jobs' contexts are
// cancelled — their jobs go back to pending without spending an attempt — and Stop
// returns ctx's error once they have returned (at most HeartbeatInterval later; a
// handler that ignores its context is abandoned and its lease left to expire).
// Stop on a client that is not running returns nil; a second concurrent Stop waits
// for the first.
func (c *Client) Stop(ctx context.Context) error { return c.stop(ctx, false) }

// StopAndCancel stops as Stop does but cancels every running job's context at once.
// Interrupted jobs go back to pending without spending an attempt.
func (c *Client) StopAndCancel(ctx context.Context) error { return c.stop(ctx, true) }

var errShutdown = errors.New("skiplock: client shutting down")

func (c *Client) stop(ctx context.Context, cancelJobs bool) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	c.mu.Lock()
	r := c.rt
	c.mu.Unlock()
	if r == nil {
		return nil
	}
	r.stopOnce.Do(func() { go r.shutdown() })
	if cancelJobs {
		r.cancelJobs(errShutdown)
	}
	select {
	case <-r.stopped:
		return nil
	case <-ctx.Done():
	}
	r.cancelJobs(errShutdown)
	select {
	case <-r.stopped:
	case <-time.After(c.cfg.HeartbeatInterval):
		c.log.Warn("skiplock: stopping with handlers still running; their leases will expire", "running", r.running())
		r.abandonOnce.Do(func() { close(r.abandon) })
		<-r.stopped
	}
	return fmt.Errorf("skiplock: stopping client: %w", ctx.Err())
}

// shutdown drains the runtime: producers first (no new claims), then the executors
// (unstarted jobs released), then — once every job's outcome is written, or the
// stopper gave up on handlers that ignore their context — the background services.
func (r *runtime) shutdown() {
	c := r.c
	r.stopFetch()
	r.prodWG.Wait()
	for _, p := range r.producers {
		close(p.local) // executors release what they have not started, then exit
	}
	r.returnSuccessors() // as are successors waiting for a running job's slot
	done := make(chan struct{})
	go func() { r.jobsWG.Wait(); close(done) }()
	abandoned := false
	select {
	case <-done:
	case <-r.abandon:
		abandoned = true
	}
	r.stopBg()
	r.bgWG.Wait()
	if !abandoned {
		r.execWG.Wait()
	}
	c.bg.Wait()
	c.mu.Lock()
	c.rt = nil
	c.mu.Unlock()
	close(r.stopped)
	c.log.Info("skiplock: client stopped", "worker_id", c.cfg.ID)
}

// CheckSchema reports whether the client's schema holds every migration this build
// needs (else ErrNotMigrated, naming the schema) and none it does not know (else
// ErrSchemaNewer). Start runs it; a process that never starts a client — an outbox
// relay, a dashboard, a readiness probe — can run it to turn a misspelt
// Config.Schema into one clear error instead of a failure at every statement.
// Errors reaching the database are returned as they are.
func (c *Client) CheckSchema(ctx context.Context) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	return c.checkSchema(ctx)
}

// checkSchema makes sure the schema holds every migration this build needs and none
// it does not know.
func (c *Client) checkSchema(ctx context.Context) error {
	applied, exists, err := migrate.Applied(ctx, c.pool, c.cfg.Schema)
	if err != nil {
		return fmt.Errorf("skiplock: checking schema %q: %w", c.cfg.Schema, wrapPgError(err))
	}
	missing, unknown := migrate.Drift(applied)
	switch {
	case !exists:
		return fmt.Errorf("%w: schema %q has no skiplock tables", ErrNotMigrated, c.cfg.Schema)
	case len(unknown) > 0:
		return fmt.Errorf("%w: schema %q has migration(s) %v that this build does not know; upgrade skiplock", ErrSchemaNewer, c.cfg.Schema, unknown)
	case len(missing) > 0:
		return fmt.Errorf("%w: schema %q lacks migration(s) %v", ErrNotMigrated, c.cfg.Schema, missing)
	}
	return nil
}

func (r *runtime) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight)
}
