// Package backoff paces the retries of a failing repeated operation (a claim, a
// completion write, a heartbeat, a reconnect): each failure waits twice as long as
// the one before, up to a bound, and a success starts over. It is the one place
// that doubling is written; each caller keeps its own bounds and jitter.
package backoff

import "time"

// Backoff is an exponential backoff. Next returns Initial, then twice the previous
// delay, never more than Max, each spread by Jitter; Reset (after a success) starts
// over at Initial. The zero value of the unexported state is the start, so a
// Backoff is ready as soon as its fields are set:
//
//	b := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: hostclock.Jitter}
//
// A Backoff belongs to one goroutine: it is not safe for concurrent use.
type Backoff struct {
	// Initial is the first delay, and the first after a Reset. Must be positive.
	Initial time.Duration
	// Max bounds every delay before Jitter spreads it. Must be at least Initial.
	Max time.Duration
	// Jitter, when set, spreads each delay Next returns (hostclock.Jitter: ±10%), so
	// that processes failing together do not retry in lockstep. Nil: exact delays.
	Jitter func(time.Duration) time.Duration

	next time.Duration // the delay Next returns next, before jitter; 0: Initial
}

// Next returns the delay to wait before the next attempt and doubles the one after.
func (b *Backoff) Next() time.Duration {
	d := b.next
	if d == 0 {
		d = min(b.Initial, b.Max)
	}
	if d > b.Max/2 {
		b.next = b.Max
	} else {
		b.next = 2 * d
	}
	if b.Jitter != nil {
		return b.Jitter(d)
	}
	return d
}

// Reset makes the next delay Initial again: the operation succeeded.
func (b *Backoff) Reset() { b.next = 0 }
