package skiplock

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

func (r *runtime) heartbeat() {
	defer r.bgWG.Done()
	c := r.c
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-r.bgCtx.Done():
			return
		case <-t.C:
		}
		now := hostclock.Now()
		var live []*inflight
		r.mu.Lock()
		for _, f := range r.inflight {
			if f.returned.Load() || f.lost.Load() {
				continue
			}
			if !f.deadline.IsZero() && now.After(f.deadline.Add(c.cfg.HeartbeatInterval)) {
				if f.warned.CompareAndSwap(false, true) {
					c.log.Warn("skiplock: handler ignores its context past its timeout; letting its lease expire",
						"job_id", f.job.ID, "kind", f.job.Kind)
				}
				continue
			}
			live = append(live, f)
		}
		r.mu.Unlock()
		if len(live) == 0 {
			continue
		}
		leases := make([]store.Lease, len(live))
		for i, f := range live {
			leases[i] = f.job.lease()
		}
		ctx, cancel := context.WithTimeout(r.bgCtx, c.cfg.HeartbeatInterval)
		renewed, err := c.store.Heartbeat(ctx, c.pool, store.NowParam(c.cfg.Clock), leases, c.cfg.LeaseDuration)
		cancel()
		if err != nil {
			c.failures.warn("heartbeat", err, "jobs", len(leases))
			continue
		}
		c.failures.ok("heartbeat")
		for _, f := range live {
			if !renewed[f.job.ID] && !f.returned.Load() {
				f.lost.Store(true)
				if f.begun.Load() {
					f.cancel(ErrLeaseLost)
				}
			}
		}
	}
}
