package skiplock

import (
	"context"

	"github.com/skiplock/skiplock/internal/engine"
	"github.com/skiplock/skiplock/internal/store"
)

// This file holds what the runtime and Manual share: writing outcomes, counting
// them, and reclaiming expired leases.

// writeOutcomes writes outcomes through db (the pool, or the caller's transaction for
// CompleteTx) with the statement the configuration asks for.
func (c *Client) writeOutcomes(ctx context.Context, db store.DBTX, outs []store.Outcome) (map[store.Lease]string, error) {
	return engine.Finish(ctx, c.store, db, store.NowParam(c.cfg.Clock), c.cfg.DeleteOnSuccess, outs)
}

// outcomeKind classifies a written outcome — the action taken and the state it left
// the job in — once, for the counters and the events alike.
func outcomeKind(a store.Action, status string) EventKind {
	switch status {
	case store.StatusSucceeded:
		return EventSucceeded
	case store.StatusFailed:
		return EventFailed
	case store.StatusCancelled:
		return EventCancelled
	}
	if a == store.ActionSnooze {
		return EventSnoozed
	}
	return EventRetried
}

// count records a written outcome in the client's counters and returns its kind.
func (c *Client) count(a store.Action, status string) EventKind {
	k := outcomeKind(a, status)
	switch k {
	case EventSucceeded:
		c.metrics.succeeded.Add(1)
	case EventFailed:
		c.metrics.failed.Add(1)
	case EventCancelled:
		c.metrics.cancelled.Add(1)
	case EventSnoozed:
		c.metrics.snoozed.Add(1)
	default:
		c.metrics.retried.Add(1)
	}
	return k
}

// ReclaimResult reports one reclaimer pass.
type ReclaimResult struct {
	Requeued int `json:"requeued"` // back to pending after the retry delay
	Failed   int `json:"failed"`   // attempts exhausted
}
