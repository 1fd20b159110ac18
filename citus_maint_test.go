package skiplock_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/skiplocktest"
)

// newCitusEnv is newEnv on a fresh schema with the Citus layout, on the real cluster
// (SKIPLOCK_TEST_CITUS_URL).
func newCitusEnv(t *testing.T, cfg skiplock.Config) *env {
	t.Helper()
	pool, schema := pgtest.CitusSchema(t)
	e := &env{t: t, ctx: context.Background(), pool: pool, schema: schema, clock: skiplocktest.NewFakeClock(t0)}
	e.client = e.newClient(cfg)
	return e
}

// TestCitusRetention runs the retention service's pass on the 3-node cluster: the
// finished jobs of several keys past their state's window are deleted, batch after
// batch, each delete naming one key (TestCitusStatementPlans asserts their plans); recent
// ones are kept, and pending and running jobs are never touched, however old. The
// outbox's old published events go with them (and its old dead events through
// outbox.Admin.Prune), and lineage rows older than a day past the longest window.
func TestCitusRetention(t *testing.T) {
	t.Parallel()
	e := newCitusEnv(t, skiplock.Config{Retention: skiplock.RetentionConfig{Interval: -1,
		Succeeded: time.Hour, Failed: 2 * time.Hour, Cancelled: time.Hour, BatchSize: 3, OutboxPublished: time.Hour}})
	keys := []string{"acme", "globex", "initech", ""}
	old, recent, ancient := t0.Add(-3*time.Hour), t0.Add(-30*time.Minute), t0.Add(-72*time.Hour)
	// Per key: 4 succeeded, 1 failed and 1 cancelled jobs past their windows (created
	// three days ago: their lineage is past the longest window and a day); 1 succeeded
	// and 1 failed job inside them (the failed one past Succeeded's window, inside its
	// own); a pending and a running job as old as the oldest.
	for _, k := range keys {
		for _, j := range []struct {
			status  string
			n       int
			updated time.Time
		}{{"succeeded", 4, old}, {"failed", 1, old}, {"cancelled", 1, old}, {"succeeded", 1, recent},
			{"failed", 1, t0.Add(-90 * time.Minute)}, {"pending", 1, ancient}, {"running", 1, ancient}} {
			for range j.n {
				created := ancient
				if j.updated != old {
					created = j.updated
				}
				e.must(execErr(e, `INSERT INTO `+e.q("jobs")+` (kind, payload, concurrency_key, status, created_at, updated_at, run_at, lease_until, lease_token)
					VALUES ('order_placed', '{}', $1, $2::`+e.q("job_status")+`, $3, $4, $3,
					        CASE WHEN $2 = 'running' THEN $5::timestamptz END, CASE WHEN $2 = 'running' THEN gen_random_uuid() END)`, k, j.status, created, j.updated, t0.Add(time.Hour)))
			}
		}
	}
	ob, err := outbox.New(e.client, outbox.Config{})
	e.must(err)
	for i, k := range keys {
		for _, at := range []time.Time{old, recent} {
			e.must(execErr(e, `INSERT INTO `+e.q("outbox")+` (aggregate_type, aggregate_id, event_type, payload, concurrency_key, created_at, published_at)
				VALUES ('order', $1, 'placed', '{}', $2, $3, $3)`, strconv.Itoa(i), k, at))
			e.must(execErr(e, `INSERT INTO `+e.q("outbox")+` (aggregate_type, aggregate_id, event_type, payload, concurrency_key, created_at, dead_at)
				VALUES ('order', $1, 'placed', '{}', $2, $3, $3)`, strconv.Itoa(i), k, at))
		}
		e.must(execErr(e, `INSERT INTO `+e.q("outbox")+` (aggregate_type, aggregate_id, event_type, payload, concurrency_key, created_at)
			VALUES ('order', $1, 'placed', '{}', $2, $3)`, strconv.Itoa(i), k, ancient))
	}
	lineageBefore := scalar[int64](e, `SELECT count(*) FROM `+e.q("tx_lineage"))

	res, err := e.client.RunRetention(e.ctx)
	e.must(err)
	if res.Succeeded != 16 || res.Failed != 4 || res.Cancelled != 4 || res.OutboxPublished != 4 || res.Incomplete {
		t.Fatalf("retention on Citus: %+v; want 16 succeeded, 4 failed, 4 cancelled, 4 published events", res)
	}
	states := citusJobStates(t, e.pool, e.schema)
	if want := map[string]int{"succeeded:0": 4, "failed:0": 4, "pending:0": 4, "running:0": 4}; !sameCounts(states, want) {
		t.Fatalf("jobs left: %v; want %v", states, want)
	}
	for _, k := range keys {
		if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("jobs")+` WHERE concurrency_key = $1`, k); n != 4 {
			t.Errorf("key %q keeps %d jobs, want 4 (a recent succeeded, a recent failed, a pending and a running one)", k, n)
		}
	}
	// Lineage past the longest window (2h) and a day is gone: the rows of the jobs
	// and events created three days ago, whatever became of them.
	if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("tx_lineage")+` WHERE created_at < $1`, t0.Add(-26*time.Hour)); n != 0 {
		t.Errorf("%d lineage rows older than the longest window and a day are left", n)
	}
	lineageAfter := scalar[int64](e, `SELECT count(*) FROM `+e.q("tx_lineage"))
	if want := int64(len(keys) * (1 + 1 + 2 + 2)); lineageAfter != want || lineageBefore <= lineageAfter {
		t.Errorf("lineage rows: %d before, %d after; want %d after (the recent jobs' and events')", lineageBefore, lineageAfter, want)
	}
	// The outbox's dead events by outbox.Admin.Prune, also key by key.
	pr, err := ob.Admin().Prune(e.ctx, e.pool, outbox.Retention{Published: time.Hour, Dead: time.Hour, BatchSize: 2})
	e.must(err)
	if pr.Published != 0 || pr.Dead != 4 {
		t.Fatalf("outbox prune: %+v; want 4 dead events (the published ones went with retention)", pr)
	}
	c, err := ob.Admin().Count(e.ctx, e.pool)
	e.must(err)
	if c.Pending != 4 || c.Published != 4 || c.Dead != 4 {
		t.Fatalf("outbox after the prunes: %+v; want 4 of each (the recent ones, and the unpublished)", c)
	}
	// Nothing left to do: a second pass deletes nothing.
	res, err = e.client.RunRetention(e.ctx)
	e.must(err)
	if res.Deleted() != 0 || res.OutboxPublished != 0 {
		t.Fatalf("a second pass: %+v; want nothing", res)
	}
}

// TestCitusScheduler: on the 3-node cluster two started clients run the scheduler
// with the same declared periodic job; every fire time gets exactly one job, which
// runs once, whichever client fires it. Racing passes without the service's lock
// insert one job too: the schedules' row lock (a coordinator table) and the fire's
// deduplication key (held per concurrency key, the periodic job's ” here) stand
// between them as on one node.
func TestCitusScheduler(t *testing.T) {
	t.Parallel()
	e := newCitusEnv(t, skiplock.Config{})
	var mu sync.Mutex
	runs := map[time.Time]int{}
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("tick", func(_ context.Context, j *skiplock.Job) error {
		name, at, ok := skiplock.JobSchedule(j)
		if !ok || name != "tick" {
			t.Errorf("job %s: schedule %q, %v", j.ID, name, ok)
		}
		mu.Lock()
		runs[at]++
		mu.Unlock()
		return nil
	}, nil))
	cfg := skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}},
		SchedulerInterval: 5 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retention: skiplock.RetentionConfig{Interval: time.Hour},
		Periodic: []skiplock.PeriodicJob{{Name: "tick", Spec: "@every 1s", Kind: "tick", Misfire: skiplock.MisfireSkip}}}
	a, b := e.newClient(cfg), e.newClient(cfg)
	startClient(t, a)
	startClient(t, b)
	const ticks = 15
	for i := 1; i <= ticks; i++ {
		e.clock.Advance(time.Second)
		at := t0.Add(time.Duration(i) * time.Second)
		waitFor(t, 30*time.Second, "the fire at "+at.Format(time.TimeOnly)+" to run", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return runs[at] > 0
		})
	}
	got := e.fireTimes("tick") // fails the test should a fire time hold two jobs
	if len(got) != ticks {
		t.Fatalf("%d jobs for %d fire times: %v", len(got), ticks, got)
	}
	waitFor(t, 30*time.Second, "every fired job to succeed", func() bool {
		return citusJobStates(t, e.pool, e.schema)["succeeded:1"] == ticks
	})
	mu.Lock()
	for at, n := range runs {
		if n != 1 {
			t.Errorf("the fire at %s ran %d times", at, n)
		}
	}
	mu.Unlock()

	// Passes racing without the advisory lock, for one fire time of a schedule added at
	// run time: one job.
	e.must(a.Stop(e.ctx))
	e.must(b.Stop(e.ctx))
	_, err := e.client.SchedulePause(e.ctx, "tick")
	e.must(err)
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "race", Spec: "0 13 * * *"})
	e.clock.Set(t0.Add(time.Hour))
	var fired atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 6 {
		c := e.newClient(skiplock.Config{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			n, _, err := c.RunSchedulerUnlockedForTest(e.ctx)
			if err != nil {
				t.Error(err)
			}
			fired.Add(int64(n))
		}()
	}
	close(start)
	wg.Wait()
	if got := e.fireTimes("race"); fired.Load() != 1 || len(got) != 1 || !got[0].Equal(t0.Add(time.Hour)) {
		t.Fatalf("racing passes: %d inserted, fire times %v; want one at 13:00", fired.Load(), got)
	}
	// The fire time set back by hand: firing it again finds its job (the
	// deduplication key, within the key '').
	e.must(execErr(e, `UPDATE `+e.q("schedules")+` SET next_fire_at = $1 WHERE name = 'race'`, t0.Add(time.Hour)))
	n, dups, err := e.client.RunSchedulerUnlockedForTest(e.ctx)
	e.must(err)
	if n != 0 || dups != 1 || len(e.fireTimes("race")) != 1 {
		t.Fatalf("a fire time fired again: %d inserted, %d duplicates", n, dups)
	}
}

func execErr(e *env, sql string, args ...any) error {
	_, err := e.pool.Exec(e.ctx, sql, args...)
	return err
}

// sameCounts reports whether got has exactly want's non-zero counts.
func sameCounts(got, want map[string]int) bool {
	for k, v := range got {
		if v != want[k] {
			return false
		}
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
