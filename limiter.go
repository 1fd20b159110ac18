package skiplock

import (
	"context"
	"fmt"
	"slices"
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

// limited reports whether the producer of queue must run the limited claim.
func (r *runtime) limited(queue string) bool {
	v := r.limits.Load()
	return v != nil && (v.anyKind || v.queues[queue])
}

// refreshLimits reloads the view and wakes the producers whose claim changes.
func (r *runtime) refreshLimits(ctx context.Context) error {
	qs, anyKind, err := r.c.store.LimitScopes(ctx, r.c.pool)
	if err != nil {
		return err
	}
	v := &limitView{queues: make(map[string]bool, len(qs)), anyKind: anyKind}
	for _, q := range qs {
		v.queues[q] = true
	}
	old := r.limits.Swap(v)
	for name, p := range r.producers {
		was := old != nil && (old.anyKind || old.queues[name])
		if was != (v.anyKind || v.queues[name]) {
			signal(p.wake)
		}
	}
	return nil
}

// watchLimits refreshes the view on every limits NOTIFY and every PollInterval.
func (r *runtime) watchLimits() {
	defer r.bgWG.Done()
	for {
		select {
		case <-r.limitsChanged:
		case <-time.After(hostclock.Jitter(r.c.cfg.PollInterval)):
		case <-r.bgCtx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(r.bgCtx, 10*time.Second)
		err := r.refreshLimits(ctx)
		cancel()
		if err != nil && r.bgCtx.Err() == nil {
			r.c.failures.warn("limits", err)
			continue
		}
		r.c.failures.ok("limits")
	}
}

// applyConfigLimits sets Config.Limits (Start calls it before claiming anything).
func (c *Client) applyConfigLimits(ctx context.Context) error {
	for _, l := range c.cfg.Limits {
		if err := c.LimitSet(ctx, l); err != nil {
			return fmt.Errorf("skiplock: writing Config.Limits: %w", err)
		}
	}
	return nil
}

// claimLimited is the producer's claim for a queue under limits. It reports the
// jobs held back by a limit (throttled) and, when a rate window is full, how long
// until it frees a start.
func (r *runtime) claimLimited(ctx context.Context, p *producer, n int, successors bool) ([]*store.Job, claimResult, error) {
	c := r.c
	var preds []store.Lease
	if p.handoff.Load() {
		preds = r.predecessors(p)
	}
	// Limited claims resume from the producer's cursor too (cursor.go), so a held
	// snapshot does not make each of them walk every job claimed since it was taken.
	after, gen := p.cursor.get()
	params := store.ClaimParams{Queue: p.queue, WorkerID: c.cfg.ID, Limit: n, Lease: c.cfg.LeaseDuration, Preds: preds,
		After: after, Lag: c.cfg.PollInterval}
	if successors && p.handoff.Load() {
		still := claimResult{short: true, throttled: true, successors: true}
		if len(preds) == 0 {
			return nil, still, nil
		}
		// Successors come from the jobs the cursor has not passed; taking them moves
		// nothing it must stay behind, so the cursor stays.
		jobs, err := c.store.ClaimSuccessors(ctx, c.pool, store.NowParam(c.cfg.Clock), params)
		return jobs, still, err
	}
	res, err := c.store.ClaimLimited(ctx, c.pool, store.NowParam(c.cfg.Clock), params)
	if err != nil {
		return nil, claimResult{}, err
	}
	// The next claim resumes at the first job left waiting (one a limit held back
	// must not fall behind the cursor), or after the last job taken when none waits.
	switch {
	case res.Next != nil:
		p.cursor.advance(gen, res.Next)
	case len(res.Jobs) > 0:
		p.cursor.advance(gen, store.CursorOf(res.Jobs[len(res.Jobs)-1]))
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
		c.metrics.throttled.Add(int64(min(res.Waiting, n-len(res.Jobs))))
		if res.RetryIn != nil {
			out.retryIn = max(*res.RetryIn, time.Millisecond)
		}
	}
	return res.Jobs, out, nil
}

// Handoff of limit slots (internal/store/limits.go, limitedClaimSQL). While a limit
// binds, every slot it frees would otherwise travel through the database: the
// outcome commits, a claim notices, the next job starts — about 7 ms of a 17 ms cycle
// with 10 ms jobs. Instead a throttled producer offers its running jobs as
// predecessors, the claim takes a waiting job of the same buckets as each one's
// successor, and the successor starts on its predecessor's executor the moment the
// predecessor's handler returns.

// predecessors lists the producer's jobs that could hand their slots on: running
// (started, not returned, lease not lost) and without a successor, those started
// first first (they are likely to finish first, so they get the first jobs).
func (r *runtime) predecessors(p *producer) []store.Lease {
	r.mu.Lock()
	fs := make([]*inflight, 0, len(r.inflight))
	for _, f := range r.inflight {
		if f.p == p && f.begun.Load() && !f.returned.Load() && !f.lost.Load() && f.next == nil && !f.closed && !f.refused {
			fs = append(fs, f)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(fs, func(a, b *inflight) int { return a.started.Compare(b.started) })
	out := make([]store.Lease, len(fs))
	for i, f := range fs {
		out[i] = f.job.lease()
	}
	return out
}

// succession is what hold does with a claimed job (successorOf).
type succession int

const (
	startNow succession = iota // no predecessor, or its handler has returned
	attached                   // waits for its predecessor's handler
	giveUp                     // its predecessor already has a successor: back to pending
)

// successorOf attaches f, a job claimed as the successor of another (job.slotOf), to
// that predecessor. A predecessor whose handler has returned, or that this process no
// longer runs under the recorded lease, shares no slot with f any more, so f may
// start at once. Called with r.mu held.
func (r *runtime) successorOf(f *inflight, job *Job) succession {
	if job.slotOf.ID == "" {
		return startNow
	}
	pred := r.inflight[job.slotOf.ID]
	switch {
	case pred == nil || pred.job.LeaseToken != job.slotOf.Token || pred.closed:
		return startNow
	case pred.next != nil || pred.refused || pred.p != f.p: // not offered (predecessors)
		return giveUp
	}
	pred.next = f
	wait := max(4*time.Duration(f.p.avgRunNs.Load()), minSuccessorWait)
	f.giveBack = time.AfterFunc(wait, func() { r.returnSuccessor(pred, f) })
	return attached
}

// minSuccessorWait is the least time a successor waits for its predecessor's handler
// before it goes back to pending; otherwise four times the queue's mean handler time.
// A predecessor that hangs thus delays its successor by a bounded time, after which
// the job competes for any slot again.
const minSuccessorWait = 250 * time.Millisecond

// successor closes f's chain (no successor can be attached any more) and returns the
// successor to run next on f's executor, if any.
func (r *runtime) successor(f *inflight) *inflight {
	r.mu.Lock()
	next := f.next
	f.next, f.closed = nil, true
	r.mu.Unlock()
	if next != nil {
		f.handedOn.Store(true)
		next.giveBack.Stop()
		f.p.active.Add(1) // it now runs: the executor's loop counts it out again
	}
	return next
}

// returnSuccessor gives f back to pending if it still waits for pred.
func (r *runtime) returnSuccessor(pred, f *inflight) {
	r.mu.Lock()
	waiting := pred.next == f && !pred.closed
	if waiting {
		pred.next, pred.refused = nil, true
	}
	r.mu.Unlock()
	if waiting {
		r.c.metrics.handoffsReturned.Add(1)
		r.giveBack(f, false)
	}
}

// returnSuccessors gives every waiting successor back to pending (at Stop: they were
// claimed but not started).
func (r *runtime) returnSuccessors() {
	type pair struct{ pred, f *inflight }
	var waiting []pair
	r.mu.Lock()
	for _, f := range r.inflight {
		if f.next != nil && !f.closed {
			waiting = append(waiting, pair{f, f.next})
		}
	}
	r.mu.Unlock()
	for _, w := range waiting {
		w.f.giveBack.Stop()
		r.returnSuccessor(w.pred, w.f)
	}
}
