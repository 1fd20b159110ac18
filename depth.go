package skiplock

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock/internal/store"
)

// DepthCap is the most due jobs Depth counts: a queue with more reports DepthCap. It
// is also the default cap of the SQL function queue_depth.
const DepthCap = store.DefaultDepthCap

// Depth returns how many jobs of queue are due — pending, with run_at at or before
// the client's clock (Config.Clock; the database's now() when nil) — counting at most
// DepthCap of them: min(due, DepthCap). queue "" counts every queue's due jobs
// together. A paused queue's due jobs are counted; scheduled (run_at in the future),
// running, waiting and finished jobs are not.
//
// It is one indexed statement, the SQL function queue_depth that an autoscaler can run
// itself (docs/operations.md, "Deploying"): it reads at most DepthCap entries of the
// claim's index plus two index descents per (queue, priority) pair with pending jobs,
// however large the table, so it is meant to be polled, unlike Stats. A name that is
// not a valid queue name returns a *ValidationError; the role needs EXECUTE on the
// function and SELECT on jobs (the worker and dashboard roles of RolesSQL).
func (c *Client) Depth(ctx context.Context, queue string) (int64, error) {
	if ctx == nil {
		return 0, invalid("ctx", "must not be nil")
	}
	if queue != "" {
		if err := checkQueue(ctx, queue); err != nil {
			return 0, err
		}
	}
	n, err := c.store.QueueDepth(ctx, c.pool, queue, DepthCap, store.NowParam(c.cfg.Clock))
	if err != nil {
		if queue == "" {
			return 0, fmt.Errorf("reading the depth of all queues: %w", wrapPgError(err))
		}
		return 0, fmt.Errorf("reading the depth of queue %q: %w", queue, wrapPgError(err))
	}
	return n, nil
}
