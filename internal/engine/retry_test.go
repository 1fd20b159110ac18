package engine

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/skiplock/skiplock/internal/backoff"
)

// A failing claim's backoff grows to the poll interval, not to 5 s: a worker resumes
// within about one poll interval of the database taking writes again. The bound
// stays within [initial, 5 s] for any poll interval.
func TestFailBackoffIsBoundByPollInterval(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		poll, want time.Duration
	}{
		{time.Second, time.Second},                       // the default PollInterval
		{200 * time.Millisecond, 200 * time.Millisecond}, // the chaos rounds'
		{time.Millisecond, 100 * time.Millisecond},       // below the first delay: the first delay
		{time.Minute, 5 * time.Second},                   // a long poll: the old 5 s bound
	} {
		e := &Engine{cfg: Config{PollInterval: c.poll}}
		b := e.failBackoff(100 * time.Millisecond)
		b.Jitter = nil
		var got []time.Duration
		for range 10 {
			got = append(got, b.Next())
		}
		if last := got[len(got)-1]; last != c.want {
			t.Errorf("poll %s: delays %v end at %s, want %s", c.poll, got, last, c.want)
		}
		for _, d := range got {
			if d > c.want {
				t.Errorf("poll %s: delay %s beyond the bound %s (%v)", c.poll, d, c.want, got)
			}
		}
	}
}

// waitRetry waits the backoff's delay on the (fake) clock, ends at once when the
// listener reconnects — restarting the backoff — and stops with the engine.
func TestWaitRetry(t *testing.T) {
	t.Parallel()
	grown := func() *backoff.Backoff {
		b := &backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
		for range 8 {
			b.Next()
		}
		return b
	}
	t.Run("waits its delay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := grown()
			began := time.Now()
			if !waitRetry(t.Context(), 5*time.Second, make(chan struct{}, 1), b) {
				t.Fatal("waitRetry reported a stop")
			}
			if waited := time.Since(began); waited != 5*time.Second {
				t.Errorf("waited %s, want 5s", waited)
			}
			if d := b.Next(); d != 5*time.Second {
				t.Errorf("the backoff restarted (next %s) without a reconnect", d)
			}
		})
	})
	t.Run("a reconnect ends it at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := grown()
			reconnected := make(chan struct{}, 1)
			began := time.Now()
			done := make(chan bool, 1)
			go func() { done <- waitRetry(t.Context(), 5*time.Second, reconnected, b) }()
			synctest.Wait()
			select {
			case <-done:
				t.Fatal("waitRetry returned before its delay or a reconnect")
			default:
			}
			reconnected <- struct{}{}
			if !<-done {
				t.Fatal("waitRetry reported a stop")
			}
			if waited := time.Since(began); waited != 0 {
				t.Errorf("waited %s after the reconnect, want 0", waited)
			}
			if d := b.Next(); d != 100*time.Millisecond {
				t.Errorf("next delay after a reconnect %s, want the initial 100ms", d)
			}
		})
	})
	t.Run("a stop ends it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan bool, 1)
			go func() { done <- waitRetry(ctx, 5*time.Second, make(chan struct{}, 1), grown()) }()
			synctest.Wait()
			cancel()
			if <-done {
				t.Error("waitRetry reported a retry after its context ended")
			}
		})
	})
}
