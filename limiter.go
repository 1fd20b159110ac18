package skiplock

import (
	"context"
	"fmt"
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
func (r *runtime) claimLimited(ctx context.Context, p *producer, n int) ([]*store.Job, claimResult, error) {
	c := r.c
	res, err := c.store.ClaimLimited(ctx, c.pool, store.NowParam(c.cfg.Clock), store.ClaimParams{
		Queue: p.queue, WorkerID: c.cfg.ID, Limit: n, Lease: c.cfg.LeaseDuration,
	})
	if err != nil {
		return nil, claimResult{}, err
	}
	out := claimResult{short: len(res.Jobs) < n}
	if out.short && res.Waiting > 0 {
		out.throttled = true
		c.metrics.throttled.Add(int64(min(res.Waiting, n-len(res.Jobs))))
		if res.RetryIn != nil {
			out.retryIn = max(*res.RetryIn, time.Millisecond)
		}
	}
	return res.Jobs, out, nil
}
