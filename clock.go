package skiplock

import "time"

// Clock supplies the time for every time-dependent statement (claim, heartbeat, lease
// expiry, retry scheduling, retention). A nil Clock, the default, means the database's
// now(): in production all workers then agree on time even when their hosts' clocks
// are skewed. Inject a Clock (skiplocktest.FakeClock) to drive lease expiry, retries
// and retention in tests without sleeping.
type Clock interface {
	Now() time.Time
}

// nowParam returns the statement parameter for c: nil selects the database's now().
func nowParam(c Clock) *time.Time {
	if c == nil {
		return nil
	}
	t := c.Now()
	return &t
}

// hostNow is the local monotonic time, used only for process-local pacing (notify
// coalescing, rate figures) and coarse input sanity checks, never for job state.
func hostNow() time.Time { return time.Now() }
