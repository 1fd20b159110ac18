package skiplock_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

func (e *env) partition(opts skiplock.PartitionOpts) *skiplock.PartitionReport {
	e.t.Helper()
	rep, err := skiplock.PartitionJobs(e.ctx, e.pool, e.schema, opts)
	e.must(err)
	return rep
}

// eachLayout runs f, in a parallel subtest of its own, on an env of the plain and
// one of the partitioned layout (converted before f runs).
func eachLayout(t *testing.T, f func(t *testing.T, e *env)) {
	for _, layout := range []string{"plain", "partitioned"} {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, skiplock.Config{})
			if layout == "partitioned" {
				e.partition(skiplock.PartitionOpts{})
			}
			f(t, e)
		})
	}
}

func (e *env) partitionNames() []string {
	e.t.Helper()
	parts, err := e.client.Partitions(e.ctx)
	e.must(err)
	var names []string
	for _, p := range parts {
		names = append(names, p.Name)
	}
	return names
}

// dbDay returns the database's UTC date plus days, as partition names spell it.
func (e *env) dbDay(days int) string {
	return scalar[string](e, "SELECT to_char((clock_timestamp() AT TIME ZONE 'UTC') + $1 * interval '1 day', 'YYYYMMDD')", days)
}

// TestPartitionJobsConvertsInPlace converts a table holding pending, running and
// finished jobs (some with deduplication keys, some privileges granted) and checks that
// nothing was lost and that the lifecycle statements run unchanged on the new layout.
func TestPartitionJobsConvertsInPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	held, err := e.client.Enqueue(e.ctx, emailArgs{To: "a"}, &skiplock.EnqueueOpts{DeduplicationKey: "order:1"})
	e.must(err)
	for range 5 {
		_, err := e.client.Enqueue(e.ctx, emailArgs{To: "b"}, nil)
		e.must(err)
	}
	running, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 2)
	e.must(err)
	role := e.schema + "_reader"
	_, err = e.pool.Exec(e.ctx, `CREATE ROLE "`+role+`" NOLOGIN`)
	e.must(err)
	t.Cleanup(func() { e.pool.Exec(e.ctx, `DROP OWNED BY "`+role+`"; DROP ROLE "`+role+`"`) })
	_, err = e.pool.Exec(e.ctx, `GRANT USAGE ON SCHEMA "`+e.schema+`" TO "`+role+`"; GRANT SELECT ON `+e.q("jobs")+` TO "`+role+`";
GRANT UPDATE (status) ON `+e.q("jobs")+` TO "`+role+`"`)
	e.must(err)
	_, err = e.pool.Exec(e.ctx, "ALTER TABLE "+e.q("jobs")+" SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000)")
	e.must(err)
	before := e.countJobs()

	var progress strings.Builder
	rep := e.partition(skiplock.PartitionOpts{Premake: 3, Progress: &progress})
	if rep.DedupKeys != 1 || len(rep.Created) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	if !strings.Contains(progress.String(), "jobs was locked for") {
		t.Errorf("progress:\n%s", progress.String())
	}
	t.Logf("conversion held the lock for %s", rep.LockHeld)
	names := e.partitionNames()
	want := []string{"jobs_default", "jobs_legacy", "jobs_p" + e.dbDay(1), "jobs_p" + e.dbDay(2)}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("partitions %v, want %v", names, want)
	}
	// New partitions take the storage (autovacuum) options of the one they follow.
	// So does the default partition the conversion creates.
	// The legacy table keeps the options set above over migration 0020's.
	legacy := strings.Join(scalar[[]string](e, "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass", e.q("jobs_legacy")), ",")
	if !strings.Contains(","+legacy+",", ",autovacuum_vacuum_scale_factor=0,") ||
		!strings.Contains(legacy, "autovacuum_vacuum_threshold=10000") || !strings.Contains(legacy, "autovacuum_vacuum_cost_delay=0") {
		t.Errorf("options of jobs_legacy: %s", legacy)
	}
	for _, p := range []string{"jobs_p" + e.dbDay(2), "jobs_default"} {
		if opts := scalar[[]string](e, "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass",
			e.q(p)); strings.Join(opts, ",") != legacy {
			t.Errorf("options of partition %s: %v, want those of jobs_legacy (%s)", p, opts, legacy)
		}
	}
	if _, err := skiplock.PartitionJobs(e.ctx, e.pool, e.schema, skiplock.PartitionOpts{}); !errors.Is(err, skiplock.ErrAlreadyPartitioned) {
		t.Fatalf("second conversion: %v", err)
	}
	if got := e.countJobs(); got != before {
		t.Fatalf("%d jobs after conversion, %d before", got, before)
	}
	if !scalar[bool](e, `SELECT has_table_privilege($1, $2, 'SELECT') AND has_column_privilege($1, $2, 'status', 'UPDATE')
  AND NOT has_table_privilege($1, $2, 'UPDATE')`, role, e.q("jobs")) {
		t.Error("the new jobs table lacks the old one's privileges")
	}
	// The lifecycle, unchanged: the running jobs' leases survive the conversion.
	e.must(e.client.Manual().Complete(e.ctx, running[0]))
	if _, err := e.client.Manual().Heartbeat(e.ctx, running[1]); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	rec, err := e.client.Manual().Reclaim(e.ctx)
	e.must(err)
	if rec.Requeued != 1 {
		t.Fatalf("reclaim after conversion: %+v", rec)
	}
	e.clock.Advance(time.Hour)
	more, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 10)
	e.must(err)
	if len(more) != 5 {
		t.Fatalf("claimed %d after conversion, want 5", len(more))
	}
	list, err := e.client.JobList(e.ctx, skiplock.ListParams{States: []skiplock.JobState{skiplock.StateSucceeded}})
	e.must(err)
	if len(list) != 1 {
		t.Fatalf("list: %d succeeded", len(list))
	}
	s, err := e.client.Stats(e.ctx, nil)
	e.must(err)
	if q := s.Queue(skiplock.DefaultQueue); q.Running != 5 || q.Succeeded != 1 {
		t.Fatalf("stats after conversion: %+v", q)
	}
	// With realistic statistics the claim reads each partition's ready index.
	_, err = e.pool.Exec(e.ctx, `INSERT INTO `+e.q("jobs")+` (kind, payload, status, updated_at)
SELECT 'k', '{}', 'succeeded', now() FROM generate_series(1, 20000); ANALYZE `+e.q("jobs"))
	e.must(err)
	plan := explainGeneric(e, e.client.ClaimSQLForTest(), nil, "default", "w", int64(30e6), 10, nil, nil, int64(0), 10)
	if strings.Contains(plan, "Seq Scan on jobs_legacy") || !strings.Contains(plan, "jobs_legacy_ready_idx") ||
		!strings.Contains(plan, "jobs_legacy_pkey") {
		t.Errorf("claim plan on the partitioned layout:\n%s", plan)
	}
	// The deduplication key held before the conversion is still held.
	var dup int
	e.must(e.pool.QueryRow(e.ctx, `WITH i AS (INSERT INTO `+e.q("jobs")+` (kind, payload, deduplication_key)
VALUES ('email', '{}', 'order:1') ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM i`).Scan(&dup))
	if dup != 0 {
		t.Fatal("a converted job's deduplication key is no longer held")
	}
	if _, err := e.client.JobCancel(e.ctx, held.ID, ""); err != nil && !errors.Is(err, skiplock.ErrJobState) {
		t.Fatal(err)
	}
	res, err := e.client.Enqueue(e.ctx, emailArgs{To: "c"}, &skiplock.EnqueueOpts{DeduplicationKey: "order:1"})
	e.must(err)
	if !res.Duplicate || res.ID != held.ID {
		t.Fatalf("enqueue of a held key: %+v, want duplicate of %s", res, held.ID)
	}
}

// insertJob writes one job with an explicit id time (its partition), state and
// updated_at, as a job created then would look.
func (e *env) insertJob(created time.Time, state string, updated time.Time, dedup string) string {
	e.t.Helper()
	var key *string
	if dedup != "" {
		key = &dedup
	}
	return scalar[string](e, `INSERT INTO `+e.q("jobs")+` (id, kind, payload, status, run_at, lease_until, lease_token, worker_id,
  deduplication_key, created_at, updated_at)
SELECT `+e.q("uuid_v7")+`($1), 'email', '{}', $2::`+e.q("job_status")+`, $1,
  CASE WHEN $2 = 'running' THEN $3::timestamptz + interval '1 minute' END,
  CASE WHEN $2 = 'running' THEN gen_random_uuid() END, CASE WHEN $2 = 'running' THEN 'w' END, $4, $1, $3
RETURNING id::text`, created, state, updated, key)
}

// TestPartitionManager drives the partition manager over partitions of past days
// (made by hand: a converted table's first partitions lie in the future) with the
// fake clock: it drops a partition whose jobs are all finished and past their window,
// keeps one holding a pending or running job, and creates partitions ahead.
func TestPartitionManager(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Retention: skiplock.RetentionConfig{Succeeded: 24 * time.Hour, Failed: 48 * time.Hour}})
	e.partition(skiplock.PartitionOpts{Premake: 2})
	// Replace the (empty) legacy partition by three past days.
	_, err := e.pool.Exec(e.ctx, `ALTER TABLE `+e.q("jobs")+` DETACH PARTITION `+e.q("jobs_legacy")+`; DROP TABLE `+e.q("jobs_legacy"))
	e.must(err)
	day := func(d int) time.Time { return time.Date(2020, 1, d, 0, 0, 0, 0, time.UTC) }
	for d := 1; d <= 3; d++ {
		floor := func(t time.Time) string { return scalar[string](e, "SELECT "+e.q("uuid_v7_floor")+"($1)::text", t) }
		_, err := e.pool.Exec(e.ctx, `CREATE TABLE `+e.q("jobs_p2020010"+string(rune('0'+d)))+` PARTITION OF `+e.q("jobs")+
			` FOR VALUES FROM ('`+floor(day(d))+`') TO ('`+floor(day(d+1))+`')`)
		e.must(err)
	}
	// Day 1: finished only. Day 2: finished and one late pending job (a retry, or a
	// job scheduled far ahead). Day 3: finished and one running job.
	noon := func(d int) time.Time { return day(d).Add(12 * time.Hour) }
	e.insertJob(noon(1), "succeeded", noon(1).Add(time.Hour), "key-1")
	e.insertJob(noon(1), "failed", noon(1).Add(time.Hour), "")
	e.insertJob(noon(2), "succeeded", noon(2).Add(time.Hour), "")
	late := e.insertJob(noon(2), "pending", noon(2), "")
	e.insertJob(noon(3), "cancelled", noon(3), "")
	runningID := e.insertJob(noon(3), "running", day(10), "")
	dedupRows := func() int64 { return scalar[int64](e, "SELECT count(*) FROM "+e.q("job_dedup")) }
	if dedupRows() != 1 {
		t.Fatal("the trigger did not record key-1")
	}

	// On 2020-01-05, the failed job of day 1 is 3.5 days old (window 2 days): day 1 goes.
	e.clock.Set(day(5))
	res, err := e.client.RunRetention(e.ctx)
	e.must(err)
	if strings.Join(res.PartitionsDropped, ",") != "jobs_p20200101" {
		t.Fatalf("dropped %v, want jobs_p20200101 (kept %+v)", res.PartitionsDropped, res.PartitionsKept)
	}
	if dedupRows() != 0 {
		t.Error("dropping a partition did not release its jobs' deduplication keys")
	}
	kept := map[string]skiplock.KeptPartition{}
	for _, k := range res.PartitionsKept {
		kept[k.Name] = k
	}
	if k := kept["jobs_p20200102"]; k.Pending != 1 {
		t.Errorf("day 2 should be kept for its pending job: %+v", res.PartitionsKept)
	}
	if k := kept["jobs_p20200103"]; k.Leased != 1 {
		t.Errorf("day 3 should be kept for its running job: %+v", res.PartitionsKept)
	}
	// Row retention, which waits one period (a day) more than the window in the
	// partitioned layout, deleted day 2's succeeded job (finished 2.5 days ago) from
	// the kept partition.
	if res.Succeeded != 1 {
		t.Errorf("row retention in kept partitions: %+v", res)
	}
	// Created ahead: today and tomorrow by the database's clock.
	names := strings.Join(e.partitionNames(), ",")
	if !strings.Contains(names, "jobs_p"+e.dbDay(0)) || !strings.Contains(names, "jobs_p"+e.dbDay(1)) {
		t.Errorf("partitions %s lack today's or tomorrow's", names)
	}

	// The late job is not lost: it can be claimed and finished; then day 2 goes.
	job, err := e.client.JobGet(e.ctx, late)
	e.must(err)
	if job.State != skiplock.StatePending {
		t.Fatalf("late job: %+v", job)
	}
	claimed, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 5)
	e.must(err)
	if len(claimed) != 1 || claimed[0].ID != late {
		t.Fatalf("claimed %+v", claimed)
	}
	e.must(e.client.Manual().Complete(e.ctx, claimed[0]))
	e.clock.Advance(2 * time.Hour)
	res, err = e.client.RunRetention(e.ctx)
	e.must(err)
	if len(res.PartitionsDropped) != 0 {
		t.Fatalf("the late job finished 2h ago (window 1 day): nothing may go yet, dropped %v", res.PartitionsDropped)
	}
	e.clock.Advance(24 * time.Hour)
	res, err = e.client.RunRetention(e.ctx)
	e.must(err)
	if strings.Join(res.PartitionsDropped, ",") != "jobs_p20200102" {
		t.Fatalf("dropped %v, want jobs_p20200102", res.PartitionsDropped)
	}
	if _, err := e.client.JobGet(e.ctx, runningID); err != nil {
		t.Fatalf("the running job of day 3: %v", err)
	}
}

// TestPartitionJobsOnMillionJobs measures how long the conversion locks a table of
// 1,000,000 jobs (SKIPLOCK_MEASURE=1; skipped otherwise).
func TestPartitionJobsOnMillionJobs(t *testing.T) {
	if os.Getenv("SKIPLOCK_MEASURE") == "" {
		t.Skip("a measurement: set SKIPLOCK_MEASURE=1")
	}
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, err := e.pool.Exec(e.ctx, `INSERT INTO `+e.q("jobs")+` (kind, payload, status, deduplication_key, updated_at)
SELECT 'k', '{"order": 12345}', CASE WHEN g % 100 = 0 THEN 'pending' ELSE 'succeeded' END::`+e.q("job_status")+`,
       CASE WHEN g % 10 = 0 THEN 'key-' || g END, now()
FROM generate_series(1, 1000000) g`)
	e.must(err)
	_, err = e.pool.Exec(e.ctx, "VACUUM ANALYZE "+e.q("jobs"))
	e.must(err)
	rep := e.partition(skiplock.PartitionOpts{})
	t.Logf("converted 1,000,000 jobs (100,000 deduplication keys): lock held %s", rep.LockHeld.Round(time.Millisecond))
	if e.countJobs() != 1_000_000 {
		t.Fatal("rows lost")
	}
}
