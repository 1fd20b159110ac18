package skiplock

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// This file holds what the runtime and Manual share: writing outcomes, counting
// them, and reclaiming expired leases.

// finish writes outcomes with the statement the configuration asks for.
func (c *Client) finish(ctx context.Context, outs []store.Outcome) (map[string]string, error) {
	if c.cfg.DeleteOnSuccess {
		return c.store.FinishDeleting(ctx, c.pool, store.NowParam(c.cfg.Clock), outs)
	}
	return c.store.Finish(ctx, c.pool, store.NowParam(c.cfg.Clock), outs)
}

func (c *Client) count(a store.Action, status string) {
	switch {
	case status == store.StatusSucceeded:
		c.metrics.succeeded.Add(1)
	case status == store.StatusFailed:
		c.metrics.failed.Add(1)
	case status == store.StatusCancelled:
		c.metrics.cancelled.Add(1)
	case a == store.ActionSnooze:
		c.metrics.snoozed.Add(1)
	default:
		c.metrics.retried.Add(1)
	}
}

// ReclaimResult reports one reclaimer pass.
type ReclaimResult struct {
	Requeued int // back to pending after the retry delay
	Failed   int // attempts exhausted
}

func (c *Client) reclaim(ctx context.Context, db DB) (ReclaimResult, error) {
	const batch = 1000
	var res ReclaimResult
	for {
		now := store.NowParam(c.cfg.Clock)
		expired, err := c.store.ListExpired(ctx, db, now, batch)
		if err != nil {
			return res, fmt.Errorf("listing expired leases: %w", wrapPgError(err))
		}
		if len(expired) == 0 {
			return res, nil
		}
		leases := make([]store.Lease, len(expired))
		delays := make([]time.Duration, len(expired))
		for i, e := range expired {
			leases[i] = e.Lease
			delays[i] = c.retryPolicy(e.Kind).Delay(e.Attempts)
		}
		changed, err := c.store.Reclaim(ctx, db, now, leases, delays)
		if err != nil {
			return res, fmt.Errorf("reclaiming %d expired lease(s): %w", len(leases), wrapPgError(err))
		}
		for _, st := range changed {
			if st == store.StatusFailed {
				res.Failed++
			} else {
				res.Requeued++
			}
		}
		c.metrics.reclaimed.Add(int64(len(changed)))
		if len(expired) < batch {
			return res, nil
		}
	}
}
