package skiplock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
)

// A job's record: tags and search filter JobList; the handler's output is stored with
// its success; every finished attempt is in its history; and its transaction id lists
// everything the enqueuing transaction wrote, jobs and outbox events alike.
func TestJobRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ob := e.outbox()
	var txJobs []string
	var eventID string
	e.must(pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		for _, to := range []string{"ana@example.com", "bob@example.com"} {
			r, err := e.client.EnqueueTx(e.ctx, tx, emailArgs{To: to}, &skiplock.EnqueueOpts{Tags: []string{"tenant:acme", "signup"}})
			if err != nil {
				return err
			}
			txJobs = append(txJobs, r.ID)
		}
		var err error
		eventID, err = ob.Write(e.ctx, tx, outbox.Event{AggregateType: "user", AggregateID: "1", EventType: "user.created", Payload: []byte(`{}`)})
		return err
	}))
	other, err := e.client.Enqueue(e.ctx, emailArgs{To: "carol@example.com"}, &skiplock.EnqueueOpts{Tags: []string{"tenant:globex"}})
	e.must(err)

	list := func(p skiplock.ListParams) []string {
		t.Helper()
		jobs, err := e.client.JobList(e.ctx, p)
		e.must(err)
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		return ids
	}
	if got := list(skiplock.ListParams{Tag: "tenant:acme"}); len(got) != 2 || got[0] != txJobs[0] {
		t.Errorf("by tag: %v", got)
	}
	if got := list(skiplock.ListParams{Search: "CAROL@"}); len(got) != 1 || got[0] != other.ID {
		t.Errorf("by text in the payload: %v", got)
	}
	meta, err := e.client.Enqueue(e.ctx, emailArgs{}, &skiplock.EnqueueOpts{Metadata: map[string]string{"tenant": "acme", "req": "r-9"}})
	e.must(err)
	if got := list(skiplock.ListParams{Metadata: map[string]string{"tenant": "acme"}}); len(got) != 1 || got[0] != meta.ID {
		t.Errorf("by metadata: %v", got)
	}

	// Lineage: one transaction's jobs and events.
	j0, err := e.client.JobGet(e.ctx, txJobs[0])
	e.must(err)
	if j0.TxID == 0 || len(j0.Tags) != 2 {
		t.Fatalf("job record: %+v", j0)
	}
	byTx, err := e.client.JobsByTx(e.ctx, j0.TxID)
	e.must(err)
	events, err := ob.Admin().EventsByTx(e.ctx, e.pool, j0.TxID)
	e.must(err)
	if len(byTx) != 2 || byTx[1].ID != txJobs[1] || len(events) != 1 || events[0].ID != eventID || events[0].TxID != j0.TxID {
		t.Errorf("lineage of tx %d: %d jobs, %d events", j0.TxID, len(byTx), len(events))
	}

	// History and output: a failure, then a success with an output.
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 1)
	e.must(err)
	_, err = e.client.Manual().Retry(e.ctx, jobs[0], errors.New("smtp 421"), 0)
	e.must(err)
	e.clock.Advance(time.Second)
	jobs, err = e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 1)
	e.must(err)
	e.must(jobs[0].SetOutput(map[string]string{"message_id": "m-1"}))
	e.must(e.client.Manual().Complete(e.ctx, jobs[0]))
	done, err := e.client.JobGet(e.ctx, jobs[0].ID)
	e.must(err)
	if string(done.Output) != `{"message_id": "m-1"}` {
		t.Errorf("output %s", done.Output)
	}
	if len(done.History) != 2 || done.History[0].Outcome != "retried" || done.History[0].Error != "smtp 421" ||
		done.History[1].Outcome != "succeeded" || done.History[1].Attempt != 2 || done.History[1].StartedAt.IsZero() ||
		done.History[1].WorkerID != e.client.ID() {
		t.Errorf("history %+v", done.History)
	}

	// Run now, and refusals.
	later, err := e.client.Enqueue(e.ctx, emailArgs{}, &skiplock.EnqueueOpts{Delay: time.Hour})
	e.must(err)
	ran, err := e.client.JobRunNow(e.ctx, later.ID)
	e.must(err)
	if !ran.RunAt.Equal(e.clock.Now()) {
		t.Errorf("run now: due at %s, want %s", ran.RunAt, e.clock.Now())
	}
	if _, err := e.client.JobRunNow(e.ctx, done.ID); !errors.Is(err, skiplock.ErrJobState) {
		t.Errorf("run now of a succeeded job: %v", err)
	}
	for name, tags := range map[string][]string{"empty": {""}, "control": {"a\nb"}, "too many": make([]string, 17)} {
		if _, err := e.client.Enqueue(e.ctx, emailArgs{}, &skiplock.EnqueueOpts{Tags: tags}); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("tags %s: %v", name, err)
		}
	}
	if err := jobs[0].SetOutput(make(chan int)); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("SetOutput of a channel: %v", err)
	}
}

// A started client stores what its handlers record, and a reclaimed attempt is in the
// history as lease_expired.
func TestJobRecordFromTheRuntime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ws := skiplock.NewWorkers()
	e.must(skiplock.AddWorker(ws, skiplock.WorkFunc[emailArgs](func(ctx context.Context, job *skiplock.Job, a emailArgs) error {
		return job.SetOutput(map[string]any{"sent_to": a.To, "attempt": job.Attempt})
	}), nil))
	c := e.newClient(skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 2}}})
	r, err := c.Enqueue(e.ctx, emailArgs{To: "dan@example.com"}, nil)
	e.must(err)
	// A first attempt whose worker vanished: claimed, its lease left to expire.
	claimOne(e, e.client)
	e.clock.Advance(time.Minute)
	_, err = e.client.Manual().Reclaim(e.ctx)
	e.must(err)
	e.clock.Advance(time.Hour)
	startClient(t, c)
	waitFor(t, 30*time.Second, "the job to succeed", func() bool {
		j, err := c.JobGet(e.ctx, r.ID)
		e.must(err)
		return j.State == skiplock.StateSucceeded
	})
	j, err := c.JobGet(e.ctx, r.ID)
	e.must(err)
	if string(j.Output) != `{"attempt": 2, "sent_to": "dan@example.com"}` {
		t.Errorf("output %s", j.Output)
	}
	if len(j.History) != 2 || j.History[0].Outcome != "lease_expired" || j.History[1].Outcome != "succeeded" {
		t.Errorf("history %+v", j.History)
	}
}

// Throughput counts finished jobs per queue and bucket from the database.
func TestThroughput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	finish := func(queue string, fail bool) {
		t.Helper()
		_, err := e.client.Enqueue(e.ctx, emailArgs{}, &skiplock.EnqueueOpts{Queue: queue, MaxAttempts: 1})
		e.must(err)
		jobs, err := e.client.Manual().Claim(e.ctx, queue, 1)
		e.must(err)
		if fail {
			e.must(e.client.Manual().Fail(e.ctx, jobs[0], errors.New("x")))
		} else {
			e.must(e.client.Manual().Complete(e.ctx, jobs[0]))
		}
	}
	e.clock.Set(t0.Truncate(time.Minute))
	finish("mail", false)
	finish("mail", true)
	e.clock.Advance(time.Minute)
	finish("mail", false)
	finish("sms", false)
	pts, err := e.client.Throughput(e.ctx, time.Hour, time.Minute)
	e.must(err)
	if len(pts) != 3 || pts[0].Queue != "mail" || pts[0].Succeeded != 1 || pts[0].Failed != 1 ||
		pts[1].Succeeded != 1 || !pts[1].Start.Equal(pts[0].Start.Add(time.Minute)) || pts[2].Queue != "sms" {
		t.Errorf("throughput %+v", pts)
	}
	if _, err := e.client.Throughput(e.ctx, time.Minute, time.Millisecond); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("a sub-second bucket: %v", err)
	}
}
