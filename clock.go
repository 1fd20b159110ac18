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
