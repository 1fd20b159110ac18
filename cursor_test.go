package skiplock_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// TestClaimCursorHeadCheckFindsJobBehind: once a producer claims from its cursor, a
// job due before the cursor's floor (here a RunAt an hour in the past; in production a
// job of a long enqueue transaction) is not in the range of its claims — NOTIFY and
// poll included — and only the head check brings the producer back to it.
func TestClaimCursorHeadCheckFindsJobBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ran := make(chan string, 10)
	ws := skiplock.NewWorkers()
	ws.AddHandler("email", func(_ context.Context, job *skiplock.Job) error {
		ran <- job.ID
		return nil
	}, nil)
	c := e.newClient(skiplock.Config{Workers: ws, PollInterval: 50 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}}})
	startClient(t, c)
	wait := func(id string) {
		t.Helper()
		select {
		case got := <-ran:
			if got != id {
				t.Fatalf("ran %s, want %s", got, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("job %s did not run", id)
		}
	}
	first, err := c.Enqueue(e.ctx, emailArgs{To: "a@example.com"}, nil)
	e.must(err)
	wait(first.ID) // the producer's cursor is now at this job
	behind, err := c.Enqueue(e.ctx, emailArgs{To: "b@example.com"}, &skiplock.EnqueueOpts{RunAt: t0.Add(-time.Hour)})
	e.must(err)
	wait(behind.ID)
}

// TestLimitedClaimCursorKeepsHeldBackJobs: a limited queue's claims resume from a
// cursor too, and it stays at the first job a limit held back. With one running job
// per key, a1 and b1 start and a2 waits behind a1; a2 must run once a1 ends. A cursor
// that moved past the last job taken (b1), as the plain claim's does, would leave a2
// behind its floor, and with an hour's poll interval no head check would come back
// for it during the test.
func TestLimitedClaimCursorKeepsHeldBackJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: skiplock.DefaultQueue, Key: skiplock.EachKey, MaxRunning: 1}))
	release := make(chan struct{})
	ran := make(chan string, 10)
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(ctx context.Context, j *skiplock.Job) error {
		ran <- string(j.Payload)
		if string(j.Payload) == `"a1"` {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}, nil))
	var ps []skiplock.EnqueueParams
	for i, name := range []string{"a1", "a2", "b1"} {
		ps = append(ps, skiplock.EnqueueParams{Kind: "k", Payload: []byte(`"` + name + `"`), Opts: skiplock.EnqueueOpts{
			ConcurrencyKey: name[:1], RunAt: t0.Add(time.Duration(i-5) * time.Hour)}})
	}
	_, err := e.client.EnqueueMany(e.ctx, ps)
	e.must(err)
	startClient(t, e.newClient(skiplock.Config{Workers: ws, PollInterval: time.Hour,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 4}}}))
	next := func() string {
		t.Helper()
		select {
		case got := <-ran:
			return got
		case <-time.After(10 * time.Second):
			t.Fatal("no job ran")
			return ""
		}
	}
	if got := map[string]bool{next(): true, next(): true}; !got[`"a1"`] || !got[`"b1"`] {
		t.Fatalf("first ran %v, want a1 and b1", got)
	}
	close(release)
	if got := next(); got != `"a2"` {
		t.Fatalf("ran %s, want a2", got)
	}
}
