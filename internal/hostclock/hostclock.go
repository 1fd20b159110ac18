// Package hostclock is the one place skiplock reads the host's clock. The host clock
// only paces the process — poll and retry timers, jitter, notify coalescing, rate
// and latency figures, protocol timestamps such as a webhook signature's — and never
// decides a job's or an event's state: statements take their time from the injected
// Clock or the database's now(). A test (TestHostClockRule in the root package)
// fails when any other non-test package of the module calls time.Now or time.Since.
package hostclock

import (
	"context"
	"math/rand/v2"
	"time"
)

// Now is the host's current time (with its monotonic reading).
func Now() time.Time { return time.Now() }

// Since is the time elapsed since t on the host's monotonic clock.
func Since(t time.Time) time.Duration { return time.Since(t) }

// Jitter returns d spread by ±10%, so that many processes started together do not
// poll, retry or run maintenance in lockstep.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d - d/10 + rand.N(d/5+1)
}

// Sleep waits for d or until ctx ends; it reports false when ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
