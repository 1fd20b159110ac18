package skiplock_test

import (
	"context"
	"errors"
	"strings"
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
	e.must(e.client.QueuePauseAhead(e.ctx, "mail")) // before its first job
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

// One rule for the queue verbs: a queue nothing names is refused with
// ErrQueueNotFound (an ErrNotFound), pause and resume alike, so a misspelt name
// changes nothing; QueuePauseAhead pauses one ahead of its first job, after which its
// setting names it. Resuming an active queue is a no-op. Bad names are refused.
func TestQueuePauseBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	for name, err := range map[string]error{
		"QueuePause":  e.client.QueuePause(e.ctx, "nobody_serves_this"),
		"QueueResume": e.client.QueueResume(e.ctx, "nobody_serves_this"),
		"QueueGet":    func() error { _, err := e.client.QueueGet(e.ctx, "nobody_serves_this"); return err }(),
	} {
		if !errors.Is(err, skiplock.ErrQueueNotFound) || !errors.Is(err, skiplock.ErrNotFound) || !strings.Contains(err.Error(), "misspelt?") {
			t.Errorf("%s of a queue nothing names: %v, want ErrQueueNotFound", name, err)
		}
	}
	if qs, err := e.client.QueueList(e.ctx); err != nil || len(qs) != 0 {
		t.Fatalf("a refused pause wrote a setting: %+v %v", qs, err)
	}
	e.must(e.client.QueuePauseAhead(e.ctx, "nobody_serves_this"))
	e.must(e.client.QueuePause(e.ctx, "nobody_serves_this")) // idempotent, and known by its setting now
	if q, err := e.client.QueueGet(e.ctx, "nobody_serves_this"); err != nil || !q.Paused {
		t.Errorf("QueueGet after a pause ahead: %+v %v", q, err)
	}
	e.must(e.client.QueueResume(e.ctx, "nobody_serves_this"))
	e.must(e.client.QueueResume(e.ctx, "nobody_serves_this")) // resuming an active queue: a no-op
	if _, err := e.client.Enqueue(e.ctx, emailArgs{To: "a"}, &skiplock.EnqueueOpts{Queue: "with_jobs"}); err != nil {
		t.Fatal(err)
	}
	if q, err := e.client.QueueGet(e.ctx, "with_jobs"); err != nil || q.Paused || q.Name != "with_jobs" {
		t.Errorf("QueueGet of an active queue with a job: %+v %v", q, err)
	}
	e.must(e.client.QueuePause(e.ctx, "with_jobs"))
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
