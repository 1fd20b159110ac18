package skiplock_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
)

// finishJobs enqueues n jobs of kind "email", claims them and applies outcome to each.
func (e *env) finishJobs(n int, outcome func(j *skiplock.Job) error) {
	e.t.Helper()
	for range n {
		_, err := e.client.Enqueue(e.ctx, emailArgs{To: "x"}, nil)
		e.must(err)
	}
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, n)
	e.must(err)
	if len(jobs) != n {
		e.t.Fatalf("claimed %d of %d", len(jobs), n)
	}
	for _, j := range jobs {
		e.must(outcome(j))
	}
}

func (e *env) countState(state string) int64 {
	e.t.Helper()
	return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = $1::"+e.q("job_status"), state)
}

func TestRetentionDeletesPerStateWindows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Retention: skiplock.RetentionConfig{
		Succeeded: time.Hour, Failed: 48 * time.Hour, Cancelled: -1, BatchSize: 3,
	}})
	e.finishJobs(7, func(j *skiplock.Job) error { return e.client.Manual().Complete(e.ctx, j) })
	e.finishJobs(4, func(j *skiplock.Job) error { return e.client.Manual().Fail(e.ctx, j, errors.New("boom")) })
	e.finishJobs(2, func(j *skiplock.Job) error { return e.client.Manual().Cancel(e.ctx, j, errors.New("no")) })
	// Live jobs, which retention must never touch: one pending, one scheduled far
	// ahead, one running whose lease will have expired.
	_, err := e.client.Enqueue(e.ctx, emailArgs{To: "pending"}, nil)
	e.must(err)
	_, err = e.client.Enqueue(e.ctx, emailArgs{To: "later"}, &skiplock.EnqueueOpts{RunAt: t0.Add(1000 * time.Hour)})
	e.must(err)
	_, err = e.client.Enqueue(e.ctx, otherArgs{N: 1}, &skiplock.EnqueueOpts{Queue: "other"})
	e.must(err)
	running, err := e.client.Manual().Claim(e.ctx, "other", 1)
	e.must(err)
	if len(running) != 1 {
		t.Fatal("no running job")
	}

	res, err := e.client.RunRetention(e.ctx)
	e.must(err)
	if res.Deleted() != 0 {
		t.Fatalf("nothing is old yet, deleted %+v", res)
	}

	e.clock.Advance(2 * time.Hour)
	res, err = e.client.RunRetention(e.ctx)
	e.must(err)
	if res.Succeeded != 7 || res.Failed != 0 || res.Cancelled != 0 {
		t.Fatalf("after 2h: %+v, want 7 succeeded deleted", res)
	}
	e.clock.Advance(47 * time.Hour)
	res, err = e.client.RunRetention(e.ctx)
	e.must(err)
	if res.Succeeded != 0 || res.Failed != 4 || res.Cancelled != 0 {
		t.Fatalf("after 49h: %+v, want 4 failed deleted", res)
	}
	e.clock.Advance(10000 * time.Hour)
	res, err = e.client.RunRetention(e.ctx)
	e.must(err)
	if res.Deleted() != 0 {
		t.Fatalf("cancelled jobs are kept forever, deleted %+v", res)
	}
	for state, want := range map[string]int64{"succeeded": 0, "failed": 0, "cancelled": 2, "pending": 2, "running": 1} {
		if got := e.countState(state); got != want {
			t.Errorf("%s: %d jobs left, want %d", state, got, want)
		}
	}
}

func TestRetentionBatchesAndMaxBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Retention: skiplock.RetentionConfig{Succeeded: time.Minute, BatchSize: 4, MaxBatches: 2}})
	e.finishJobs(10, func(j *skiplock.Job) error { return e.client.Manual().Complete(e.ctx, j) })
	e.clock.Advance(time.Hour)
	res, err := e.client.RunRetention(e.ctx)
	e.must(err)
	if res.Succeeded != 8 || !res.Incomplete {
		t.Fatalf("first run: %+v, want 8 deleted in 2 batches of 4 and Incomplete", res)
	}
	res, err = e.client.RunRetention(e.ctx)
	e.must(err)
	if res.Succeeded != 2 || res.Incomplete {
		t.Fatalf("second run: %+v, want the 2 left", res)
	}
}

func TestRetentionOneClientAtATime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	defer tx.Rollback(e.ctx)
	// The lock the maintenance service takes, held by "another client".
	_, err = tx.Exec(e.ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "skiplock.retention."+e.schema)
	e.must(err)
	if _, err := e.client.RunRetention(e.ctx); !errors.Is(err, skiplock.ErrMaintenanceLocked) {
		t.Fatalf("with the lock held elsewhere: %v, want ErrMaintenanceLocked", err)
	}
	ran, err := e.client.RunMaintenanceOnceForTest(e.ctx, "retention")
	if err != nil || ran {
		t.Fatalf("RunMaintenanceOnce with the lock held: ran=%v err=%v", ran, err)
	}
	e.must(tx.Rollback(e.ctx))
	if _, err := e.client.RunRetention(e.ctx); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

func TestRetentionServiceIsRegistered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Retention: skiplock.RetentionConfig{Succeeded: time.Minute}})
	e.finishJobs(3, func(j *skiplock.Job) error { return e.client.Manual().Complete(e.ctx, j) })
	e.clock.Advance(time.Hour)
	ran, err := e.client.RunMaintenanceOnceForTest(e.ctx, "retention")
	e.must(err)
	if !ran || e.countState("succeeded") != 0 {
		t.Fatalf("maintenance service 'retention': ran=%v, %d succeeded left", ran, e.countState("succeeded"))
	}
	off := e.newClient(skiplock.Config{Retention: skiplock.RetentionConfig{Interval: -1}})
	if _, err := off.RunMaintenanceOnceForTest(e.ctx, "retention"); err == nil {
		t.Fatal("Interval < 0 should leave the service out")
	}
}

func TestRetentionOutboxPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Retention: skiplock.RetentionConfig{OutboxPublished: time.Hour}})
	_, err := e.pool.Exec(e.ctx, `INSERT INTO `+e.q("outbox")+` (aggregate_type, aggregate_id, event_type, payload, published_at, created_at)
SELECT 'order', g::text, 'created', '{}', $1::timestamptz - g * interval '1 minute', $1::timestamptz - interval '1 day'
FROM generate_series(1, 120) g`, t0)
	e.must(err)
	res, err := e.client.RunRetention(e.ctx)
	e.must(err)
	// Published 1..120 minutes before t0: those over an hour ago go (61..120).
	if res.OutboxPublished != 60 {
		t.Fatalf("deleted %d outbox events, want 60", res.OutboxPublished)
	}
	def := e.newClient(skiplock.Config{})
	e.clock.Advance(1000 * time.Hour)
	res, err = def.RunRetention(e.ctx)
	e.must(err)
	if res.OutboxPublished != 0 {
		t.Fatalf("outbox retention is off by default, deleted %d", res.OutboxPublished)
	}
}

// TestRetentionDeletePlan checks that a batch reads jobs_retention_idx also under a
// generic plan (what a prepared statement settles on), never the whole table.
func TestRetentionDeletePlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, err := e.pool.Exec(e.ctx, `INSERT INTO `+e.q("jobs")+` (kind, payload, status, updated_at)
SELECT 'k', '{}', (ARRAY['succeeded','failed','cancelled','pending'])[1 + g % 4]::`+e.q("job_status")+`, now() - g * interval '1 second'
FROM generate_series(1, 20000) g`)
	e.must(err)
	_, err = e.pool.Exec(e.ctx, "ANALYZE "+e.q("jobs"))
	e.must(err)
	plan := explainGeneric(e, e.client.StoreSQLForTest("retention_delete"), nil, "succeeded", int64(time.Hour/time.Microsecond), 1000, nil)
	if !strings.Contains(plan, "jobs_retention_idx") || strings.Contains(plan, "Seq Scan") {
		t.Fatalf("retention batch does not use jobs_retention_idx:\n%s", plan)
	}
}

// explainGeneric EXPLAINs sql with args under a generic plan, in a rolled-back
// transaction (EXPLAIN ANALYZE is not used: the statement may write).
func explainGeneric(e *env, sql string, args ...any) string {
	e.t.Helper()
	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	defer tx.Rollback(e.ctx)
	_, err = tx.Exec(e.ctx, "SET LOCAL plan_cache_mode = force_generic_plan")
	e.must(err)
	rows, err := tx.Query(e.ctx, "EXPLAIN "+sql, args...)
	e.must(err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	e.must(err)
	return strings.Join(lines, "\n")
}

// TestRetentionRate measures row-by-row retention (SKIPLOCK_MEASURE=1 for 1,000,000
// rows; 100,000 otherwise) and logs rows per second.
func TestRetentionRate(t *testing.T) {
	t.Parallel()
	n := 100_000
	if os.Getenv("SKIPLOCK_MEASURE") != "" {
		n = 1_000_000
	}
	e := newEnv(t, skiplock.Config{Retention: skiplock.RetentionConfig{MaxBatches: 1 << 30}})
	_, err := e.pool.Exec(e.ctx, `INSERT INTO `+e.q("jobs")+` (kind, payload, status, created_at, updated_at)
SELECT 'k', '{"n": 1}', 'succeeded', $1::timestamptz - interval '30 days', $1::timestamptz - interval '30 days' + g * interval '1 ms'
FROM generate_series(1, $2::int) g`, t0, n)
	e.must(err)
	_, err = e.pool.Exec(e.ctx, "VACUUM ANALYZE "+e.q("jobs"))
	e.must(err)
	res, err := e.client.RunRetention(e.ctx)
	e.must(err)
	if res.Succeeded != int64(n) || e.countState("succeeded") != 0 {
		t.Fatalf("deleted %d of %d", res.Succeeded, n)
	}
	t.Logf("retention deleted %d rows in %s: %s rows/s (batches of 1000)", n, res.Duration.Round(time.Millisecond),
		fmt.Sprintf("%.0f", float64(n)/res.Duration.Seconds()))
}
