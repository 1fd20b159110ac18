package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
)

func enqueueN(e *env, n int, opts *skiplock.EnqueueOpts) []string {
	e.t.Helper()
	params := make([]skiplock.EnqueueParams, n)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: otherArgs{N: i}}
		if opts != nil {
			params[i].Opts = *opts
		}
	}
	var ids []string
	for start := 0; start < n; start += 1000 {
		end := min(start+1000, n)
		res, err := e.client.EnqueueManyTx(e.ctx, e.pool, params[start:end])
		e.must(err)
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

func claimOne(e *env, c *skiplock.Client) *skiplock.Job {
	e.t.Helper()
	jobs, err := c.Manual().Claim(e.ctx, skiplock.DefaultQueue, 1)
	e.must(err)
	if len(jobs) != 1 {
		e.t.Fatalf("claimed %d jobs, want 1", len(jobs))
	}
	return jobs[0]
}

// The seed's section 10 scenario, step by step, driven by the fake clock.
func TestLeaseLossScenario(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{ID: "worker-a", LeaseDuration: 30 * time.Second})
	b := e.newClient(skiplock.Config{ID: "worker-b", LeaseDuration: 30 * time.Second})
	_, err := e.client.Enqueue(e.ctx, emailArgs{To: "a@example.com"}, nil)
	e.must(err)

	// 1. worker A claims the job and receives token T1
	jobA := claimOne(e, e.client)
	if jobA.LeaseToken == "" || jobA.WorkerID != "worker-a" || jobA.Attempt != 1 {
		t.Fatalf("claim A: %+v", jobA)
	}
	// 2. the clock moves past the lease
	e.clock.Advance(31 * time.Second)
	// 3. the reclaimer returns the job to the queue
	res, err := e.client.Manual().Reclaim(e.ctx)
	e.must(err)
	if res.Requeued != 1 {
		t.Fatalf("reclaim: %+v, want 1 requeued", res)
	}
	// the reclaimer applies the retry backoff: the job is not due yet
	if jobs, _ := b.Manual().Claim(e.ctx, skiplock.DefaultQueue, 1); len(jobs) != 0 {
		t.Fatal("reclaimed job was claimable before its backoff elapsed")
	}
	e.clock.Advance(time.Hour)
	// 4. worker B claims the same job and receives T2
	jobB := claimOne(e, b)
	if jobB.ID != jobA.ID || jobB.LeaseToken == jobA.LeaseToken || jobB.Attempt != 2 {
		t.Fatalf("claim B: %+v (A had %s)", jobB, jobA.LeaseToken)
	}
	// 5. a completion with T1 changes zero rows
	if err := e.client.Manual().Complete(e.ctx, jobA); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("complete with T1: %v, want ErrLeaseLost", err)
	}
	got, err := e.client.JobGet(e.ctx, jobA.ID)
	e.must(err)
	if got.State != skiplock.StateRunning || got.LeaseToken != jobB.LeaseToken {
		t.Fatalf("after stale completion: state %s token %s", got.State, got.LeaseToken)
	}
	// 6. a completion with T2 finishes the job
	e.must(b.Manual().Complete(e.ctx, jobB))
	got, err = e.client.JobGet(e.ctx, jobA.ID)
	e.must(err)
	if got.State != skiplock.StateSucceeded || got.LeaseToken != "" {
		t.Fatalf("after completion: %+v", got)
	}
}

// Two real transactions: the first locks a row explicitly, the second's claim skips it.
func TestClaimSkipsLockedRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ids := enqueueN(e, 2, nil)

	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	defer tx.Rollback(e.ctx)
	var locked string
	e.must(tx.QueryRow(e.ctx, "SELECT id FROM "+e.q("jobs")+" ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE").Scan(&locked))
	if locked != ids[0] {
		t.Fatalf("locked %s, want the first job %s", locked, ids[0])
	}
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 2)
	e.must(err)
	if len(jobs) != 1 || jobs[0].ID != ids[1] {
		t.Fatalf("claim took %v, want only %s", jobs, ids[1])
	}
	e.must(tx.Rollback(e.ctx))
	jobs, err = e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 2)
	e.must(err)
	if len(jobs) != 1 || jobs[0].ID != ids[0] {
		t.Fatalf("after unlock claim took %v, want %s", jobs, ids[0])
	}
}

func TestConcurrentClaimsTakeEachJobOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	const total = 2000
	enqueueN(e, total, nil)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		c := e.newClient(skiplock.Config{ID: fmt.Sprintf("w%d", w)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				jobs, err := c.Manual().Claim(e.ctx, skiplock.DefaultQueue, 7)
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					return
				}
				mu.Lock()
				for _, j := range jobs {
					seen[j.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != total {
		t.Fatalf("claimed %d distinct jobs, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("job %s claimed %d times", id, n)
		}
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'running' AND attempts = 1"); n != total {
		t.Fatalf("%d running jobs with one attempt, want %d", n, total)
	}
}

func TestClaimOrderAndQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	low, err := e.client.Enqueue(e.ctx, otherArgs{1}, &skiplock.EnqueueOpts{Priority: -5})
	e.must(err)
	high, err := e.client.Enqueue(e.ctx, otherArgs{2}, &skiplock.EnqueueOpts{Priority: 5})
	e.must(err)
	mid, err := e.client.Enqueue(e.ctx, otherArgs{3}, nil)
	e.must(err)
	_, err = e.client.Enqueue(e.ctx, otherArgs{4}, &skiplock.EnqueueOpts{Queue: "other"})
	e.must(err)
	_, err = e.client.Enqueue(e.ctx, otherArgs{5}, &skiplock.EnqueueOpts{Delay: time.Minute})
	e.must(err)
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 10)
	e.must(err)
	var got []string
	for _, j := range jobs {
		got = append(got, j.ID)
	}
	want := []string{high.ID, mid.ID, low.ID}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claim order %v, want %v (delayed job and other queue excluded)", got, want)
	}
	e.clock.Advance(time.Minute)
	jobs, err = e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 10)
	e.must(err)
	if len(jobs) != 1 {
		t.Fatalf("after the delay: %d jobs, want 1", len(jobs))
	}
}

func TestHeartbeatKeepsTokenAndFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{LeaseDuration: 30 * time.Second})
	_, err := e.client.Enqueue(e.ctx, otherArgs{}, nil)
	e.must(err)
	job := claimOne(e, e.client)

	e.clock.Advance(20 * time.Second)
	lost, err := e.client.Manual().Heartbeat(e.ctx, job)
	e.must(err)
	if len(lost) != 0 {
		t.Fatal("heartbeat within the lease lost it")
	}
	got, err := e.client.JobGet(e.ctx, job.ID)
	e.must(err)
	if got.LeaseToken != job.LeaseToken {
		t.Fatalf("heartbeat rotated the token: %s → %s", job.LeaseToken, got.LeaseToken)
	}
	if want := t0.Add(50 * time.Second); !got.LeaseUntil.Equal(want) {
		t.Fatalf("lease_until %s, want %s", got.LeaseUntil, want)
	}
	// past the renewed lease: the heartbeat must fail even though nobody reclaimed yet
	e.clock.Advance(31 * time.Second)
	lost, err = e.client.Manual().Heartbeat(e.ctx, job)
	e.must(err)
	if len(lost) != 1 {
		t.Fatal("heartbeat after expiry renewed the lease")
	}
	// a completion with an old token changes nothing
	stale := *job
	stale.LeaseToken = "00000000-0000-4000-8000-000000000000"
	if err := e.client.Manual().Complete(e.ctx, &stale); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("complete with a wrong token: %v", err)
	}
	if _, err := e.client.Manual().Retry(e.ctx, &stale, errors.New("x"), 0); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("retry with a wrong token: %v", err)
	}
	for _, f := range []func() error{
		func() error { return e.client.Manual().Fail(e.ctx, &stale, errors.New("x")) },
		func() error { return e.client.Manual().Snooze(e.ctx, &stale, time.Second) },
		func() error { return e.client.Manual().Cancel(e.ctx, &stale, nil) },
	} {
		if err := f(); !errors.Is(err, skiplock.ErrLeaseLost) {
			t.Fatalf("fenced write with a wrong token: %v", err)
		}
	}
	got, err = e.client.JobGet(e.ctx, job.ID)
	e.must(err)
	if got.State != skiplock.StateRunning || got.LeaseToken != job.LeaseToken || !got.UpdatedAt.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("stale writes changed the row: %+v", got)
	}
}

func TestReclaimerBackoffAndExhaustion(t *testing.T) {
	t.Parallel()
	policy := skiplock.ExponentialBackoff{Base: 10 * time.Second, Max: time.Hour, Jitter: -1}
	e := newEnv(t, skiplock.Config{LeaseDuration: 30 * time.Second, RetryPolicy: policy})
	_, err := e.client.Enqueue(e.ctx, otherArgs{}, &skiplock.EnqueueOpts{MaxAttempts: 3})
	e.must(err)
	var runAts []time.Time
	for attempt := 1; attempt <= 3; attempt++ {
		job := claimOne(e, e.client) // a worker that crashes every time
		if job.Attempt != attempt {
			t.Fatalf("attempt %d, want %d", job.Attempt, attempt)
		}
		e.clock.Advance(31 * time.Second)
		reclaimedAt := e.clock.Now()
		res, err := e.client.Manual().Reclaim(e.ctx)
		e.must(err)
		got, err := e.client.JobGet(e.ctx, job.ID)
		e.must(err)
		if attempt < 3 {
			want := reclaimedAt.Add(policy.Delay(attempt))
			if res.Requeued != 1 || got.State != skiplock.StatePending || !got.RunAt.Equal(want) {
				t.Fatalf("attempt %d: %+v, job %s run_at %s, want pending at %s", attempt, res, got.State, got.RunAt, want)
			}
			if !strings.Contains(got.LastError, "lease expired") {
				t.Fatalf("last_error %q", got.LastError)
			}
			runAts = append(runAts, got.RunAt)
			e.clock.Set(got.RunAt)
		} else if res.Failed != 1 || got.State != skiplock.StateFailed {
			t.Fatalf("at max attempts: %+v, state %s, want failed", res, got.State)
		}
	}
	// a job that keeps crashing comes back ever later: delays 10s, then 20s
	if d1, d2 := runAts[0].Sub(t0), runAts[1].Sub(runAts[0]); d2 <= d1-31*time.Second {
		t.Fatalf("run_at did not grow: %v then %v", d1, d2)
	}
}

func TestReclaimSparesHeartbeatedJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{LeaseDuration: 30 * time.Second})
	enqueueN(e, 2, nil)
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 2)
	e.must(err)
	e.clock.Advance(25 * time.Second)
	_, err = e.client.Manual().Heartbeat(e.ctx, jobs[0])
	e.must(err)
	e.clock.Advance(10 * time.Second)
	res, err := e.client.Manual().Reclaim(e.ctx)
	e.must(err)
	if res.Requeued != 1 {
		t.Fatalf("reclaimed %+v, want only the silent job", res)
	}
	e.must(e.client.Manual().Complete(e.ctx, jobs[0]))
	if err := e.client.Manual().Complete(e.ctx, jobs[1]); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("reclaimed job's completion: %v", err)
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	enqueueN(e, 5, &skiplock.EnqueueOpts{MaxAttempts: 2})
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 5)
	e.must(err)

	e.must(e.client.Manual().Complete(e.ctx, jobs[0]))
	st, err := e.client.Manual().Retry(e.ctx, jobs[1], errors.New("flaky"), time.Minute)
	e.must(err)
	if st != skiplock.StatePending {
		t.Fatalf("retry → %s", st)
	}
	e.must(e.client.Manual().Fail(e.ctx, jobs[2], errors.New("bad payload")))
	e.must(e.client.Manual().Snooze(e.ctx, jobs[3], 5*time.Minute))
	e.must(e.client.Manual().Cancel(e.ctx, jobs[4], errors.New("not needed")))

	check := func(j *skiplock.Job, state skiplock.JobState, attempts int, runAt time.Time, lastErr string) {
		t.Helper()
		got, err := e.client.JobGet(e.ctx, j.ID)
		e.must(err)
		wantWorker := "" // the lease holder is gone; a success keeps who ran it
		if state == skiplock.StateSucceeded {
			wantWorker = e.client.ID()
		}
		if got.State != state || got.Attempt != attempts || !got.RunAt.Equal(runAt) || got.LastError != lastErr || got.LeaseToken != "" || got.WorkerID != wantWorker {
			t.Fatalf("job %s: state %s attempts %d run_at %s err %q token %q, want %s %d %s %q",
				j.ID, got.State, got.Attempt, got.RunAt, got.LastError, got.LeaseToken, state, attempts, runAt, lastErr)
		}
	}
	check(jobs[0], skiplock.StateSucceeded, 1, t0, "")
	check(jobs[1], skiplock.StatePending, 1, t0.Add(time.Minute), "flaky")
	check(jobs[2], skiplock.StateFailed, 1, t0, "bad payload")
	check(jobs[3], skiplock.StatePending, 0, t0.Add(5*time.Minute), "") // snooze gives the attempt back
	check(jobs[4], skiplock.StateCancelled, 1, t0, "not needed")

	// the retried job's second failure exhausts max_attempts=2
	e.clock.Advance(time.Minute)
	again := claimOne(e, e.client)
	if again.ID != jobs[1].ID || again.Attempt != 2 {
		t.Fatalf("claimed %s attempt %d", again.ID, again.Attempt)
	}
	st, err = e.client.Manual().Retry(e.ctx, again, errors.New("still flaky"), time.Minute)
	e.must(err)
	if st != skiplock.StateFailed {
		t.Fatalf("retry at max attempts → %s, want failed", st)
	}

	// a human retries the failed job: due now, one more attempt granted
	j, err := e.client.JobRetry(e.ctx, jobs[1].ID)
	e.must(err)
	if j.State != skiplock.StatePending || j.MaxAttempts != 3 || !j.RunAt.Equal(e.clock.Now()) {
		t.Fatalf("manual retry: %+v", j)
	}
	if _, err := e.client.JobRetry(e.ctx, jobs[0].ID); !errors.Is(err, skiplock.ErrJobState) {
		t.Fatalf("retrying a succeeded job: %v", err)
	}
	failed, err := e.client.JobList(e.ctx, skiplock.ListParams{States: []skiplock.JobState{skiplock.StateFailed}})
	e.must(err)
	if len(failed) != 1 || failed[0].ID != jobs[2].ID || failed[0].LastError != "bad payload" {
		t.Fatalf("failed list: %v", failed)
	}
}

func TestAdminCancelRunningFencesWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	enqueueN(e, 1, nil)
	job := claimOne(e, e.client)
	if _, err := e.client.JobDelete(e.ctx, job.ID); !errors.Is(err, skiplock.ErrJobState) {
		t.Fatalf("deleting a running job: %v", err)
	}
	c, err := e.client.JobCancel(e.ctx, job.ID, "operator says stop")
	e.must(err)
	if c.State != skiplock.StateCancelled {
		t.Fatalf("cancel: %s", c.State)
	}
	if lost, _ := e.client.Manual().Heartbeat(e.ctx, job); len(lost) != 1 {
		t.Fatal("the worker kept its lease after an operator cancel")
	}
	if err := e.client.Manual().Complete(e.ctx, job); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("complete after cancel: %v", err)
	}
	if _, err := e.client.JobDelete(e.ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.JobGet(e.ctx, job.ID); !errors.Is(err, skiplock.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := e.client.JobGet(e.ctx, "not-a-uuid"); !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("get with a bad id: %v", err)
	}
}

func TestJobListPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ids := enqueueN(e, 25, nil)
	_, err := e.client.Enqueue(e.ctx, emailArgs{}, &skiplock.EnqueueOpts{Queue: "mail"})
	e.must(err)
	var got []string
	after := ""
	for {
		page, err := e.client.JobList(e.ctx, skiplock.ListParams{Kind: "other", Queue: skiplock.DefaultQueue, AfterID: after, Limit: 10})
		e.must(err)
		if len(page) == 0 {
			break
		}
		for _, j := range page {
			got = append(got, j.ID)
		}
		after = page[len(page)-1].ID
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("paged %d ids, want %d in enqueue order", len(got), len(ids))
	}
}

// The claim must use the partial ready index, even on a table of mostly finished jobs.
func TestClaimUsesReadyIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, err := e.pool.Exec(e.ctx, `INSERT INTO `+e.q("jobs")+` (kind, payload, status, updated_at)
		SELECT 'old', '{}', 'succeeded', now() - interval '1 day' FROM generate_series(1, 100000)`)
	e.must(err)
	enqueueN(e, 1000, nil)
	_, err = e.pool.Exec(e.ctx, "ANALYZE "+e.q("jobs"))
	e.must(err)
	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	defer tx.Rollback(e.ctx)
	rows, err := tx.Query(e.ctx, "EXPLAIN "+e.client.ClaimSQLForTest(), nil, "default", "w", int64(30e6), 10, nil, nil, int64(0), 10)
	e.must(err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	e.must(err)
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "jobs_ready_idx") || strings.Contains(text, "Seq Scan on jobs") {
		t.Fatalf("claim plan does not use jobs_ready_idx:\n%s", text)
	}
}

func TestClaimValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	if _, err := e.client.Manual().Claim(e.ctx, `a"; DROP SCHEMA public CASCADE; --`, 1); !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("bad queue: %v", err)
	}
	if _, err := e.client.Manual().Claim(e.ctx, "default", 0); !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("limit 0: %v", err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := e.client.Manual().Claim(ctx, "default", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}
