package engine

import "time"

// failureBackoff paces the retries of a repeating operation that fails: initial
// after the first failure, twice as long after each further one, up to max.
type failureBackoff struct {
	initial, max, cur time.Duration
}

// next returns the wait before the next try.
func (b *failureBackoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.initial
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

// reset starts over after a success.
func (b *failureBackoff) reset() { b.cur = 0 }
