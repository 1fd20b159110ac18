package store

// Stats' statements. Each reads an index, never the whole jobs table:
//
//	live      pending/due/oldest due per queue from jobs_ready_idx (index-only), and
//	          running/expired per queue from jobs_expired_lease_idx: both partial
//	          indexes hold only live jobs, which stay few in a healthy queue
//	finished  per queue and state from a TABLESAMPLE SYSTEM page sample whose size is
//	          capped (exact when the table is smaller than the cap)
//	recent    jobs finished in the last window, per state, from jobs_retention_idx
//	outbox    unpublished count and oldest age from outbox_unpublished_idx, dead count
//	          from outbox_dead_idx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// perFinishedState repeats a query (with %s for the state) once per finished state,
// joined by UNION ALL. A filter "status IN (finished states) AND updated_at >= …" is
// the predicate of jobs_retention_idx (status, updated_at) itself, so the planner
// cannot use the index for it and reads the whole table; one equality per state makes
// each part one range of the index, whatever the table's size.
func perFinishedState(query string) string {
	parts := make([]string, len(FinishedStatuses))
	for i, st := range FinishedStatuses {
		parts[i] = fmt.Sprintf(query, st)
	}
	return strings.Join(parts, "\n  UNION ALL")
}

type statsStatements struct {
	live, pages, finishedSample, finishedExact, recent, outbox, blockedSequences, throughput, horizon, writable stmt
	// blockedSequencesCitus is blockedSequences on the Citus layout, where a sequence
	// is per (concurrency_key, sequence key): the join names the key, so each shard
	// joins its own rows (a join not on the distribution column is refused there).
	blockedSequencesCitus stmt
}

func newStatsStatements(b *builder) statsStatements {
	return statsStatements{
		live: b.addGuarded(planGuardOn, "stats_live", `
WITH t AS MATERIALIZED (SELECT coalesce($1::timestamptz, now()) AS now),
p AS (
  SELECT queue, count(*) AS pending,
         count(*) FILTER (WHERE run_at <= (SELECT now FROM t)) AS due,
         min(run_at) FILTER (WHERE run_at <= (SELECT now FROM t)) AS oldest_due,
         count(*) FILTER (WHERE attempts > 0) AS retrying
  FROM {{s}}.jobs
  WHERE status = 'pending'
  GROUP BY queue
),
r AS (
  SELECT queue, count(*) FILTER (WHERE started) AS running, count(*) FILTER (WHERE NOT started) AS claimed,
         count(*) FILTER (WHERE lease_until < (SELECT now FROM t)) AS expired
  FROM {{s}}.jobs
  WHERE status = 'running'
  GROUP BY queue
)
SELECT coalesce(p.queue, r.queue),
       coalesce(p.pending, 0), coalesce(p.due, 0),
       coalesce(extract(epoch FROM (SELECT now FROM t) - p.oldest_due), 0)::float8,
       coalesce(r.running, 0), coalesce(r.expired, 0), coalesce(p.retrying, 0), coalesce(r.claimed, 0)
FROM p FULL JOIN r ON p.queue = r.queue
ORDER BY 1`),

		// Sequences held up by a failed job (not SkipFailed) with later jobs waiting,
		// per queue of the failed job: ranges of jobs_sequence_idx, which holds only
		// jobs of sequences.
		blockedSequences: b.addGuarded(planGuardOn, "stats_blocked_sequences", `
SELECT f.queue, count(DISTINCT f.sequence_key)
FROM {{s}}.jobs f
WHERE f.sequence_key IS NOT NULL AND f.status = 'failed' AND NOT f.sequence_skip_failed
  AND EXISTS (SELECT 1 FROM {{s}}.jobs n
              WHERE n.sequence_key = f.sequence_key AND n.id > f.id AND n.status = 'pending')
GROUP BY 1`),

		blockedSequencesCitus: b.addCitus(planCitusCustom, "stats_blocked_sequences_citus", `
SELECT f.queue, count(DISTINCT (f.concurrency_key, f.sequence_key))
FROM {{s}}.jobs f
WHERE f.sequence_key IS NOT NULL AND f.status = 'failed' AND NOT f.sequence_skip_failed
  AND EXISTS (SELECT 1 FROM {{s}}.jobs n
              WHERE n.concurrency_key = f.concurrency_key AND n.sequence_key = f.sequence_key
                AND n.id > f.id AND n.status = 'pending')
GROUP BY 1`),

		// Jobs finished within the last $2 microseconds, per queue, bucket of $3
		// microseconds (aligned to the Unix epoch) and state: ranges of
		// jobs_retention_idx, like stats_recent.
		throughput: b.addGuarded(planGuardOn, "stats_throughput", `
SELECT queue, to_timestamp(floor(extract(epoch FROM updated_at) * 1000000 / $3::bigint) * $3::bigint / 1000000.0),
       status::text, count(*)
FROM (`+perFinishedState(`
  SELECT queue, status, updated_at FROM {{s}}.jobs
  WHERE status = '%s' AND updated_at >= coalesce($1::timestamptz, now()) - $2::bigint * interval '1 microsecond'`)+`) AS f
GROUP BY 1, 2, 3
ORDER BY 1, 2`),

		// The heap's size in pages, over every partition in the partitioned layout.
		pages: b.add("stats_pages", `
SELECT greatest((SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree($1::regclass)),
                pg_relation_size($1::regclass))::bigint / current_setting('block_size')::bigint`),

		// Finished jobs per queue and state in a $1 percent sample of the pages.
		finishedSample: b.add("stats_finished_sample", `
SELECT queue, status::text, count(*)
FROM {{s}}.jobs TABLESAMPLE SYSTEM ($1)
WHERE status IN ('succeeded', 'failed', 'cancelled')
GROUP BY 1, 2`),

		finishedExact: b.add("stats_finished_exact", `
SELECT queue, status::text, count(*)
FROM {{s}}.jobs
WHERE status IN ('succeeded', 'failed', 'cancelled')
GROUP BY 1, 2`),

		// Jobs that finished within the last $2 microseconds, per queue and state: one
		// range of jobs_retention_idx (status, updated_at) per state, so its cost grows
		// with the window's throughput, never with the table.
		recent: b.addGuarded(planGuardOn, "stats_recent", `
SELECT queue, status::text, count(*) FROM (`+perFinishedState(`
  SELECT queue, status FROM {{s}}.jobs
  WHERE status = '%s' AND updated_at >= coalesce($1::timestamptz, now()) - $2::bigint * interval '1 microsecond'`)+`) AS f
GROUP BY 1, 2`),

		horizon: b.add("stats_horizon", horizonSQL),
		// A transaction that takes a transaction id and commits: it fails on a standby
		// (no id is assigned during recovery) and its commit waits, as every write's
		// does, for the synchronous standbys the server requires — which a failover
		// manager holds back while it has not fenced the old primary. A read-only
		// session (default_transaction_read_only, as some managers fence an old
		// primary) could still take an id, so it says so too.
		writable: b.add("stats_writable", `SELECT current_setting('transaction_read_only')::bool, txid_current()`),
		outbox: b.addGuarded(planGuardOn, "stats_outbox", `
WITH t AS MATERIALIZED (SELECT coalesce($1::timestamptz, now()) AS now)
SELECT (SELECT count(*) FROM {{s}}.outbox WHERE published_at IS NULL AND dead_at IS NULL),
       coalesce(extract(epoch FROM (SELECT now FROM t) -
         (SELECT min(created_at) FROM {{s}}.outbox WHERE published_at IS NULL AND dead_at IS NULL)), 0)::float8,
       (SELECT count(*) FROM {{s}}.outbox WHERE dead_at IS NOT NULL AND published_at IS NULL)`),
	}
}

// QueueStats are one queue's figures.
type QueueStats struct {
	Queue                 string
	Pending, Due, Running int64
	// Claimed counts running jobs whose handler has not started (Job.Started):
	// Running does not include them.
	Claimed           int64
	ExpiredLeases     int64
	OldestDueAge      time.Duration // 0 when nothing is due
	Retrying          int64         // pending after at least one attempt
	Succeeded, Failed int64
	Cancelled         int64
}

// LiveStats returns per-queue pending, due, running and expired-lease counts and the
// oldest due job's age; queues with no live job are absent.
func (s *Store) LiveStats(ctx context.Context, db DBTX, now *time.Time) ([]QueueStats, error) {
	return guarded(ctx, db, s.stats.live, func(rows pgx.Rows, err error) ([]QueueStats, error) {
		return collectValues(rows, err, func(r pgx.Row) (QueueStats, error) {
			var q QueueStats
			var age float64
			err := r.Scan(&q.Queue, &q.Pending, &q.Due, &age, &q.Running, &q.ExpiredLeases, &q.Retrying, &q.Claimed)
			q.OldestDueAge = secondsDuration(age)
			return q, err
		})
	}, Now(now))
}

func secondsDuration(s float64) time.Duration {
	if s < 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// JobsPages returns the size of the jobs heap in pages (all partitions).
func (s *Store) JobsPages(ctx context.Context, db DBTX) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, s.stats.pages.sql, s.Table("jobs")).Scan(&n)
	return n, err
}

// FinishedCount is the number of jobs of one queue in one finished state.
type FinishedCount struct {
	Queue, Status string
	Count         int64
}

// FinishedCounts counts finished jobs per queue and state. With percent < 100 it
// reads that share of the table's pages (chosen at random) and scales the counts up;
// with 100 it counts exactly.
func (s *Store) FinishedCounts(ctx context.Context, db DBTX, percent float64) ([]FinishedCount, error) {
	st, args := s.stats.finishedExact, []any{}
	if percent < 100 {
		st, args = s.stats.finishedSample, []any{percent}
	}
	out, err := s.finishedCounts(ctx, db, st, args...)
	if err != nil || percent >= 100 {
		return out, err
	}
	for i := range out {
		out[i].Count = int64(float64(out[i].Count)*100/percent + 0.5)
	}
	return out, nil
}

// finishedCounts runs a statement returning (queue, status, count) rows.
func (s *Store) finishedCounts(ctx context.Context, db DBTX, st stmt, args ...any) ([]FinishedCount, error) {
	return guarded(ctx, db, st, func(rows pgx.Rows, err error) ([]FinishedCount, error) {
		return collectValues(rows, err, func(r pgx.Row) (FinishedCount, error) {
			var f FinishedCount
			err := r.Scan(&f.Queue, &f.Status, &f.Count)
			return f, err
		})
	}, args...)
}

// RecentFinished counts, per finished state, the jobs that finished within window.
type RecentFinished struct{ Succeeded, Failed, Cancelled int64 }

// RecentlyFinished returns how many jobs of each queue reached each finished state
// within window, and the totals over all queues.
func (s *Store) RecentlyFinished(ctx context.Context, db DBTX, now *time.Time, window time.Duration) (map[string]RecentFinished, RecentFinished, error) {
	var total RecentFinished
	counts, err := s.finishedCounts(ctx, db, s.stats.recent, Now(now), micros(window))
	if err != nil {
		return nil, total, err
	}
	byQueue := map[string]RecentFinished{}
	for _, f := range counts {
		q := byQueue[f.Queue]
		switch f.Status {
		case StatusSucceeded:
			q.Succeeded += f.Count
			total.Succeeded += f.Count
		case StatusFailed:
			q.Failed += f.Count
			total.Failed += f.Count
		case StatusCancelled:
			q.Cancelled += f.Count
			total.Cancelled += f.Count
		}
		byQueue[f.Queue] = q
	}
	return byQueue, total, nil
}

// OutboxStats are the outbox's health figures.
type OutboxStats struct {
	Unpublished       int64
	OldestUnpublished time.Duration // age of the oldest unpublished, not dead event
	Dead              int64
}

// OutboxHealth returns the outbox's unpublished and dead counts and the oldest
// unpublished event's age.
func (s *Store) OutboxHealth(ctx context.Context, db DBTX, now *time.Time) (OutboxStats, error) {
	return guardedRow(ctx, db, s.stats.outbox, func(r pgx.Row) (OutboxStats, error) {
		var o OutboxStats
		var age float64
		err := r.Scan(&o.Unpublished, &age, &o.Dead)
		o.OldestUnpublished = secondsDuration(age)
		return o, err
	}, Now(now))
}

// BlockedSequences counts, per queue, the sequences a failed job holds up (on the
// Citus layout a sequence is per concurrency key).
func (s *Store) BlockedSequences(ctx context.Context, db DBTX) (map[string]int64, error) {
	if dist, err := s.Distributed(ctx, db); err != nil {
		return nil, err
	} else if dist {
		return guarded(ctx, db, s.stats.blockedSequencesCitus, collectMap[int64])
	}
	return guarded(ctx, db, s.stats.blockedSequences, collectMap[int64])
}

// ThroughputCount is how many jobs of a queue reached a finished state in a bucket.
type ThroughputCount struct {
	Queue  string
	Start  time.Time
	Status string
	Count  int64
}

// Throughput counts the jobs that finished within window, per queue, bucket and state.
func (s *Store) Throughput(ctx context.Context, db DBTX, now *time.Time, window, bucket time.Duration) ([]ThroughputCount, error) {
	return guarded(ctx, db, s.stats.throughput, func(rows pgx.Rows, err error) ([]ThroughputCount, error) {
		return collectValues(rows, err, func(r pgx.Row) (ThroughputCount, error) {
			var c ThroughputCount
			err := r.Scan(&c.Queue, &c.Start, &c.Status, &c.Count)
			return c, err
		})
	}, Now(now), micros(window), micros(bucket))
}

// ErrReadOnly is Writable's answer for a session whose transactions are read-only.
var ErrReadOnly = errors.New("the session is read-only (transaction_read_only is on)")

// Writable commits a transaction that takes a transaction id (see the statement): it
// returns once a write's commit would, and fails where writes are refused
// (ErrReadOnly for a read-only session).
func (s *Store) Writable(ctx context.Context, db DBTX) error {
	var readOnly bool
	var xid int64
	if err := db.QueryRow(ctx, s.stats.writable.sql).Scan(&readOnly, &xid); err != nil {
		return err
	}
	if readOnly {
		return ErrReadOnly
	}
	return nil
}
