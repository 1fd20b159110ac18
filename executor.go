package skiplock

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/safetext"
	"github.com/skiplock/skiplock/internal/store"
)

// executor runs the producer's queued jobs one at a time until Stop closes the
// queue. Jobs still queued at Stop were never started: they go back to pending at
// once, with the claim's attempt given back.
//
// A job that took a successor (a limit slot's handoff, limiter.go) is followed on the
// same executor by that successor, as soon as its handler has returned.
func (r *runtime) executor(p *producer) {
	defer r.execWG.Done()
	for f := range p.local {
		for ; f != nil; f = r.successor(f) {
			switch {
			case r.fetchCtx.Err() != nil:
				r.giveBack(f, true)
				continue
			case f.lost.Load(): // the lease ran out while the job waited locally
				r.finish(f, nil)
			default:
				r.execute(f)
			}
			p.active.Add(-1)
			signal(p.slot)
		}
	}
}

// giveBack hands a job that was never started back to pending, with the claim's
// attempt given back (its outcome is written by the completer), and frees its place
// in the producer's capacity (active: it had one among the queued or running jobs;
// a successor waiting for its predecessor has none).
func (r *runtime) giveBack(f *inflight, active bool) {
	f.outcome = store.Outcome{Lease: f.job.lease(), Action: store.ActionSnooze}
	f.released = true
	r.outcomes <- f
	if active {
		f.p.active.Add(-1)
	}
	signal(f.p.slot)
}

// begin prepares a job's context just before its handler runs.
func (r *runtime) begin(f *inflight) (registration, bool) {
	c := r.c
	job := f.job
	f.started = hostclock.Now()
	timeout := c.cfg.JobTimeout
	reg, known := c.workers.lookup(job.Kind)
	if known && reg.opts.Timeout > 0 {
		timeout = reg.opts.Timeout
	}
	ctx := ContextWithJob(r.jobsCtx, job)
	ctx, cancel := context.WithCancelCause(ctx)
	if timeout > 0 {
		deadline := f.started.Add(timeout)
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithDeadline(ctx, deadline)
		f.cancel = func(cause error) { cancel(cause); cancelT() }
		r.mu.Lock()
		f.deadline = deadline
		r.mu.Unlock()
	} else {
		f.cancel = cancel
	}
	f.ctx = ctx
	if c.cfg.Clock != nil {
		f.wait = c.cfg.Clock.Now().Sub(job.RunAt)
	} else {
		f.wait = f.started.Sub(job.RunAt)
	}
	f.begun.Store(true)
	if f.lost.Load() { // lost while waiting locally
		cancel(ErrLeaseLost)
	}
	return reg, known
}

func (r *runtime) execute(f *inflight) {
	c := r.c
	job := f.job
	reg, known := r.begin(f)
	if f.p.handoff.Load() {
		signal(f.p.orphan) // its slot can be handed on: worth a claim for a successor
	}
	var err error
	if !known {
		err = Permanent(fmt.Errorf("no worker registered for kind %q", job.Kind))
	} else {
		h := reg.handler
		for i := len(c.cfg.Middleware) - 1; i >= 0; i-- {
			h = c.cfg.Middleware[i](h)
		}
		err = runHandler(f.ctx, h, job)
	}
	f.runDur = hostclock.Since(f.started)
	f.p.observe(f.runDur)
	f.returned.Store(true)
	if f.lost.Load() {
		f.cancel(nil)
		r.finish(f, nil)
		return
	}
	f.err = err
	f.outcome = r.classify(job, err, f.ctx)
	f.cancel(nil)
	r.outcomes <- f
}

// runHandler calls h, turning a panic into an error that carries the stack.
func runHandler(ctx context.Context, h HandlerFunc, job *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, job)
}

// classify maps a handler's result to the outcome written for the job. Nothing a
// handler returns can make the outcome unwritable: error text goes through the text
// policy (safetext), delays are clamped to 0..MaxSchedule, and an error whose methods
// panic, or a retry policy that panics, still yields an outcome.
func (r *runtime) classify(job *Job, err error, ctx context.Context) (o store.Outcome) {
	o = store.Outcome{Lease: job.lease()}
	defer func() {
		if p := recover(); p != nil {
			o = store.Outcome{Lease: job.lease(), Action: store.ActionRetry,
				Error: safetext.Clean(fmt.Sprintf("skiplock: classifying the handler's error panicked: %v", p)),
				Delay: clampDelay(DefaultRetryPolicy.Delay(job.Attempt))}
		}
	}()
	var (
		snooze *SnoozeError
		cancel *CancelError
		perm   *PermanentError
	)
	switch {
	case err == nil:
		o.Action, o.Output = store.ActionComplete, job.output
	case errors.Is(context.Cause(ctx), errShutdown):
		// Cut off by shutdown: back to pending at once with the attempt given back, as
		// if it had never been claimed.
		o.Action = store.ActionSnooze
	case errors.As(err, &snooze):
		o.Action, o.Delay = store.ActionSnooze, clampDelay(snooze.Delay)
	case errors.As(err, &cancel):
		o.Action, o.Error = store.ActionCancel, safetext.Error(err)
	case errors.As(err, &perm):
		o.Action, o.Error = store.ActionFail, safetext.Error(err)
	default:
		o.Action, o.Error = store.ActionRetry, safetext.Error(err)
		if ctx.Err() == context.DeadlineExceeded {
			o.Error = "timed out: " + o.Error
		}
		o.Delay = r.c.retryDelay(job.Kind, job.Attempt)
	}
	return o
}

// clampDelay bounds a delay from a handler or a retry policy to 0..MaxSchedule, so a
// negative or overflowing value can neither fail the statement nor park a job for
// centuries.
func clampDelay(d time.Duration) time.Duration {
	return min(max(d, 0), MaxSchedule)
}

// finish frees a job's slot after its outcome is durable (status != "") or dropped.
func (r *runtime) finish(f *inflight, status *string) {
	c := r.c
	r.mu.Lock()
	if r.inflight[f.job.ID] == f { // a later claim of the job may have replaced it (hold)
		delete(r.inflight, f.job.ID)
	}
	r.mu.Unlock()
	ev := &Event{Job: f.job, Err: f.err, RunDuration: f.runDur, QueueWait: f.wait}
	switch {
	case f.released:
		r.release(f)
		return
	case status == nil:
		c.metrics.leaseLost.Add(1)
		ev.Kind = EventLeaseLost
		c.failures.notice("lease_lost", "skiplock: lease lost; outcome discarded (counted in ProcessCounters.LeaseLost)",
			"job_id", f.job.ID, "kind", f.job.Kind, "attempt", f.job.Attempt)
	default:
		f.job.State = JobState(*status)
		ev.Kind = c.count(f.outcome.Action, *status)
		if f.unblocks {
			r.rewindAll()
		}
	}
	c.emit(ev)
	r.release(f)
}

// release frees the job's place in its producer's capacity.
func (r *runtime) release(f *inflight) {
	f.p.held.Add(-1)
	signal(f.p.slot)
	if !f.handedOn.Load() { // else its slot went to its successor, not back to the limit
		signal(f.p.freed)
	}
	r.jobsWG.Done()
}
