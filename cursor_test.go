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
