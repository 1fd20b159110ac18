package skiplock

import (
	"time"

	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/store"
)

// The maintenance services live in internal/maint, one file each, and run under
// maint.Runner: one client at a time per service, by advisory lock. This file builds
// them from the client's Config. A new service is a file in internal/maint and one
// line in services.

// services lists the maintenance services a started client runs.
func (c *Client) services() []maint.Service {
	var out []maint.Service
	if c.cfg.ReclaimInterval > 0 {
		out = append(out, c.reclaimer())
	}
	if c.cfg.Retention.Interval > 0 {
		out = append(out, c.retention())
	}
	out = append(out, c.schedulerServices()...)
	if !c.citus { // the layout refuses limits (citusRefusals): no rate windows to sweep
		out = append(out, &maint.LimitSweeper{Store: c.store, Every: limitSweepInterval, Clock: c.cfg.Clock})
		// Nor fair settings: no queue made fair to settle.
		out = append(out, &maint.LaneSettler{Store: c.store, Every: laneSettleInterval})
	}
	if w := c.cfg.HorizonWarning; w > 0 {
		out = append(out, &maint.HorizonWatch{Store: c.store, Log: c.log, Every: min(w, horizonWatchInterval), After: w,
			Clock: c.cfg.Clock})
	}
	return out
}

// horizonWatchInterval paces the horizon watch: a held horizon matters over minutes.
const horizonWatchInterval = time.Minute

// laneSettleInterval paces the lane settler: a queue made fair whose client stopped
// before its settle (or made fair by SQL) has its racing inserts' jobs claimed within
// about this long.
const laneSettleInterval = time.Minute

// limitSweepInterval paces the rate-window sweeper: windows are small, and an idle
// one costs a row until it is swept.
const limitSweepInterval = time.Minute

func (c *Client) newRunner() *maint.Runner {
	return &maint.Runner{Store: c.store, Pool: c.pool, Log: c.log,
		Failed:    func(op string, err error) { c.failures.warn(op, err) },
		Succeeded: c.failures.ok}
}

func (c *Client) reclaimer() *maint.Reclaimer {
	return &maint.Reclaimer{Store: c.store, Every: c.cfg.ReclaimInterval, Clock: c.cfg.Clock, Delay: c.retryDelay,
		Reclaimed: func(n int) { c.metrics.reclaimed.Add(int64(n)) }}
}

// retention returns the client's retention service (one for the client's life: its
// floors carry from one run to the next, RunRetention's included).
func (c *Client) retention() *maint.Retention {
	c.retentionOnce.Do(func() { c.retentionSvc = c.newRetention() })
	return c.retentionSvc
}

func (c *Client) newRetention() *maint.Retention {
	r := c.cfg.Retention
	return &maint.Retention{Store: c.store, Pool: c.pool, Log: c.log, Clock: c.cfg.Clock,
		Settings: maint.RetentionSettings{Every: r.Interval,
			Windows: map[string]time.Duration{store.StatusSucceeded: r.Succeeded, store.StatusFailed: r.Failed,
				store.StatusCancelled: r.Cancelled},
			BatchSize: r.BatchSize, MaxBatches: r.MaxBatches, OutboxPublished: r.OutboxPublished,
			PartitionLockTimeout: r.PartitionLockTimeout},
		Observe: func(res maint.RetentionResult) {
			c.metrics.retentionDeleted.Add(res.Succeeded + res.Failed + res.Cancelled)
			if res.Incomplete {
				c.metrics.retentionBehind.Add(1)
			}
		}}
}
