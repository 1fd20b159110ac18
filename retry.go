package skiplock

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides how long a job waits before its next attempt. attempt is the
// attempt that just failed (1 for the first run).
type RetryPolicy interface {
	Delay(attempt int) time.Duration
}

// ExponentialBackoff is the default policy:
//
//	delay = min(Base·2^(attempt−1), Max) + jitter, jitter uniform in [0, Jitter·that]
//
// Jitter spreads jobs that failed together so they do not return together.
type ExponentialBackoff struct {
	// Base is the first delay. Default 1s.
	Base time.Duration
	// Max caps the exponential part. Default 1h.
	Max time.Duration
	// Jitter is the fraction of the delay added at random. Default 0.1; negative
	// disables jitter.
	Jitter float64
}

// DefaultRetryPolicy is used for kinds that set none.
var DefaultRetryPolicy RetryPolicy = ExponentialBackoff{}

// Delay implements RetryPolicy.
func (p ExponentialBackoff) Delay(attempt int) time.Duration {
	base, maxD, jitter := p.Base, p.Max, p.Jitter
	if base <= 0 {
		base = time.Second
	}
	if maxD <= 0 {
		maxD = time.Hour
	}
	if jitter == 0 {
		jitter = 0.1
	}
	if attempt < 1 {
		attempt = 1
	}
	d := maxD
	if exp := float64(base) * math.Pow(2, float64(attempt-1)); exp < float64(maxD) {
		d = time.Duration(exp)
	}
	if jitter > 0 {
		d += time.Duration(rand.Float64() * jitter * float64(d))
	}
	return d
}

// retryDelay is the delay before a job of kind runs again after attempts, by its
// kind's retry policy, clamped to 0..MaxSchedule. A policy that panics is logged and
// the default policy's delay is used: a bug in a policy never loses an outcome.
func (c *Client) retryDelay(kind string, attempts int) (d time.Duration) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("skiplock: the retry policy panicked; using the default policy", "kind", kind, "panic", p)
			d = clampDelay(DefaultRetryPolicy.Delay(attempts))
		}
	}()
	return clampDelay(c.retryPolicy(kind).Delay(attempts))
}
