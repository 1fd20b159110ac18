package skiplock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// lostClaim claims a job, undoes that claim (undoClaim), and claims the job again: the same attempt, a new token. It returns the job under the
// dead claim and under the live one.
func lostClaim(e *env) (dead, live *skiplock.Job) {
	e.t.Helper()
	enqueueKind(e, e.client, "k", 1)
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 1)
	e.must(err)
	if len(jobs) != 1 {
		e.t.Fatalf("claimed %d jobs", len(jobs))
	}
	dead = jobs[0]
	undoClaim(e, dead.ID)
	e.clock.Advance(40 * time.Millisecond) // the second claim happens later
	jobs, err = e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 1)
	e.must(err)
	if len(jobs) != 1 || jobs[0].ID != dead.ID || jobs[0].Attempt != dead.Attempt || jobs[0].LeaseToken == dead.LeaseToken {
		e.t.Fatalf("second claim: %+v, want job %s again at attempt %d under a new token", jobs, dead.ID, dead.Attempt)
	}
	return dead, jobs[0]
}

// undoClaim puts a running job back as its claim found it, as a server crash does to
// a claim whose asynchronous commit had not reached the WAL on disk.
func undoClaim(e *env, id string) {
	e.t.Helper()
	_, err := e.pool.Exec(e.ctx, `UPDATE `+e.q("jobs")+` SET status = 'pending', lease_token = NULL, lease_until = NULL,
  worker_id = NULL, attempted_at = NULL, attempts = attempts - 1 WHERE id = $1`, id)
	e.must(err)
}

// A claim lost in a server crash leaves its worker holding a dead token while the job
// is claimed again, possibly by the same process. When both outcomes reach one
// completion batch, only the live claim's is written and reported; the dead claim's
// is reported as a lost lease. (Found by the chaos suite: results keyed by job id made
// the live claim's success answer for the dead one too — a success reported under a
// token that never held the job.)
func TestCompletionBatchWithALostClaimOfTheSameJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	dead, live := lostClaim(e)
	states := e.client.FlushForTest([]*skiplock.Job{dead, live}, []bool{false, true}, false)
	if states[0] != skiplock.StateRunning {
		t.Errorf("dead claim's retry reported as %s, want a lost lease", states[0])
	}
	if states[1] != skiplock.StateSucceeded {
		t.Errorf("live claim's completion reported as %s, want succeeded", states[1])
	}
	if got := scalar[string](e, "SELECT status::text FROM "+e.q("jobs")+" WHERE id = $1", live.ID); got != "succeeded" {
		t.Errorf("job is %s, want succeeded", got)
	}
}

// After an ambiguous completion failure the completer reads back rows its retry did
// not change, and takes a row for its own outcome when it is what that outcome
// writes. A row finished under a later claim of the same attempt (the first claim
// lost in a crash) matches state, attempt and error; the claim time tells them apart.
func TestAmbiguousCompletionDoesNotClaimAnotherClaimsSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	dead, live := lostClaim(e)
	if got := e.client.FlushForTest([]*skiplock.Job{live}, []bool{true}, false); got[0] != skiplock.StateSucceeded {
		t.Fatalf("live claim's completion reported as %s", got[0])
	}
	if got := e.client.FlushForTest([]*skiplock.Job{dead}, []bool{true}, true); got[0] != skiplock.StateRunning {
		t.Errorf("dead claim's retried completion reported as %s, want a lost lease", got[0])
	}
}

// A process that claims a job it still holds (its first claim was lost in a server
// crash, so the job was pending again) treats the first claim as a lost lease: that
// run's context is cancelled with ErrLeaseLost and its outcome is reported as lost,
// while the second run's success is written and reported under its own token.
// Without this, nothing ever renewed or cancelled the first run: the process's
// table of held jobs had lost track of it.
func TestASecondClaimOfAHeldJobCancelsTheFirstRun(t *testing.T) {
	t.Parallel()
	started := make(chan *skiplock.Job, 2)
	firstCause := make(chan error, 1)
	var runs atomic.Int32
	workers := skiplock.NewWorkers()
	e := newEnv(t, skiplock.Config{})
	e.must(workers.AddHandler("k", func(ctx context.Context, job *skiplock.Job) error {
		started <- job
		if runs.Add(1) == 1 {
			<-ctx.Done()
			firstCause <- context.Cause(ctx)
			return ctx.Err()
		}
		return nil
	}, nil))
	c := e.newClient(skiplock.Config{
		Queues:       map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}},
		Workers:      workers,
		PollInterval: 20 * time.Millisecond,
	})
	events, unsubscribe := c.Subscribe()
	defer unsubscribe()
	enqueueKind(e, c, "k", 1)
	startClient(t, c)
	first := receive(t, started, "the first run")
	undoClaim(e, first.ID)
	second := receive(t, started, "the second claim's run")
	if second.ID != first.ID || second.LeaseToken == first.LeaseToken {
		t.Fatalf("second run: job %s token %s; first: job %s token %s", second.ID, second.LeaseToken, first.ID, first.LeaseToken)
	}
	if cause := receive(t, firstCause, "the first run's cancellation"); !errors.Is(cause, skiplock.ErrLeaseLost) {
		t.Errorf("first run cancelled with %v, want ErrLeaseLost", cause)
	}
	got := map[string]skiplock.EventKind{}
	for len(got) < 2 {
		ev := receive(t, events, "the outcome events")
		if ev.Job.ID == first.ID {
			got[ev.Job.LeaseToken] = ev.Kind
		}
	}
	if got[first.LeaseToken] != skiplock.EventLeaseLost || got[second.LeaseToken] != skiplock.EventSucceeded {
		t.Errorf("events by token: first %s, second %s; want lease_lost, succeeded", got[first.LeaseToken], got[second.LeaseToken])
	}
}

// receive waits for one value of ch, failing the test after 30 s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
