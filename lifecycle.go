package skiplock

import (
	"context"

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
