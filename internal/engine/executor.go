package engine

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// executor runs the producer's queued jobs one at a time until Stop closes the
// queue. Jobs still queued at Stop were never started: they go back to pending at
// once, with the claim's attempt given back.
//
// A job that took a successor (a limit slot's handoff, handoff.go) is followed on
// the same executor by that successor, as soon as its handler has returned.
func (e *Engine) executor(p *producer) {
	defer e.execWG.Done()
	for {
		f, ok := p.local.pop()
		if !ok {
			return
		}
		for ; f != nil; f = e.successor(f) {
			if e.fetchCtx.Err() != nil {
				e.handBack(f, true)
				continue
			}
			e.execute(f)
			p.cap.vacate()
		}
	}
}

// handBack hands a job that was never started back to pending, with the claim's
// attempt given back (its outcome is written by the completer), and frees its
// active place (active: it had one among the queued or running jobs; a successor
// waiting for its predecessor has none).
func (e *Engine) handBack(f *flight, active bool) {
	if !f.handBack() {
		return // it started: its own outcome follows
	}
	f.outcome = store.Outcome{Lease: f.lease(), Action: store.ActionSnooze}
	e.outcomes <- f
	if active {
		f.p.cap.vacate()
	} else {
		f.p.cap.poke()
	}
}

// execute runs a queued job's handler and sends its outcome to the completer, or
// drops it when the lease was lost before or while the handler ran.
func (e *Engine) execute(f *flight) {
	hooks := &e.cfg.Hooks
	f.started = hostclock.Now()
	if late := e.lateForRate(f); late > 0 {
		// A rate limit counted this start at the claim; starting now could put more
		// starts than the limit in one window of its period (store.RateStartSlack).
		e.cfg.Failures.Notice("rate_late", "skiplock: a job under a rate limit could not start within its slack of the claim; handed back to pending with its attempt given back",
			"job_id", f.row.ID, "kind", f.row.Kind, "late_by", late, "slack", store.RateStartSlack)
		e.cfg.Counters.LateStarts.Add(1)
		e.handBack(f, false) // the executor's loop vacates its place
		return
	}
	ctx, cancel := context.WithCancelCause(e.jobsCtx)
	if timeout := hooks.Timeout(f.job); timeout > 0 {
		deadline := f.started.Add(timeout)
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithDeadline(ctx, deadline)
		f.cancel = func(cause error) { cancel(cause); cancelT() }
		f.deadline = deadline
	} else {
		f.cancel = cancel
	}
	f.ctx = ctx
	if !f.start() { // its lease was lost while it waited locally
		f.cancel(nil)
		e.retire(f, nil)
		return
	}
	if e.cfg.Clock != nil {
		f.wait = e.cfg.Clock.Now().Sub(f.row.RunAt)
	} else {
		f.wait = f.started.Sub(f.row.RunAt)
	}
	if f.p.handoff.Load() {
		signal(f.p.orphan) // its slot can be handed on: worth a claim for a successor
	}
	if f.waits {
		signal(e.began) // the database says it waits: the heartbeater writes its start
	}
	res := hooks.Run(ctx, f.job)
	f.runDur = hostclock.Since(f.started)
	f.p.cap.observe(f.runDur)
	if !f.finishRun() { // its lease was lost while it ran
		f.cancel(nil)
		e.retire(f, nil)
		return
	}
	f.err, f.outcome, f.inTx = res.Err, res.Outcome, res.InTx
	f.cancel(nil)
	e.outcomes <- f
}

// retire ends a flight once its outcome is durable (status != nil) or dropped, and
// frees its places.
func (e *Engine) retire(f *flight, status *string) {
	e.mu.Lock()
	if e.inflight[f.row.ID] == f { // a later claim of the job may have replaced it (hold)
		delete(e.inflight, f.row.ID)
	}
	handedOn := f.slot == slotHandedOn
	e.mu.Unlock()
	if f.state() != released {
		d := Done{Job: f.job, Err: f.err, Run: f.runDur, Waited: f.wait, Action: f.outcome.Action}
		if status != nil {
			d.Status = *status
		}
		e.cfg.Hooks.Done(d)
		if status != nil && f.unblocks {
			e.rewindAll()
		}
	}
	f.p.cap.durable(handedOn)
	e.jobsWG.Done()
}

// lateForRate is how late a job under a rate limit would start now, past its claim's
// time plus store.RateStartSlack (0: in time, or no rate limit counted it). The
// claim's time is the injected clock's or the database's, so now is read from the
// same clock: the injected one, else the host's, which must agree with the
// database's to well within the slack.
func (e *Engine) lateForRate(f *flight) time.Duration {
	if f.startBy.IsZero() {
		return 0
	}
	now := f.started
	if e.cfg.Clock != nil {
		now = e.cfg.Clock.Now()
	}
	return max(now.Sub(f.startBy), 0)
}
