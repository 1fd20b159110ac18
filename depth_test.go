package skiplock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// TestDepthCountsDueJobsByTheClientsClock: Depth counts a queue's (or every queue's)
// pending jobs whose run_at has come by the injected clock; scheduled jobs count once
// the clock reaches them.
func TestDepthCountsDueJobsByTheClientsClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	enqueue := func(n int, queue string, runAt time.Time) {
		for range n {
			_, err := e.client.Enqueue(e.ctx, emailArgs{To: "a"}, &skiplock.EnqueueOpts{Queue: queue, RunAt: runAt})
			e.must(err)
		}
	}
	enqueue(3, "mail", time.Time{})
	enqueue(2, "mail", t0.Add(time.Hour))
	enqueue(1, "bills", time.Time{})
	depth := func(queue string, want int64) {
		t.Helper()
		if got, err := e.client.Depth(e.ctx, queue); err != nil || got != want {
			t.Errorf("Depth(%q) = %d, %v; want %d", queue, got, err, want)
		}
	}
	depth("mail", 3)
	depth("bills", 1)
	depth("", 4)
	depth("nosuch", 0)
	e.clock.Advance(2 * time.Hour)
	depth("mail", 5)
	depth("", 6)
}

// TestDepthRefusesBadInput: a nil context and an invalid queue name are validation
// errors, not panics or database errors.
func TestDepthRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	for name, call := range map[string]func() (int64, error){
		"nil ctx":          func() (int64, error) { return e.client.Depth(nilCtx, "mail") },
		"queue with space": func() (int64, error) { return e.client.Depth(e.ctx, "my queue") },
		"queue too long":   func() (int64, error) { return e.client.Depth(e.ctx, string(make([]byte, 300))) },
	} {
		n, err := call()
		var ve *skiplock.ValidationError
		if !errors.Is(err, skiplock.ErrInvalid) || !errors.As(err, &ve) || n != 0 {
			t.Errorf("%s: %d, %v; want a *ValidationError", name, n, err)
		}
	}
}
