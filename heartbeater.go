package skiplock

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// heartbeat renews the leases of the process's in-flight jobs every
// HeartbeatInterval. A renewal that fails is tried again after a tenth of the
// interval, then after twice as long each time, up to the interval: the leases are at
// stake, and most failures pass within milliseconds (a connection the server closed,
// a statement chosen as a deadlock's victim). Waiting the whole interval, two
// failures in a row lost every lease of the process under the default lease and
// interval.
func (r *runtime) heartbeat() {
	defer r.bgWG.Done()
	c := r.c
	interval := c.cfg.HeartbeatInterval
	var retry time.Duration // 0 while renewals succeed
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-r.bgCtx.Done():
			return
		case <-t.C:
		}
		n, err := r.renewLeases()
		if r.bgCtx.Err() != nil {
			return // stopping: a renewal cut short is no failure
		}
		if err == nil {
			retry = 0
			c.failures.ok("heartbeat")
			t.Reset(interval)
			continue
		}
		retry = min(max(2*retry, interval/10), interval)
		c.failures.warn("heartbeat", err, "jobs", n, "retry_in", retry)
		t.Reset(hostclock.Jitter(retry))
	}
}

// renewLeases runs one heartbeat for the jobs in flight, if any, and cancels the
// handlers whose lease it found lost. It returns how many leases it tried to renew.
func (r *runtime) renewLeases() (int, error) {
	c := r.c
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
		return 0, nil
	}
	leases := make([]store.Lease, len(live))
	for i, f := range live {
		leases[i] = f.job.lease()
	}
	ctx, cancel := context.WithTimeout(r.bgCtx, c.cfg.HeartbeatInterval)
	renewed, err := c.store.Heartbeat(ctx, c.pool, store.NowParam(c.cfg.Clock), leases, c.cfg.LeaseDuration)
	cancel()
	if err != nil {
		return len(leases), err
	}
	for _, f := range live {
		// A job missing from the result is lost; one present but not renewed was
		// locked by another transaction (store.Heartbeat) and is renewed next time.
		if _, held := renewed[f.job.ID]; !held && !f.returned.Load() {
			f.lost.Store(true)
			if f.begun.Load() {
				f.cancel(ErrLeaseLost)
			}
		}
	}
	return len(leases), nil
}
