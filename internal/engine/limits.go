package engine

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// limitView is which claims a client must run limited: those of the queues with a
// limit of their own, and every queue's while any kind has one. It is a cache that
// only picks the claim statement — the plain claim itself refuses to take a job a
// limit governs (store.unlimited), so a stale view can delay jobs by one refresh but
// never exceed a limit.
type limitView struct {
	queues  map[string]bool
	anyKind bool
}

func (v *limitView) covers(queue string) bool { return v != nil && (v.anyKind || v.queues[queue]) }

// limited reports whether the producer of queue must run the limited claim.
func (e *Engine) limited(queue string) bool { return e.limits.Load().covers(queue) }

// refreshLimits reloads the view and wakes the producers whose claim changes, and
// reloads which queues are fair (fair.go).
func (e *Engine) refreshLimits(ctx context.Context) error {
	qs, anyKind, err := e.cfg.Store.LimitScopes(ctx, e.cfg.Pool)
	if err != nil {
		return err
	}
	v := &limitView{queues: make(map[string]bool, len(qs)), anyKind: anyKind}
	for _, q := range qs {
		v.queues[q] = true
	}
	old := e.limits.Swap(v)
	for name, p := range e.producers {
		if old.covers(name) != v.covers(name) {
			signal(p.wake)
		}
	}
	return e.refreshFair(ctx)
}

// watchLimits refreshes the view on every limits NOTIFY and every PollInterval.
func (e *Engine) watchLimits() {
	defer e.bgWG.Done()
	for {
		select {
		case <-e.limitsChanged:
		case <-time.After(hostclock.Jitter(e.cfg.PollInterval)):
		case <-e.bgCtx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(e.bgCtx, 10*time.Second)
		err := e.refreshLimits(ctx)
		cancel()
		if err != nil && e.bgCtx.Err() == nil {
			e.cfg.Failures.Warn("limits", err)
			continue
		}
		e.cfg.Failures.OK("limits")
	}
}

// claimLimited is the producer's claim for a queue under limits. It reports the
// jobs held back by a limit (throttled) and, when a rate window is full, how long
// until it frees a start.
func (e *Engine) claimLimited(ctx context.Context, p *producer, n, waiting int, successors bool) ([]*store.Job, claimResult, error) {
	var preds []store.Lease
	if p.handoff.Load() {
		preds = e.predecessors(p)
	}
	// Limited claims resume from the producer's cursor too (cursor.go), so a held
	// snapshot does not make each of them walk every job claimed since it was taken.
	after, ticket := p.cursor.get()
	params := store.ClaimParams{Queue: p.queue, WorkerID: e.cfg.WorkerID, Limit: n, Waiting: waiting, Lease: e.cfg.LeaseDuration, Preds: preds,
		After: after, Lag: e.cfg.PollInterval}
	if successors && p.handoff.Load() {
		still := claimResult{short: true, throttled: true, successors: true}
		if len(preds) == 0 {
			return nil, still, nil
		}
		// Successors come from the jobs the cursor has not passed; taking them moves
		// nothing it must stay behind, so the cursor stays.
		jobs, err := e.cfg.Store.ClaimSuccessors(ctx, e.cfg.Pool, e.now(), params)
		return jobs, still, err
	}
	res, err := e.cfg.Store.ClaimLimited(ctx, e.cfg.Pool, e.now(), params)
	if err != nil {
		return nil, claimResult{}, err
	}
	// The next claim resumes at the first job left waiting (one a limit held back
	// must not fall behind the cursor), or after the last job taken when none waits.
	switch {
	case res.Next != nil:
		p.cursor.advance(ticket, res.Next)
	case len(res.Jobs) > 0:
		p.cursor.advance(ticket, store.CursorOf(res.Jobs[len(res.Jobs)-1]))
	}
	out := claimResult{short: len(res.Jobs) < n}
	// Handoff stays on from a throttled claim until the queue has no due job left: a
	// claim that got all it asked for, with jobs still waiting, may have taken the last
	// free slots (a client that holds every slot runs its jobs in step, and its claims
	// come when all of them have just ended, too late to name them as predecessors).
	switch {
	case out.short && res.Waiting > 0:
		p.handoff.Store(true)
	case res.Waiting == 0:
		p.handoff.Store(false)
	}
	if out.short && res.Waiting > 0 {
		out.throttled = true
		e.cfg.Counters.Throttled.Add(int64(min(res.Waiting, n-len(res.Jobs))))
		if res.RetryIn != nil {
			out.retryIn = max(*res.RetryIn, time.Millisecond)
		}
	}
	return res.Jobs, out, nil
}
