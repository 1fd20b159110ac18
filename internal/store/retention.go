package store

// Retention's statements: batched deletes of finished jobs. Each statement removes at
// most one batch and commits on its own (callers loop), so no delete holds many row
// locks or a long transaction, and autovacuum can reclaim space between batches.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

type retentionStatements struct {
	deleteFinished, pruneLineage stmt
}

func newRetentionStatements(b *builder) retentionStatements {
	return retentionStatements{
		// One batch of one finished state, oldest first, through jobs_retention_idx
		// (status, updated_at). The literal IN list repeats the index's predicate so the
		// planner can use the partial index also under a generic plan, where $2 is
		// unknown. SKIP LOCKED: a batch never waits for an operator's retry or for
		// another pruner; the outer status test re-checks the row it locked. A child
		// of a flow whose parent has not finished is kept: the parent reads it. That
		// test is a scalar subquery, a primary-key probe made only for children: as
		// NOT EXISTS the planner hashed it over every unfinished job. The delete then
		// finds the locked rows by their ids: joined to them instead, a plan made while
		// the table's statistics said it was nearly empty walked its whole primary key.
		//
		// $5 is where the previous batch of the same run stopped (its newest
		// updated_at; NULL for a run's first batch), and it is an index condition: each
		// batch starts its walk of the index there, not at the oldest entry. Without
		// it every batch walked again the entries of every row the run had already
		// deleted, which stay in the index until vacuum removes them (killed entries
		// are skipped, but their pages are still read): at 22,000 jobs/s a batch of
		// 1,000 read 20,000 index pages and took 250 ms, retention deleted a third of
		// what finished, and the table grew without bound (W14, docs/benchmarks.md,
		// 2026-12-05). A job that finished with an older updated_at but committed after
		// the batch that passed it is left to the next run, which starts from the
		// oldest again. The statement returns how many rows it deleted and the newest
		// updated_at among them.
		deleteFinished: b.addGuarded(planGuardOn, "retention_delete", `
WITH doomed AS (
  SELECT id FROM {{s}}.jobs
  WHERE status IN ('succeeded', 'failed', 'cancelled')
    AND status = $2::{{s}}.job_status
    AND updated_at < coalesce($1::timestamptz, now()) - $3::bigint * interval '1 microsecond'
    AND updated_at >= coalesce($5::timestamptz, '-infinity')
    AND (parent_id IS NULL OR coalesce((
      SELECT p.status IN ('succeeded', 'failed', 'cancelled') FROM {{s}}.jobs p WHERE p.id = jobs.parent_id), true))
  ORDER BY updated_at
  LIMIT $4
  FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM {{s}}.jobs AS j
  WHERE j.id = ANY(ARRAY(SELECT id FROM doomed)) AND j.status = $2::{{s}}.job_status
  RETURNING j.updated_at
)
SELECT count(*), max(updated_at) FROM gone`),

		// One batch of lineage rows older than $2 microseconds (by the BRIN index on
		// created_at): the jobs and events they point at are past every retention
		// window by then.
		pruneLineage: b.addGuarded(planGuardOn, "retention_prune_lineage", `
DELETE FROM {{s}}.tx_lineage
WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM {{s}}.tx_lineage
  WHERE created_at < coalesce($1::timestamptz, now()) - $2::bigint * interval '1 microsecond'
  LIMIT $3))`),
	}
}

// PruneLineage deletes up to limit lineage rows older than olderThan and returns how
// many it deleted.
func (s *Store) PruneLineage(ctx context.Context, db DBTX, now *time.Time, olderThan time.Duration, limit int) (int64, error) {
	if dist, err := s.Distributed(ctx, db); err != nil {
		return 0, err
	} else if dist {
		return s.citusPruneLineage(ctx, db, now, olderThan, limit)
	}
	return guarded(ctx, db, s.retention.pruneLineage, affected, Now(now), micros(olderThan), limit)
}

// FinishedStatuses are the states retention deletes.
var FinishedStatuses = []string{StatusSucceeded, StatusFailed, StatusCancelled}

// DeleteFinished deletes up to limit jobs in status (a finished state) whose last
// change (updated_at) is more than olderThan before now and not before from (zero:
// no lower bound), oldest first, and returns how many it deleted and the newest
// updated_at among them: the from of the run's next batch. Pass a pool so that each
// batch commits on its own. On the Citus layout from is not used and newest is zero.
func (s *Store) DeleteFinished(ctx context.Context, db DBTX, now *time.Time, status string, olderThan time.Duration, limit int,
	from time.Time) (deleted int64, newest time.Time, err error) {
	switch status {
	case StatusSucceeded, StatusFailed, StatusCancelled:
	default:
		return 0, time.Time{}, fmt.Errorf("store: retention of %q jobs: not a finished state", status)
	}
	if dist, err := s.Distributed(ctx, db); err != nil {
		return 0, time.Time{}, err
	} else if dist {
		n, err := s.citusDeleteFinished(ctx, db, now, status, olderThan, limit)
		return n, time.Time{}, err
	}
	var lower *time.Time
	if !from.IsZero() {
		lower = &from
	}
	type batch struct {
		n      int64
		newest *time.Time
	}
	b, err := guardedRow(ctx, db, s.retention.deleteFinished, func(r pgx.Row) (batch, error) {
		var b batch
		err := r.Scan(&b.n, &b.newest)
		return b, err
	}, Now(now), status, micros(olderThan), limit, lower)
	if err != nil || b.newest == nil {
		return b.n, time.Time{}, err
	}
	return b.n, *b.newest, nil
}
