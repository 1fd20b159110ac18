package skiplocktest

// Every SQL statement of skiplocktest. They only read the jobs table of the schema
// under test (columns: internal/migrate/sql), through the DB the caller passes, so a
// transaction's own uncommitted jobs are seen.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
)

const jobColumns = `id::text, queue, kind, payload, status::text, priority, run_at, attempts, max_attempts,
	lease_until, lease_token::text, worker_id, deduplication_key, last_error, created_at, updated_at`

func jobsTable(schema string) string { return ident.Quote(schema) + ".jobs" }

// jobsOfKind returns every job of kind, in enqueue order.
func jobsOfKind(ctx context.Context, db skiplock.DB, schema, kind string) ([]*skiplock.Job, error) {
	rows, err := db.Query(ctx, `SELECT `+jobColumns+` FROM `+jobsTable(schema)+` WHERE kind = $1 ORDER BY id`, kind)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanJob)
}

type kindCount struct {
	Kind  string
	Count int64
}

// kindCounts counts the jobs of every kind, for a failure message.
func kindCounts(ctx context.Context, db skiplock.DB, schema string) ([]kindCount, error) {
	rows, err := db.Query(ctx, `SELECT kind, count(*) FROM `+jobsTable(schema)+` GROUP BY kind ORDER BY kind`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[kindCount])
}

// busyJobs returns up to limit jobs of queues (all queues when none) that a started
// client still has work on: pending jobs due at now (nil: the database's now()) and
// jobs running under workerID.
func busyJobs(ctx context.Context, db skiplock.DB, schema string, queues []string, now *time.Time, workerID string, limit int) ([]*skiplock.Job, error) {
	if queues == nil {
		queues = []string{}
	}
	rows, err := db.Query(ctx, `SELECT `+jobColumns+` FROM `+jobsTable(schema)+`
		WHERE (cardinality($1::text[]) = 0 OR queue = ANY($1::text[]))
		  AND ((status = 'pending' AND run_at <= coalesce($2::timestamptz, now()))
		    OR (status = 'running' AND worker_id = $3))
		ORDER BY id LIMIT $4`, queues, now, workerID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanJob)
}

func scanJob(row pgx.CollectableRow) (*skiplock.Job, error) {
	var (
		j                                    skiplock.Job
		state                                string
		leaseUntil                           *time.Time
		leaseToken, workerID, dedupKey, last *string
	)
	err := row.Scan(&j.ID, &j.Queue, &j.Kind, &j.Payload, &state, &j.Priority, &j.RunAt, &j.Attempt, &j.MaxAttempts,
		&leaseUntil, &leaseToken, &workerID, &dedupKey, &last, &j.CreatedAt, &j.UpdatedAt)
	if err != nil {
		return nil, err
	}
	j.State = skiplock.JobState(state)
	if leaseUntil != nil {
		j.LeaseUntil = *leaseUntil
	}
	for dst, src := range map[*string]*string{&j.LeaseToken: leaseToken, &j.WorkerID: workerID, &j.DeduplicationKey: dedupKey, &j.LastError: last} {
		if src != nil {
			*dst = *src
		}
	}
	return &j, nil
}
