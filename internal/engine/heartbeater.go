package engine

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/internal/backoff"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// heartbeat renews the leases of the process's in-flight jobs every
// HeartbeatInterval. A renewal that fails is tried again after a tenth of the
// interval, then after twice as long each time, up to the interval: the leases are at
// stake, and most failures pass within milliseconds (a connection the server closed,
// a statement chosen as a deadlock's victim). Waiting the whole interval, two
// failures in a row would lose every lease of the process under the default lease
// and interval.
func (e *Engine) heartbeat() {
	defer e.bgWG.Done()
	interval := e.cfg.HeartbeatInterval
	fail := backoff.Backoff{Initial: interval / 10, Max: interval, Jitter: hostclock.Jitter}
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-e.bgCtx.Done():
			return
		case <-t.C:
		}
		n, err := e.renewLeases()
		if e.bgCtx.Err() != nil {
			return // stopping: a renewal cut short is no failure
		}
		if err == nil {
			fail.Reset()
			e.cfg.Failures.OK("heartbeat")
			t.Reset(interval)
			continue
		}
		retry := fail.Next()
		e.cfg.Failures.Warn("heartbeat", err, "jobs", n, "retry_in", retry)
		t.Reset(retry)
	}
}

// renewLeases runs one heartbeat for the jobs in flight, if any, and cancels the
// handlers whose lease it found lost. It returns how many leases it tried to renew.
func (e *Engine) renewLeases() (int, error) {
	now := hostclock.Now()
	var live []*flight
	e.mu.Lock()
	for _, f := range e.inflight {
		if !f.renewable() {
			continue
		}
		if f.state() == running && !f.deadline.IsZero() && now.After(f.deadline.Add(e.cfg.HeartbeatInterval)) {
			if f.warned.CompareAndSwap(false, true) {
				e.cfg.Log.Warn("skiplock: handler ignores its context past its timeout; letting its lease expire",
					"job_id", f.row.ID, "kind", f.row.Kind)
			}
			continue
		}
		live = append(live, f)
	}
	e.mu.Unlock()
	if len(live) == 0 {
		return 0, nil
	}
	leases := make([]store.Lease, len(live))
	for i, f := range live {
		leases[i] = f.lease()
	}
	ctx, cancel := context.WithTimeout(e.bgCtx, e.cfg.HeartbeatInterval)
	renewed, err := e.cfg.Store.Heartbeat(ctx, e.cfg.Pool, e.now(), leases, e.cfg.LeaseDuration)
	cancel()
	if err != nil {
		return len(leases), err
	}
	for _, f := range live {
		// A job missing from the result is lost; one present but not renewed was
		// locked by another transaction (store.Heartbeat) and is renewed next time.
		if _, held := renewed[f.row.ID]; !held && f.lose() {
			f.cancel(e.cfg.LeaseLost)
		}
	}
	return len(leases), nil
}
