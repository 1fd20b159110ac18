package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-time.After(5 * time.Millisecond) // the condition's polling interval
	}
}

// startClient starts c and stops it at cleanup.
func startClient(t *testing.T, c *skiplock.Client) {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}

// nextEvent returns the next event or fails after timeout.
func nextEvent(t *testing.T, ch <-chan *skiplock.Event, timeout time.Duration) *skiplock.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(timeout):
		t.Fatalf("no event within %s", timeout)
		return nil
	}
}

type flakyArgs struct {
	Mode string `json:"mode"`
}

func (flakyArgs) Kind() string { return "flaky" }

func TestClientOutcomes(t *testing.T) {
	t.Parallel()
	workers := skiplock.NewWorkers()
	var mwCalls atomic.Int64
	err := skiplock.AddWorker(workers, skiplock.WorkFunc[flakyArgs](func(ctx context.Context, job *skiplock.Job, a flakyArgs) error {
		switch a.Mode {
		case "ok":
			if skiplock.IdempotencyKey(ctx) != job.IdempotencyKey() || skiplock.JobFromContext(ctx) != job {
				return errors.New("context does not carry the job")
			}
			return nil
		case "error":
			return errors.New("transient trouble")
		case "permanent":
			return skiplock.Permanent(errors.New("bad input"))
		case "snooze":
			return skiplock.Snooze(time.Hour)
		case "cancel":
			return skiplock.Cancel(errors.New("no longer wanted"))
		case "panic":
			panic("boom")
		case "timeout":
			<-ctx.Done()
			return ctx.Err()
		}
		return fmt.Errorf("unknown mode %q", a.Mode)
	}), &skiplock.WorkerOpts{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, skiplock.Config{})
	c := e.newClient(skiplock.Config{
		Queues:       map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 4}},
		Workers:      workers,
		PollInterval: 20 * time.Millisecond,
		Middleware: []skiplock.Middleware{func(next skiplock.HandlerFunc) skiplock.HandlerFunc {
			return func(ctx context.Context, job *skiplock.Job) error { mwCalls.Add(1); return next(ctx, job) }
		}},
	})
	events, unsubscribe := c.Subscribe()
	defer unsubscribe()
	startClient(t, c)

	want := map[string]struct {
		kind  skiplock.EventKind
		state skiplock.JobState
		err   string
	}{
		"ok":        {skiplock.EventSucceeded, skiplock.StateSucceeded, ""},
		"error":     {skiplock.EventRetried, skiplock.StatePending, "transient trouble"},
		"permanent": {skiplock.EventFailed, skiplock.StateFailed, "bad input"},
		"snooze":    {skiplock.EventSnoozed, skiplock.StatePending, ""},
		"cancel":    {skiplock.EventCancelled, skiplock.StateCancelled, "no longer wanted"},
		"panic":     {skiplock.EventRetried, skiplock.StatePending, "panic: boom"},
		"timeout":   {skiplock.EventRetried, skiplock.StatePending, "timed out"},
	}
	ids := map[string]string{}
	for mode := range want {
		r, err := c.Enqueue(e.ctx, flakyArgs{Mode: mode}, nil)
		e.must(err)
		ids[r.ID] = mode
	}
	r, err := c.EnqueueRawTx(e.ctx, e.pool, "nobody_handles_this", []byte(`{}`), nil)
	e.must(err)
	ids[r.ID] = "unknown"
	want["unknown"] = struct {
		kind  skiplock.EventKind
		state skiplock.JobState
		err   string
	}{skiplock.EventFailed, skiplock.StateFailed, `no worker registered for kind "nobody_handles_this"`}

	for range ids {
		ev := nextEvent(t, events, 10*time.Second)
		mode := ids[ev.Job.ID]
		w := want[mode]
		if ev.Kind != w.kind || ev.Job.State != w.state {
			t.Errorf("%s: event %s state %s, want %s %s", mode, ev.Kind, ev.Job.State, w.kind, w.state)
		}
		got, err := c.JobGet(e.ctx, ev.Job.ID)
		e.must(err)
		if got.State != w.state || !strings.Contains(got.LastError, w.err) {
			t.Errorf("%s: row state %s last_error %q, want %s containing %q", mode, got.State, got.LastError, w.state, w.err)
		}
		if mode == "snooze" && got.Attempt != 0 {
			t.Errorf("snooze spent an attempt: %d", got.Attempt)
		}
		if mode == "panic" && !strings.Contains(got.LastError, "goroutine") {
			t.Errorf("panic error has no stack: %q", got.LastError)
		}
	}
	if n := mwCalls.Load(); n != 7 {
		t.Errorf("middleware ran %d times, want 7 (once per known-kind job)", n)
	}
}
