package store

// The job row, and the statements that read jobs or change them on an operator's
// behalf (retry, cancel, delete).

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Status values, as in the job_status enum.
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	// StatusClaimed is no job_status value but a reading of one: a running job
	// whose handler has not started (Job.Started false; migration 0016).
	StatusClaimed = "claimed"
	// StatusWaiting (flows.go): a parent waiting for its children, a batch callback.
)

// statusRead is a job's status as people read it, from the columns of alias (with its
// dot, or ""): its job_status, but StatusClaimed for a running job whose handler has
// not started.
func statusRead(alias string) string {
	return `CASE WHEN ` + alias + `status = 'running' AND NOT ` + alias + `started THEN 'claimed' ELSE ` + alias + `status::text END`
}

// Job is a row of the jobs table.
type Job struct {
	ID               string
	Queue            string
	Kind             string
	Payload          []byte
	Status           string
	Priority         int
	RunAt            time.Time
	Attempts         int
	MaxAttempts      int
	LeaseUntil       *time.Time
	LeaseToken       *string
	WorkerID         *string
	DeduplicationKey *string
	LastError        *string
	Metadata         []byte // JSON object, nil when none
	Tags             []string
	Output           []byte // JSON, nil when none
	History          []byte // JSON array of attempt records, nil when none
	TxID             *int64 // the writing transaction's id; nil for jobs older than the column
	AttemptedAt      *time.Time
	ConcurrencyKey   string
	CreatedAt        time.Time
	UpdatedAt        time.Time
	// Started is false while a running job waits for its handler to start (a claim's
	// prefetch beyond the idle executors, a limit slot's successor): the job is
	// claimed, not running (migration 0016). Meaningless unless Status is running.
	Started bool
	// Unblocks is set by claims only: the job has a sequence key, a parent or a batch,
	// so its outcome can make a job ready whose run_at lies behind a claim cursor
	// (see ClaimCursor).
	Unblocks bool
	// SlotOf and SlotToken are set by limited claims only: the job is the successor
	// of this running job (under this lease) of the same worker, and must not start
	// before that job's handler returned.
	SlotOf, SlotToken *string
	// Rated is set by limited claims only: a rate limit counted the job's start at
	// its claim, so its handler must start within RateStartSlack of it.
	Rated bool
}

// jobColumns lists what statements returning jobs select, in scanJob's order.
const jobColumns = `id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
  lease_until, lease_token, worker_id, deduplication_key, last_error, metadata,
  tags, output, attempt_history, txid::text::bigint, attempted_at, concurrency_key, created_at, updated_at, started`

// prefixed returns jobColumns qualified by the table alias p.
func prefixed(p string) string { return prefixedExcept(p, nil) }

// prefixedExcept is prefixed with the named columns replaced by the given
// expressions (in place, so scanJob's order holds).
func prefixedExcept(p string, replace map[string]string) string {
	cols := strings.Split(strings.ReplaceAll(jobColumns, "\n", ""), ",")
	for i, c := range cols {
		c = strings.TrimSpace(c)
		if r, ok := replace[c]; ok {
			cols[i] = r
			continue
		}
		cols[i] = p + "." + c
	}
	return strings.Join(cols, ", ")
}

// claimReturns is what a claim returns of each job: everything a handler reads, but
// not the output and attempt history of earlier attempts (up to MaxHistory records
// and a 64 KiB output per job, read back on every claim for nobody), and then
// whether the job's outcome can make another job ready (Job.Unblocks).
var claimReturns = prefixedExcept("j", map[string]string{"output": "NULL::jsonb", "attempt_history": "NULL::jsonb"}) +
	`, (j.sequence_key IS NOT NULL OR j.parent_id IS NOT NULL OR j.batch_id IS NOT NULL) AS unblocks`

// leanClaimReturns is what the plain claim returns of each job: claimReturns without
// the columns its claimSet writes the same for every job it takes, and which
// collectLeanClaimed fills in from the claim's parameters and its time instead (the
// status, the worker, the lease's end and updated_at), nor the output and attempt
// history claimReturns sends as NULL. Each column costs the server its output
// function and this process its decoding, per job, on the claim, the statement of
// W5's critical path. The txid goes as the xid8 it is (pgx reads it in binary), not
// converted to bigint through text on the server.
const leanClaimReturns = `j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempts, j.max_attempts,
  j.lease_token, j.deduplication_key, j.last_error, j.metadata, j.tags, j.txid, j.attempted_at,
  j.concurrency_key, j.created_at, j.started,
  (j.sequence_key IS NOT NULL OR j.parent_id IS NOT NULL OR j.batch_id IS NOT NULL) AS unblocks`

// collectLeanClaimed collects the rows of a claim that returned leanClaimReturns, under
// a lease of duration lease for worker: each job is running, its worker is worker, and
// its lease ends lease after its claim (attempted_at), which is also its updated_at —
// what claimSet wrote, with the same microseconds.
//
// It decodes as little as it can: the values one claim shares across its jobs (the
// token, the claim's time and so the lease's end, the queue, the kind, the writing
// transaction of a bulk insert, the concurrency key) are read into reused buffers and
// kept once, the jobs pointing at one copy, where scanning each into its own pointer
// cost a reflective allocation per column and job (docs/benchmarks.md, "W5's Go side").
// The jobs are only read after the claim: nobody writes through these pointers.
func collectLeanClaimed(worker string, lease time.Duration) func(rows pgx.Rows, err error) ([]*Job, error) {
	return func(rows pgx.Rows, err error) ([]*Job, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var (
			out   []*Job
			chunk []Job
			d     = time.Duration(micros(lease)) * time.Microsecond
			w     = &worker
			// Each row's raw values, and the last distinct value each became.
			token                     pgtype.UUID
			at                        pgtype.Timestamptz
			txid                      pgtype.Uint64
			dedup, lastErr            pgtype.Text
			queue, kind, key          pgtype.DriverBytes
			lastToken                 [16]byte
			tokenStr                  *string
			atPtr, untilPtr           *time.Time
			txPtr                     *int64
			queueStr, kindStr, keyStr internStr
			dest                      = make([]any, 0, 19) // one for every row
		)
		for rows.Next() {
			if len(chunk) == cap(chunk) {
				chunk = make([]Job, 0, min(max(2*cap(chunk), 1), 256))
			}
			chunk = chunk[:len(chunk)+1]
			j := &chunk[len(chunk)-1]
			dest = append(dest[:0], &j.ID, &queue, &kind, &j.Payload, &j.Priority, &j.RunAt, &j.Attempts, &j.MaxAttempts,
				&token, &dedup, &lastErr, &j.Metadata, &j.Tags, &txid, &at,
				&key, &j.CreatedAt, &j.Started, &j.Unblocks)
			if err := rows.Scan(dest...); err != nil {
				return nil, err
			}
			if !token.Valid || !at.Valid {
				return nil, fmt.Errorf("claim: job %s came back without its lease token or its claim's time", j.ID)
			}
			if tokenStr == nil || token.Bytes != lastToken {
				s := token.String()
				tokenStr, lastToken = &s, token.Bytes
			}
			if atPtr == nil || !at.Time.Equal(*atPtr) {
				t, u := at.Time, at.Time.Add(d)
				atPtr, untilPtr = &t, &u
			}
			if txid.Valid {
				if txPtr == nil || *txPtr != int64(txid.Uint64) {
					v := int64(txid.Uint64) // as txid::text::bigint reads it
					txPtr = &v
				}
				j.TxID = txPtr
			}
			if dedup.Valid {
				v := dedup.String
				j.DeduplicationKey = &v
			}
			if lastErr.Valid {
				v := lastErr.String
				j.LastError = &v
			}
			j.Queue, j.Kind, j.ConcurrencyKey = queueStr.of(queue), kindStr.of(kind), keyStr.of(key)
			j.LeaseToken, j.AttemptedAt, j.LeaseUntil, j.UpdatedAt = tokenStr, atPtr, untilPtr, *atPtr
			j.Status, j.WorkerID = StatusRunning, w
			out = append(out, j)
		}
		return out, rows.Err()
	}
}

// internStr turns bytes into a string, allocating only when they differ from the
// last it returned.
type internStr struct {
	s  string
	ok bool
}

func (x *internStr) of(b []byte) string {
	if !x.ok || x.s != string(b) {
		x.s, x.ok = string(b), true
	}
	return x.s
}

// jobDest appends to d where a row of jobColumns goes in j.
func jobDest(d []any, j *Job) []any {
	return append(d, &j.ID, &j.Queue, &j.Kind, &j.Payload, &j.Status, &j.Priority, &j.RunAt, &j.Attempts,
		&j.MaxAttempts, &j.LeaseUntil, &j.LeaseToken, &j.WorkerID, &j.DeduplicationKey, &j.LastError,
		&j.Metadata, &j.Tags, &j.Output, &j.History, &j.TxID, &j.AttemptedAt, &j.ConcurrencyKey, &j.CreatedAt, &j.UpdatedAt, &j.Started)
}

func scanJob(row pgx.Row) (*Job, error) {
	var j Job
	if err := row.Scan(jobDest(make([]any, 0, 23), &j)...); err != nil {
		return nil, err
	}
	return &j, nil
}

// collectJobRows collects rows of jobColumns, each followed by the columns extra
// appends destinations for (nil: none).
//
// It is the claim's decoding, so it allocates little: jobs come from chunks, and one
// destination slice serves every row. Scanning each row into a fresh Job through a
// fresh destination slice, grown by an append, cost several allocations per row
// before pgx's own; a claim decodes up to 1,000 rows, and the decoding was the
// largest share of the Go side's time, most of it allocation and the collections it
// causes (docs/benchmarks-archive.md, "The claim's token and the Go side's share"). A
// chunk stays reachable while any of its jobs is: the runtime copies what it keeps
// (fromRow), so chunks live no longer than the claim's decoding.
//
// Chunks double from one job up to 256. A larger first chunk would be mostly unused
// when a notification brings one job — the common claim at a low, steady rate —
// while doubling from one costs a claim of 1,000 rows only a few more allocations.
func collectJobRows(rows pgx.Rows, err error, extra func(d []any, j *Job) []any) ([]*Job, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Job
	var chunk []Job
	dest := make([]any, 0, 32)
	for rows.Next() {
		if len(chunk) == cap(chunk) {
			chunk = make([]Job, 0, min(max(2*cap(chunk), 1), 256))
		}
		chunk = chunk[:len(chunk)+1]
		j := &chunk[len(chunk)-1]
		dest = jobDest(dest[:0], j)
		if extra != nil {
			dest = extra(dest, j)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// JobColumns is the select list of a jobs row that CollectJobs decodes, for the
// module's SQL outside the store that reads jobs (skiplocktest's, on the schema under
// test), so that it reads every column the store does, in its order.
const JobColumns = jobColumns

// CollectJobs collects rows of JobColumns.
func CollectJobs(rows pgx.Rows, err error) ([]*Job, error) { return collectJobRows(rows, err, nil) }

// collectClaimed collects the rows of a claim (claimReturns).
func collectClaimed(rows pgx.Rows, err error) ([]*Job, error) {
	return collectJobRows(rows, err, func(d []any, j *Job) []any { return append(d, &j.Unblocks) })
}

type jobStatements struct {
	get, list, byTx, runNow              stmt
	adminRetry, adminCancel, adminDelete stmt
}

func newJobStatements(b *builder) jobStatements {
	return jobStatements{
		get: b.addGuarded(planGuardOn, "get", `SELECT `+jobColumns+` FROM {{s}}.jobs WHERE id = $1`),

		// Keyset paging by id: ids are time-ordered, so pages come oldest first. Planned
		// for the filters given (planCustom); the states as the column's own type, so
		// that a state implies its partial indexes' predicates.
		list: b.addGuarded(planCustom, "list", `
SELECT `+jobColumns+` FROM {{s}}.jobs
WHERE `+jobFilters("", "$1", "$9", "$2", "$3", "$6", "$7", "$8").all()+`
  AND ($4::uuid IS NULL OR id > $4)
ORDER BY id
LIMIT $5`),

		// Everything one transaction wrote: one range of the lineage table's index, then
		// the jobs by primary key.
		byTx: b.addGuarded(planGuardOn, "jobs_by_tx", `
SELECT `+jobColumns+` FROM {{s}}.jobs
WHERE id = ANY(ARRAY(`+lineageJobIDs+`))
ORDER BY id`),

		// Run a pending job now (an operator's "run now").
		runNow: b.addGuarded(planGuardOn, "admin_run_now", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.jobs AS j SET run_at = t.now, updated_at = t.now
FROM t WHERE j.id = $2 AND j.status = 'pending'
RETURNING `+prefixed("j")),

		// A human retries a failed or cancelled job: due now, with at least one attempt left.
		adminRetry: b.addGuarded(planGuardOn, "admin_retry", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.jobs AS j
SET status = 'pending', run_at = t.now, max_attempts = greatest(j.max_attempts, j.attempts + 1), updated_at = t.now
FROM t
WHERE j.id = $2 AND j.status IN ('failed', 'cancelled')
RETURNING `+prefixed("j")),

		// A human cancels a pending, waiting or running job. A running job loses its
		// lease: its worker's next heartbeat fails, its context is cancelled, and its
		// outcome is fenced out. A waiting parent's cancellation cancels its children
		// that have not started (the trigger jobs_flow_cascade).
		adminCancel: b.addGuarded(planGuardOn, "admin_cancel", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.jobs AS j
SET status = 'cancelled', lease_until = NULL, lease_token = NULL, worker_id = NULL,
    last_error = coalesce($3, 'cancelled by an operator'), updated_at = t.now
FROM t
WHERE j.id = $2 AND j.status IN ('pending', 'running', 'waiting')
RETURNING `+prefixed("j")),

		adminDelete: b.addGuarded(planGuardOn, "admin_delete", `DELETE FROM {{s}}.jobs WHERE id = $1 AND status <> 'running' RETURNING `+jobColumns),
	}
}

// Get returns one job, or pgx.ErrNoRows.
func (s *Store) Get(ctx context.Context, db DBTX, id string) (*Job, error) {
	return guardedRow(ctx, db, s.jobs.get, scanJob, id)
}

// ListParams filter and page a job listing. Zero values mean "any".
type ListParams struct {
	// Statuses are job_status values, and StatusClaimed: running jobs whose handler
	// has not started (StatusRunning then means the started ones only).
	Statuses []string
	Queue    string
	Kind     string
	AfterID  string
	Limit    int
	Tag      string // jobs carrying this tag
	Search   string // text in the payload or last_error, case-insensitive
	Metadata []byte // a JSON object the job's metadata must contain, or nil
}

// List returns jobs matching p, ordered by id (oldest first).
func (s *Store) List(ctx context.Context, db DBTX, p ListParams) ([]*Job, error) {
	statuses, started := p.statusArgs()
	return guarded(ctx, db, s.jobs.list, CollectJobs, statuses, nullable(p.Queue), nullable(p.Kind), nullable(p.AfterID), p.Limit,
		nullable(p.Tag), nullable(p.Search), jsonOrNil(p.Metadata), started)
}

// statusArgs are the listing statements' state parameters for p.Statuses: the
// job_status values (nil: any), StatusClaimed read as running, and whether a running
// job's handler must have started (nil: either) — true when running is asked for
// without claimed, false for claimed without running.
func (p ListParams) statusArgs() (statuses []string, started *bool) {
	claimed, running := false, false
	for _, st := range p.Statuses {
		switch st {
		case StatusClaimed:
			claimed = true
			continue
		case StatusRunning:
			running = true
		}
		statuses = append(statuses, st)
	}
	if claimed && !running {
		statuses = append(statuses, StatusRunning)
	}
	if claimed != running {
		started = &running
	}
	return statuses, started
}

// lineageJobIDs selects the ids of the jobs the transaction $1 (a txid as bigint)
// wrote, from its lineage rows: a statement that inserted one job recorded its job_id,
// one that inserted more recorded them all in job_ids (migration 0021); an outbox
// event's row has neither.
const lineageJobIDs = `SELECT x.id FROM {{s}}.tx_lineage AS lin
  CROSS JOIN LATERAL unnest(coalesce(lin.job_ids, ARRAY[lin.job_id])) AS x(id)
  WHERE lin.txid = $1::bigint::text::xid8 AND (lin.job_id IS NOT NULL OR lin.job_ids IS NOT NULL)`

// JobsByTx returns the jobs the transaction txid wrote, oldest first.
func (s *Store) JobsByTx(ctx context.Context, db DBTX, txid int64) ([]*Job, error) {
	return guarded(ctx, db, s.jobs.byTx, CollectJobs, txid)
}

// AdminRunNow makes a pending job due now.
func (s *Store) AdminRunNow(ctx context.Context, db DBTX, now *time.Time, id string) (*Job, error) {
	return guardedRow(ctx, db, s.jobs.runNow, scanJob, Now(now), id)
}

// AdminRetry makes a failed or cancelled job pending and due now.
func (s *Store) AdminRetry(ctx context.Context, db DBTX, now *time.Time, id string) (*Job, error) {
	return guardedRow(ctx, db, s.jobs.adminRetry, scanJob, Now(now), id)
}

// AdminCancel cancels a pending, waiting or running job.
func (s *Store) AdminCancel(ctx context.Context, db DBTX, now *time.Time, id, reason string) (*Job, error) {
	return guardedRow(ctx, db, s.jobs.adminCancel, scanJob, Now(now), id, nullable(reason))
}

// AdminDelete deletes a job that is not running.
func (s *Store) AdminDelete(ctx context.Context, db DBTX, id string) (*Job, error) {
	return guardedRow(ctx, db, s.jobs.adminDelete, scanJob, id)
}
