package skiplocktest

import (
	"sync"
	"time"
)

// FakeClock is a skiplock.Clock that moves only when told. Safe for concurrent use.
type FakeClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewFakeClock returns a clock reading start (UTC, truncated to microseconds, the
// precision PostgreSQL stores).
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{t: start.UTC().Truncate(time.Microsecond)}
}

// Now returns the clock's reading.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d (backward if d is negative: a clock jump).
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t.UTC().Truncate(time.Microsecond)
}
