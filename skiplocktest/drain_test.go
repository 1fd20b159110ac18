package skiplocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/skiplocktest"
)

// drainClient returns a client working queue "default" (and extra queues) whose Email
// handler does what the address says, and whose SMS handler succeeds.
func drainClient(t *testing.T, extra ...string) (*skiplock.Client, *skiplocktest.FakeClock) {
	t.Helper()
	var client *skiplock.Client
	workers := skiplock.NewWorkers()
	err := skiplock.AddWorker(workers, skiplock.WorkFunc[Email](func(ctx context.Context, job *skiplock.Job, a Email) error {
		switch a.To {
		case "fail":
			return skiplock.Permanent(errors.New("no such mailbox"))
		case "retry":
			return errors.New("smtp down")
		case "snooze":
			return skiplock.Snooze(time.Hour)
		case "cancel":
			return skiplock.Cancel(errors.New("unsubscribed"))
		case "sms":
			_, err := client.Enqueue(ctx, SMS{Number: "1"}, nil) // enqueued while draining
			return err
		}
		return nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := skiplock.AddWorker(workers, skiplock.WorkFunc[SMS](func(context.Context, *skiplock.Job, SMS) error { return nil }), nil); err != nil {
		t.Fatal(err)
	}
	queues := map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}}
	for _, q := range extra {
		queues[q] = skiplock.QueueConfig{MaxWorkers: 1}
	}
	client, clock := newClient(t, skiplock.Config{Queues: queues, Workers: workers})
	return client, clock
}

func TestDrainWorksEveryDueJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, clock := drainClient(t)
	db := c.Pool()
	for _, to := range []string{"ok", "fail", "retry", "snooze", "cancel", "sms"} {
		enqueue(t, c, db, Email{To: to}, nil)
	}
	later := enqueue(t, c, db, Email{To: "later"}, &skiplock.EnqueueOpts{Delay: time.Hour})

	res := skiplocktest.Drain(ctx, t, c)
	if res.Succeeded != 3 || res.Failed != 1 || res.Retried != 1 || res.Snoozed != 1 || res.Cancelled != 1 || res.LeaseLost != 0 || len(res.Events) != 7 {
		t.Errorf("Drain = %s (%d events), want 3 succeeded (ok, sms and the SMS it enqueued), 1 each failed, retried, snoozed, cancelled", res, len(res.Events))
	}
	if got := res.String(); got != "3 succeeded, 1 retried, 1 failed, 1 snoozed, 1 cancelled" {
		t.Errorf("String = %q", got)
	}
	for _, e := range res.Events {
		if e.Job.Kind == "email" && (e.Job.State == skiplock.StateFailed) != (e.Kind == skiplock.EventFailed) {
			t.Errorf("event %s for job in state %s", e.Kind, e.Job.State)
		}
	}
	skiplocktest.RequireEnqueued(t, c, db, &skiplocktest.RequireOpts[SMS]{States: []skiplock.JobState{skiplock.StateSucceeded}})
	if got := skiplocktest.RequireEnqueued(t, c, db, &skiplocktest.RequireOpts[Email]{
		Where: func(a Email) bool { return a.To == "later" }}); got.Job.ID != later || got.Job.State != skiplock.StatePending {
		t.Errorf("the job scheduled an hour ahead was worked: %+v", got.Job)
	}

	// Nothing is due: the client starts and stops with nothing to do.
	if res := skiplocktest.Drain(ctx, t, c); len(res.Events) != 0 || res.String() != "no jobs worked" {
		t.Errorf("second Drain = %s", res)
	}

	// Two hours on: the scheduled, retried and snoozed jobs are due again.
	clock.Advance(2 * time.Hour)
	res = skiplocktest.Drain(ctx, t, c)
	if res.String() != "1 succeeded, 1 retried, 1 snoozed" {
		t.Errorf("Drain after the clock moved = %s", res)
	}
	for _, e := range res.Events {
		if e.Job.Attempt != 1 && e.Job.Attempt != 2 {
			t.Errorf("job %s attempt %d", e.Job.ID, e.Job.Attempt)
		}
	}
}

func TestDrainOnlyTheNamedQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := drainClient(t, "mail")
	db := c.Pool()
	enqueue(t, c, db, Email{To: "ok"}, nil)
	enqueue(t, c, db, Email{To: "ok"}, &skiplock.EnqueueOpts{Queue: "mail"})
	enqueue(t, c, db, Email{To: "ok"}, &skiplock.EnqueueOpts{Queue: "unworked"})

	res := skiplocktest.Drain(ctx, t, c, "mail")
	if res.Succeeded != 1 || len(res.Events) != 1 {
		t.Errorf("Drain(mail) = %s", res)
	}
	for _, e := range res.Events {
		if e.Job.Queue != "mail" {
			t.Errorf("Drain(mail) reported a job of queue %s", e.Job.Queue)
		}
	}
	skiplocktest.RequireEnqueued(t, c, db, &skiplocktest.RequireOpts[Email]{Queue: "mail", States: []skiplock.JobState{skiplock.StateSucceeded}})
	skiplocktest.RequireEnqueued(t, c, db, &skiplocktest.RequireOpts[Email]{Queue: "unworked", States: []skiplock.JobState{skiplock.StatePending}})

	// Every queue: the job in a queue the client does not work is never drained.
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	f := capture(t, func(tb testing.TB) { skiplocktest.Drain(dctx, tb, c) })
	f.wantFatal(t, "skiplocktest: Drain: context deadline exceeded with work left in every queue of schema \""+c.Schema()+"\"; due, or running on this client:\n  email ", "queue=unworked", "missing from its Config.Queues")
	// Drain stopped the client on its way out: it can be drained again.
	skiplocktest.Drain(ctx, t, c, skiplock.DefaultQueue)
}

func TestDrainRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := drainClient(t)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f := capture(t, func(tb testing.TB) { skiplocktest.Drain(ctx, tb, c) })
	f.wantFatal(t, "Drain starts and stops the client itself, and it is already started")
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	enqueueOnly, _ := newClient(t, skiplock.Config{})
	f = capture(t, func(tb testing.TB) { skiplocktest.Drain(ctx, tb, enqueueOnly) })
	f.wantFatal(t, "Drain: starting the client: skiplock: invalid config: no Queues to work")
	f = capture(t, func(tb testing.TB) { skiplocktest.Drain(ctx, tb, nil) })
	f.wantFatal(t, "Drain: client is nil")
}
