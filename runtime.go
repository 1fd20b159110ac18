package skiplock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/engine"
	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/migrate"
	"github.com/skiplock/skiplock/internal/store"
)

// A started client runs the engine (internal/engine: producers, executors,
// heartbeater, completer, listener, warmer) and the maintenance services; this file
// hands the engine what only this package knows — which handler runs a kind, the
// middleware, how a handler's result becomes an outcome, the events and counters.

// ErrClientStarted is returned by Start on a client that is already running.
var ErrClientStarted = errors.New("skiplock: client already started")

// Start checks the schema and begins working the configured queues; it returns once
// the workers run. The client works until Stop or StopAndCancel, or until ctx ends:
// ending ctx (for example a signal.NotifyContext on SIGTERM) is a graceful stop — no
// new claims, running jobs get Config.ShutdownTimeout to finish, then the rest are
// cancelled and go back to pending without spending an attempt.
//
// Start refuses a cancelled ctx, a client without Queues, and a schema that is not
// migrated (ErrNotMigrated) or was migrated by a newer skiplock (ErrSchemaNewer); so
// a worker pointed at a misspelled schema fails at once instead of idling. On a schema
// with the Citus layout it returns ErrNotOnCitus, naming the feature, for what workers
// cannot do there with its guarantee: limits, fair weights and bypass priorities
// (docs/citus.md).
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
	// On the Citus layout every statement of a worker names one key (docs/citus.md):
	// what cannot is refused here rather than failing at every poll. The store keeps
	// the answer and picks the layout's statements from then on.
	dist, err := c.store.Distributed(ctx, c.pool)
	if err != nil {
		return fmt.Errorf("skiplock: checking schema %q: %w", c.cfg.Schema, wrapPgError(err))
	}
	if dist {
		if err := c.citusRefusals(ctx); err != nil {
			return err
		}
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
	c.citus = dist
	cfg := c.engineConfig()
	cfg.Citus = dist
	e := engine.New(cfg)
	if err := e.Start(ctx); err != nil {
		return wrapPgError(err)
	}
	c.rt = e
	go lifecycle.StopWhenDone(ctx, e.Stopped(), c.cfg.ShutdownTimeout, c.Stop, func() {
		c.log.Warn("skiplock: jobs still running at the end of ShutdownTimeout were cancelled and go back to pending",
			"shutdown_timeout", c.cfg.ShutdownTimeout)
	})
	c.log.Info("skiplock: client started", "worker_id", c.cfg.ID, "queues", len(c.cfg.Queues), "poll_only", c.cfg.PollOnly)
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

func (c *Client) stop(ctx context.Context, cancelJobs bool) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	c.mu.Lock()
	e := c.rt
	c.mu.Unlock()
	if e == nil {
		return nil
	}
	if err := e.Stop(ctx, cancelJobs); err != nil {
		return fmt.Errorf("skiplock: stopping client: %w", err)
	}
	return nil
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

// CheckWritable reports whether the database the client's pool reaches takes writes
// now: it commits a transaction that takes a transaction id, so it fails on a standby
// (a pool that reached a replica, or an old primary that came back as one) and waits,
// as the client's own writes would, while the primary's synchronous standbys do not
// acknowledge — which is how a failover manager such as pg_auto_failover holds a
// newly promoted primary's commits until it has fenced the old one. Bound the wait
// with ctx. health's /readyz runs it (docs/operations.md, "High availability").
func (c *Client) CheckWritable(ctx context.Context) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	if err := c.store.Writable(ctx, c.pool); err != nil {
		return fmt.Errorf("skiplock: the database takes no writes: %w", wrapPgError(err))
	}
	return nil
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

// engineConfig is the engine's share of the client's configuration, with the hooks
// through which it runs jobs and reports them.
func (c *Client) engineConfig() engine.Config {
	queues := make(map[string]engine.Queue, len(c.cfg.Queues))
	for name, q := range c.cfg.Queues {
		queues[name] = engine.Queue{MaxWorkers: q.MaxWorkers, MaxPrefetch: q.MaxPrefetch, PrefetchWindow: q.PrefetchWindow}
	}
	var background []func(context.Context)
	for _, svc := range c.services() {
		background = append(background, func(ctx context.Context) { c.maint.Loop(ctx, svc) })
	}
	cfg := engine.Config{
		Store: c.store, Pool: c.pool, Log: c.log, WorkerID: c.cfg.ID, Channel: c.channel, Queues: queues,
		LeaseDuration: c.cfg.LeaseDuration, HeartbeatInterval: c.cfg.HeartbeatInterval,
		PollInterval: c.cfg.PollInterval, PollOnly: c.cfg.PollOnly, ListenConnConfig: c.listenConn, FetchLimit: c.cfg.FetchLimit,
		CompletionBatchSize: c.cfg.CompletionBatchSize, CompletionBatchDelay: c.cfg.CompletionBatchDelay,
		DeleteOnSuccess: c.cfg.DeleteOnSuccess, LeaseLost: ErrLeaseLost,
		Failures: c.failures.r, Counters: &c.metrics.engine, Background: background,
		Hooks: engine.Hooks{
			Adopt:   func(row *store.Job) any { return c.claimed(row) },
			Timeout: func(job any) time.Duration { return c.jobTimeout(job.(*Job)) },
			Run:     func(ctx context.Context, job any) engine.Result { return c.runJob(ctx, job.(*Job)) },
			Done:    c.jobDone,
			Stopped: c.stopped,
		},
	}
	if c.cfg.Clock != nil {
		cfg.Clock = c.cfg.Clock
	}
	return cfg
}

// jobDone reports a job whose outcome the engine wrote (or dropped, its lease lost):
// counters, the job's state, and the event.
func (c *Client) jobDone(d engine.Done) {
	job := d.Job.(*Job)
	ev := &Event{Job: job, Err: d.Err, RunDuration: d.Run, QueueWait: d.Waited}
	if d.Status == "" {
		c.metrics.leaseLost.Add(1)
		ev.Kind = EventLeaseLost
		c.failures.notice("lease_lost", "skiplock: lease lost; outcome discarded (counted in ProcessCounters.LeaseLost)",
			"job_id", job.ID, "kind", job.Kind, "attempt", job.Attempt)
	} else {
		job.State = JobState(d.Status)
		ev.Kind = c.count(d.Action, d.Status)
		if ev.Kind == EventSucceeded && d.Err != nil {
			c.failures.notice("completed_then_failed", "skiplock: the handler returned an error after its CompleteTx committed; the completion stands and the job succeeded",
				"job_id", job.ID, "kind", job.Kind, "attempt", job.Attempt, "error", d.Err)
		}
	}
	c.emit(ev)
}

// stopped runs when the engine has stopped, before Stop returns.
func (c *Client) stopped() {
	c.coalescer.Wait()
	c.mu.Lock()
	c.rt = nil
	c.mu.Unlock()
	c.log.Info("skiplock: client stopped", "worker_id", c.cfg.ID)
}
