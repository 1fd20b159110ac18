package skiplock_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

func TestStatsFigures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{LeaseDuration: time.Minute})
	e.finishJobs(3, func(j *skiplock.Job) error { return e.client.Manual().Complete(e.ctx, j) })
	e.finishJobs(2, func(j *skiplock.Job) error { return e.client.Manual().Fail(e.ctx, j, errors.New("x")) })
	e.clock.Advance(10 * time.Minute) // the finished jobs are now outside the 1m recent window
	e.finishJobs(1, func(j *skiplock.Job) error { return e.client.Manual().Cancel(e.ctx, j, errors.New("x")) })
	// queue "other": 2 due (the older waiting 90s), 1 scheduled, 2 running of which one expired.
	for _, d := range []time.Duration{-90 * time.Second, -10 * time.Second, time.Hour} {
		_, err := e.client.Enqueue(e.ctx, otherArgs{}, &skiplock.EnqueueOpts{Queue: "other", RunAt: e.clock.Now().Add(d)})
		e.must(err)
	}
	for range 2 {
		_, err := e.client.Enqueue(e.ctx, otherArgs{}, &skiplock.EnqueueOpts{Queue: "busy"})
		e.must(err)
	}
	first, err := e.client.Manual().Claim(e.ctx, "busy", 1)
	e.must(err)
	e.clock.Advance(45 * time.Second)
	_, err = e.client.Manual().Claim(e.ctx, "busy", 1)
	e.must(err)
	e.clock.Advance(30 * time.Second) // first's lease (1m) has run out, the second's not
	_ = first
	_, err = e.pool.Exec(e.ctx, `INSERT INTO `+e.q("outbox")+` (aggregate_type, aggregate_id, event_type, payload, created_at, published_at, dead_at)
VALUES ('o', '1', 'e', '{}', $1::timestamptz - interval '5 minutes', NULL, NULL),
       ('o', '2', 'e', '{}', $1::timestamptz - interval '1 minute', NULL, NULL),
       ('o', '3', 'e', '{}', $1::timestamptz - interval '1 hour', $1, NULL),
       ('o', '4', 'e', '{}', $1::timestamptz - interval '2 hours', NULL, $1)`, e.clock.Now())
	e.must(err)

	s, err := e.client.Stats(e.ctx, nil)
	e.must(err)
	def, other, busy := s.Queue("default"), s.Queue("other"), s.Queue("busy")
	if def.Succeeded != 3 || def.Failed != 2 || def.Cancelled != 1 || def.Pending != 0 || s.FinishedEstimated {
		t.Errorf("default: %+v (estimated %v)", def, s.FinishedEstimated)
	}
	if other.Pending != 3 || other.Due != 2 || other.Running != 0 || other.OldestDueAge != 90*time.Second+75*time.Second {
		t.Errorf("other: %+v", other)
	}
	if busy.Running != 2 || busy.ExpiredLeases != 1 || busy.Pending != 0 {
		t.Errorf("busy: %+v", busy)
	}
	if s.Recent.Cancelled != 0 || s.Recent.Succeeded != 0 || s.Recent.Window != time.Minute {
		t.Errorf("recent (1m): %+v", s.Recent)
	}
	s2, err := e.client.Stats(e.ctx, &skiplock.StatsOpts{RecentWindow: 2 * time.Minute})
	e.must(err)
	if s2.Recent.Cancelled != 1 || s2.Recent.Succeeded != 0 {
		t.Errorf("recent (2m): %+v", s2.Recent)
	}
	if d := s2.Queue("default"); d.RecentCancelled != 1 || d.RecentSucceeded != 0 || d.RecentFailed != 0 {
		t.Errorf("default's recent figures (2m), read from the database: %+v", d)
	}
	// A job that failed once and waits out its retry backoff counts as retrying.
	_, err = e.client.Enqueue(e.ctx, otherArgs{}, &skiplock.EnqueueOpts{Queue: "flaky"})
	e.must(err)
	claimed, err := e.client.Manual().Claim(e.ctx, "flaky", 1)
	e.must(err)
	_, err = e.client.Manual().Retry(e.ctx, claimed[0], errors.New("transient"), time.Minute)
	e.must(err)
	s3, err := e.client.Stats(e.ctx, nil)
	e.must(err)
	if f := s3.Queue("flaky"); f.Retrying != 1 || f.Pending != 1 || s3.Queue("other").Retrying != 0 {
		t.Errorf("retrying: flaky %+v, other %+v", f, s3.Queue("other"))
	}
	if s.Outbox.Unpublished != 2 || s.Outbox.Dead != 1 || s.Outbox.OldestUnpublishedAge != 5*time.Minute {
		t.Errorf("outbox: %+v", s.Outbox)
	}
	if s.Process.Succeeded != 3 || s.Process.Failed != 2 || s.Process.Inserted != 11 {
		t.Errorf("process counters: %+v", s.Process)
	}
}

// TestStatsOnMillionJobs builds 1,000,000 jobs with one INSERT … SELECT, shows the
// plan of every statement Stats runs (none reads the whole table), and times Stats.
func TestStatsOnMillionJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 1,000,000-row table")
	}
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	const n = 1_000_000
	// 990,000 finished jobs over three queues, 9,000 pending (half due), 1,000 running
	// (a tenth expired) — a busy queue after a week.
	start := time.Now()
	_, err := e.pool.Exec(e.ctx, `INSERT INTO `+e.q("jobs")+` (queue, kind, payload, status, run_at, lease_until, lease_token, worker_id, created_at, updated_at)
SELECT 'q' || (g % 3), 'k', '{"order": 12345, "note": "some payload"}',
       s, $1::timestamptz + CASE WHEN s = 'pending' AND g % 2 = 0 THEN interval '1 hour' ELSE -(g % 600) * interval '1 second' END,
       CASE WHEN s = 'running' THEN $1::timestamptz + CASE WHEN g % 10 = 0 THEN interval '-1 minute' ELSE interval '1 minute' END END,
       CASE WHEN s = 'running' THEN gen_random_uuid() END,
       CASE WHEN s = 'running' THEN 'w' END,
       $1::timestamptz - interval '7 days' + g * interval '600 ms', $1::timestamptz - interval '7 days' + g * interval '600 ms'
FROM (SELECT g, (CASE WHEN g % 1000 < 9 THEN 'pending' WHEN g % 1000 = 9 THEN 'running'
                      WHEN g % 10 < 8 THEN 'succeeded' WHEN g % 10 = 8 THEN 'failed' ELSE 'cancelled' END)::`+e.q("job_status")+` AS s
      FROM generate_series(1, $2::int) g) AS x`, e.clock.Now(), n)
	e.must(err)
	_, err = e.pool.Exec(e.ctx, "VACUUM ANALYZE "+e.q("jobs"))
	e.must(err)
	t.Logf("built %d jobs in %s", n, time.Since(start).Round(time.Millisecond))

	want := map[string]map[string]int64{}
	rows, err := e.pool.Query(e.ctx, "SELECT queue, status::text, count(*) FROM "+e.q("jobs")+" GROUP BY 1, 2")
	e.must(err)
	for rows.Next() {
		var q, st string
		var c int64
		e.must(rows.Scan(&q, &st, &c))
		if want[q] == nil {
			want[q] = map[string]int64{}
		}
		want[q][st] = c
	}
	e.must(rows.Err())

	now := e.clock.Now()
	us := int64(time.Minute / time.Microsecond)
	plans := map[string]string{
		"stats_live":            explainGeneric(e, e.client.StoreSQLForTest("stats_live"), now),
		"stats_finished_sample": explainGeneric(e, e.client.StoreSQLForTest("stats_finished_sample"), 2.0),
		"stats_recent":          explainGeneric(e, e.client.StoreSQLForTest("stats_recent"), now, us),
		"stats_outbox":          explainGeneric(e, e.client.StoreSQLForTest("stats_outbox"), now),
	}
	for name, plan := range plans {
		t.Logf("%s:\n%s", name, plan)
		if strings.Contains(plan, "Seq Scan on jobs") {
			t.Errorf("%s reads the whole jobs table", name)
		}
	}
	// The pending jobs through the claim's index of every pending job (jobs_ready_idx);
	// the fair claim's (jobs_fair_idx) holds only the jobs of fair queues (migration
	// 0024), and a count through it would miss the others.
	if !strings.Contains(plans["stats_live"], "jobs_ready_idx") || strings.Contains(plans["stats_live"], "jobs_fair_idx") {
		t.Error("stats_live does not read the pending jobs through jobs_ready_idx")
	}
	if !strings.Contains(plans["stats_live"], "jobs_expired_lease_idx") {
		t.Error("stats_live does not use jobs_expired_lease_idx")
	}
	if !strings.Contains(plans["stats_recent"], "jobs_retention_idx") {
		t.Error("stats_recent does not use jobs_retention_idx")
	}
	if !strings.Contains(plans["stats_finished_sample"], "Sample Scan") {
		t.Error("stats_finished_sample is not a sample scan")
	}

	var s *skiplock.Stats
	best := time.Hour
	for range 3 {
		start := time.Now()
		s, err = e.client.Stats(e.ctx, nil)
		e.must(err)
		best = min(best, time.Since(start))
	}
	t.Logf("Stats on %d jobs: %s (best of 3)", n, best.Round(100*time.Microsecond))
	if !s.FinishedEstimated {
		t.Error("finished counts should be estimated on a table this size")
	}
	for _, q := range s.Queues {
		w := want[q.Queue]
		if q.Pending != w["pending"] || q.Running != w["running"] {
			t.Errorf("%s: pending %d running %d, want %d %d", q.Queue, q.Pending, q.Running, w["pending"], w["running"])
		}
		for st, got := range map[string]int64{"succeeded": q.Succeeded, "failed": q.Failed, "cancelled": q.Cancelled} {
			if d := float64(got-w[st]) / float64(w[st]); d > 0.15 || d < -0.15 {
				t.Errorf("%s %s: estimate %d, exact %d (off by %.0f%%)", q.Queue, st, got, w[st], 100*d)
			}
		}
		var oldest float64
		e.must(e.pool.QueryRow(e.ctx, `SELECT extract(epoch FROM $1 - min(run_at)) FROM `+e.q("jobs")+`
WHERE queue = $2 AND status = 'pending' AND run_at <= $1`, now, q.Queue).Scan(&oldest))
		if q.OldestDueAge != time.Duration(oldest*float64(time.Second)) {
			t.Errorf("%s: oldest due %s, want %gs", q.Queue, q.OldestDueAge, oldest)
		}
	}
	if os.Getenv("SKIPLOCK_MEASURE") != "" {
		start := time.Now()
		_, err := e.client.Stats(e.ctx, &skiplock.StatsOpts{SamplePages: 1 << 40})
		e.must(err)
		t.Logf("Stats with exact finished counts (a full scan): %s", time.Since(start).Round(100*time.Microsecond))
	}
}
