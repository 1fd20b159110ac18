package engine

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/internal/backoff"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// beganWriteDelay is how long after a waiting job's handler began (a job claimed
// to wait: the prefetch, a successor) the heartbeater writes its start, unless the
// regular tick comes first. A job that ends sooner needs no write: its outcome ends
// the run. So a job reads as claimed until its handler starts and at most about
// this long after, and never as running before.
const beganWriteDelay = time.Second

// heartbeat renews the leases of the process's in-flight jobs every
// HeartbeatInterval. A renewal that fails is tried again after a tenth of the
// interval, then after twice as long each time, up to the interval: the leases are at
// stake, and most failures pass within milliseconds (a connection the server closed,
// a statement chosen as a deadlock's victim). Waiting the whole interval, two
// failures in a row would lose every lease of the process under the default lease
// and interval.
//
// Between ticks it writes the starts of waiting jobs whose handlers began
// (beganWriteDelay), renewing only their leases.
func (e *Engine) heartbeat() {
	defer e.bgWG.Done()
	interval := e.cfg.HeartbeatInterval
	fail := backoff.Backoff{Initial: interval / 10, Max: interval, Jitter: hostclock.Jitter}
	t := time.NewTimer(interval)
	defer t.Stop()
	began := time.NewTimer(time.Hour)
	began.Stop()
	defer began.Stop()
	beganDue := false
	for {
		select {
		case <-e.bgCtx.Done():
			return
		case <-e.began:
			if !beganDue {
				beganDue = true
				began.Reset(min(beganWriteDelay, interval))
			}
			continue
		case <-began.C:
			beganDue = false
			if n, err := e.renewLeases(true); err != nil && e.bgCtx.Err() == nil {
				// The next tick renews every lease and writes these starts too.
				e.cfg.Failures.Warn("heartbeat", err, "jobs", n)
			}
			continue
		case <-t.C:
		}
		n, err := e.renewLeases(false)
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
// handlers whose lease it found lost; it writes the starts of waiting jobs whose
// handlers began (flight.beganUnwritten). onlyBegan renews those jobs' leases only.
// It returns how many leases it tried to renew.
func (e *Engine) renewLeases(onlyBegan bool) (int, error) {
	now := hostclock.Now()
	var live []*flight
	e.mu.Lock()
	for _, f := range e.inflight {
		if !f.renewable() || (onlyBegan && !f.beganUnwritten()) {
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
	began := make([]bool, len(live))
	for i, f := range live {
		leases[i] = f.lease()
		began[i] = f.beganUnwritten()
	}
	ctx, cancel := context.WithTimeout(e.bgCtx, e.cfg.HeartbeatInterval)
	renewed, err := e.cfg.Store.Heartbeat(ctx, e.cfg.Pool, e.now(), leases, e.cfg.LeaseDuration, began)
	cancel()
	if err != nil {
		return len(leases), err
	}
	for i, f := range live {
		// A job missing from the result is lost; one present but not renewed was
		// locked by another transaction (store.Heartbeat) and is renewed next time.
		done, held := renewed[f.row.ID]
		if !held && f.lose() {
			f.cancel(e.cfg.LeaseLost)
		}
		if done && began[i] {
			f.beganWritten.Store(true)
		}
	}
	return len(leases), nil
}
