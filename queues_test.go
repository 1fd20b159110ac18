package skiplock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// A paused queue is paused for every client: three running clients stop claiming
// its jobs (while they keep working another queue), enqueueing still works, and a
// resume wakes them all at once.
func TestQueuePauseAcrossClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	var ran [3]atomic.Int64
	var clients []*skiplock.Client
	for i := range 3 {
		ws := skiplock.NewWorkers()
		e.must(ws.AddHandler("k", func(context.Context, *skiplock.Job) error { ran[i].Add(1); return nil }, nil))
		c := e.newClient(skiplock.Config{Workers: ws, Clock: realClock{},
			// A long poll: only NOTIFY can explain a fast pickup after the resume.
			PollInterval: time.Minute,
			Queues:       map[string]skiplock.QueueConfig{"mail": {MaxWorkers: 4}, "other": {MaxWorkers: 1}}})
		startClient(t, c)
		clients = append(clients, c)
	}
	e.must(e.client.QueuePause(e.ctx, "mail"))
	const n = 60
	for range n {
		_, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"})
		e.must(err) // enqueue works while paused
	}
	// A sentinel in an active queue, enqueued after the paused jobs: once every
	// client has run one, each has woken and claimed since the paused jobs arrived.
	for range 3 {
		_, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "other"})
		e.must(err)
	}
	waitFor(t, 30*time.Second, "the sentinels to run", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE queue = 'other' AND status = 'succeeded'") == 3
	})
	if got := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE queue = 'mail' AND status <> 'pending'"); got != 0 {
		t.Fatalf("%d jobs of the paused queue were claimed", got)
	}
	s, err := e.client.Stats(e.ctx, nil)
	e.must(err)
	if q := s.Queue("mail"); !q.Paused || q.Pending != n {
		t.Errorf("stats of the paused queue: %+v", q)
	}
	qs, err := e.client.QueueList(e.ctx)
	e.must(err)
	if len(qs) != 1 || qs[0].Name != "mail" || !qs[0].Paused || qs[0].PausedAt.IsZero() {
		t.Errorf("QueueList: %+v", qs)
	}

	began := time.Now()
	e.must(e.client.QueueResume(e.ctx, "mail"))
	waitFor(t, 30*time.Second, "the resumed queue to drain", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE queue = 'mail' AND status = 'succeeded'") == n
	})
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("the resumed queue took %s to drain: the resume did not wake the clients (poll is 1m)", took)
	}
	qs, err = e.client.QueueList(e.ctx)
	e.must(err)
	if len(qs) != 1 || qs[0].Paused {
		t.Errorf("QueueList after resume: %+v", qs)
	}
	_ = clients
}

// Pausing a queue no client serves yet works, and bad names are refused.
func TestQueuePauseBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	e.must(e.client.QueuePause(e.ctx, "nobody_serves_this"))
	e.must(e.client.QueuePause(e.ctx, "nobody_serves_this")) // idempotent
	for _, bad := range []string{"", "bad name", "x;drop"} {
		if err := e.client.QueuePause(e.ctx, bad); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("QueuePause(%q): %v", bad, err)
		}
		if err := e.client.QueueResume(e.ctx, bad); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("QueueResume(%q): %v", bad, err)
		}
	}
	if err := e.client.QueuePause(nilCtx, "q"); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("QueuePause(nil ctx): %v", err)
	}
}
