package skiplock

import (
	"context"
	"fmt"
	"time"
)

// QueueStats are one queue's figures from the database.
type QueueStats struct {
	Queue string
	// Pending counts jobs waiting, Due those of them whose run_at has come.
	Pending, Due int64
	Running      int64
	Succeeded    int64
	Failed       int64
	Cancelled    int64
	// ExpiredLeases counts running jobs whose lease has run out (the reclaimer's work).
	ExpiredLeases int64
	// OldestDueAge is how long the oldest due pending job has waited: the best single
	// health signal of a queue. 0 when nothing is due.
	OldestDueAge time.Duration
}

// ProcessCounters are this client's totals since it was created.
type ProcessCounters struct {
	Enqueued, Succeeded, Failed, Retried, Snoozed, Cancelled, LeaseLost, Reclaimed int64
	EventsDropped                                                                  int64
}

// Stats is a snapshot of the queues and of this process.
type Stats struct {
	Queues  []QueueStats
	Process ProcessCounters
}

// Stats reads per-queue figures from the database and this client's counters.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	rows, err := c.store.Stats(ctx, c.pool, nowParam(c.cfg.Clock))
	if err != nil {
		return nil, fmt.Errorf("reading queue stats: %w", wrapPgError(err))
	}
	s := &Stats{Process: c.Counters()}
	for _, r := range rows {
		s.Queues = append(s.Queues, QueueStats(r))
	}
	return s, nil
}

// Counters returns this client's in-process totals.
func (c *Client) Counters() ProcessCounters {
	m := &c.metrics
	dropped := c.events.dropped.Load()
	return ProcessCounters{
		Enqueued: m.enqueued.Load(), Succeeded: m.succeeded.Load(), Failed: m.failed.Load(),
		Retried: m.retried.Load(), Snoozed: m.snoozed.Load(), Cancelled: m.cancelled.Load(),
		LeaseLost: m.leaseLost.Load(), Reclaimed: m.reclaimed.Load(), EventsDropped: dropped,
	}
}
