package skiplocktest

// Every SQL statement of skiplocktest. They only read the jobs table of the schema
// under test (columns: internal/migrate/sql), through the DB the caller passes, so a
// transaction's own uncommitted jobs are seen. Jobs are read as the store reads them
// and mapped as the root maps them (jobs), never with a copy of either.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/jobrow"
	"github.com/skiplock/skiplock/internal/store"
)

func jobsTable(schema string) string { return ident.Quote(schema) + ".jobs" }

// jobsOfKind returns every job of kind, in enqueue order.
func jobsOfKind(ctx context.Context, db skiplock.DB, schema, kind string) ([]*skiplock.Job, error) {
	return jobs(db.Query(ctx, `SELECT `+store.JobColumns+` FROM `+jobsTable(schema)+` WHERE kind = $1 ORDER BY id`, kind))
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
	return jobs(db.Query(ctx, `SELECT `+store.JobColumns+` FROM `+jobsTable(schema)+`
		WHERE (cardinality($1::text[]) = 0 OR queue = ANY($1::text[]))
		  AND ((status = 'pending' AND run_at <= coalesce($2::timestamptz, now()))
		    OR (status = 'running' AND worker_id = $3))
		ORDER BY id LIMIT $4`, queues, now, workerID, limit))
}

// jobs decodes rows of store.JobColumns with the store's scan and maps them with the
// root's (internal/jobrow): the one mapping Client.JobGet uses.
func jobs(rows pgx.Rows, err error) ([]*skiplock.Job, error) {
	rs, err := store.CollectJobs(rows, err)
	if err != nil {
		return nil, err
	}
	return jobrow.ToJobs(rs).([]*skiplock.Job), nil
}
