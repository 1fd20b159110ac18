// Package store holds every SQL statement skiplock runs against its jobs table. No
// other package writes SQL for jobs.
//
// Each statement is built once per schema (the schema name is validated and quoted
// when the Store is created) and takes time from a parameter: a nil *time.Time means
// "the database's now()", a non-nil one is an injected clock's reading. That is what
// lets tests expire leases and schedule retries without sleeping.
//
// Every write that finishes a claimed job is conditional on the row still being
// 'running' under the caller's lease token; the statements report which rows they
// changed so callers can tell a lost lease from success. The schema's CHECK
// constraint jobs_lease_iff_running makes "lease_token = $token" imply
// "status = 'running'", so the fenced statements match on (id, lease_token): the
// planner then always reaches rows through the primary key, never by scanning the
// running-jobs index (whose dead entries pile up between vacuums).
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/ident"
)

// DBTX is what the store runs statements on: pgx.Tx, *pgx.Conn, *pgxpool.Pool, or the
// database/sql adapter in the root package.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store builds and runs the statements for one schema.
type Store struct {
	Schema string // unquoted
	q      string // quoted
	sql    map[string]string
}

// New returns a Store for schema, or an *ident.Error if the name is unsafe.
func New(schema string) (*Store, error) {
	if err := ident.Validate("schema", schema); err != nil {
		return nil, err
	}
	s := &Store{Schema: schema, q: ident.Quote(schema), sql: map[string]string{}}
	for name, text := range queries {
		s.sql[name] = strings.ReplaceAll(text, "{{s}}", s.q)
	}
	return s, nil
}

// Table returns the quoted, schema-qualified name of table.
func (s *Store) Table(table string) string { return s.q + "." + ident.Quote(table) }

// SQL returns the named statement for this schema (for packages that extend the store,
// such as the outbox, and for tests that EXPLAIN it).
func (s *Store) SQL(name string) string {
	q, ok := s.sql[name]
	if !ok {
		panic("store: unknown statement " + name)
	}
	return q
}

// Now converts an optional clock reading to the statement parameter.
func Now(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC()
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// Status values, as in the job_status enum.
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

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
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

const jobColumns = `id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
  lease_until, lease_token, worker_id, deduplication_key, last_error, created_at, updated_at`

func prefixed(p string) string {
	cols := strings.Split(strings.ReplaceAll(jobColumns, "\n", ""), ",")
	for i, c := range cols {
		cols[i] = p + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

func scanJob(row pgx.Row) (*Job, error) {
	var j Job
	err := row.Scan(&j.ID, &j.Queue, &j.Kind, &j.Payload, &j.Status, &j.Priority, &j.RunAt, &j.Attempts,
		&j.MaxAttempts, &j.LeaseUntil, &j.LeaseToken, &j.WorkerID, &j.DeduplicationKey, &j.LastError,
		&j.CreatedAt, &j.UpdatedAt)
	if err != nil {
		return nil, err
	}
	return &j, nil
}

func collectJobs(rows pgx.Rows, err error) ([]*Job, error) { return collect(rows, err, scanJob) }

// collect scans every row of a query with scan.
func collect[T any](rows pgx.Rows, err error, scan func(pgx.Row) (*T, error)) ([]*T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// notifyColumn sends one NOTIFY per listed queue ($10 channel, $11 queues) as part of
// the insert statement, so enqueueing costs no extra round trip. The notifications are
// delivered when the enclosing transaction commits, and not at all if it rolls back.
// The statements reference the column so the planner cannot drop it.
const notifyColumn = `(SELECT count(*) FROM (SELECT pg_notify($10, q) FROM unnest($11::text[]) AS q) AS n) AS notified`

// asyncCommit makes the statement's own (autocommit) transaction commit without
// waiting for its WAL to reach disk. Claims and heartbeats use it: they need no
// durability of their own. A claim lost in a server crash leaves the job pending, so
// it runs again — which at-least-once execution already allows — and the lost
// token fences out whatever the first worker writes; a lost heartbeat only shortens
// a lease. Every outcome, in contrast, commits synchronously, and since WAL is
// flushed in order, a durable outcome implies its claim is durable too. This takes
// one disk sync off the path from enqueue to handler start.
const asyncCommit = `set_config('synchronous_commit', 'off', true) AS async`

// finishUpdate is the fenced UPDATE that applies outcomes from the relation o.
// (A redundant "j.id = ANY($2)" was tried to steer the planner to the primary key; it
// let the planner nest a 1,000-element ANY inside a loop over the outcomes, 20× slower
// on the outbox's equivalent statement. A plain join on id measured best.)
// retry → pending after the delay, or failed once attempts are exhausted;
// snooze → pending after the delay with the claim's attempt given back.
func finishUpdate(o string) string {
	if !strings.Contains(o, " AS o(") {
		o += " AS o"
	}
	return `UPDATE {{s}}.jobs AS j
SET status = (CASE o.action
                WHEN 'complete' THEN 'succeeded'
                WHEN 'fail' THEN 'failed'
                WHEN 'cancel' THEN 'cancelled'
                WHEN 'snooze' THEN 'pending'
                ELSE CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END
              END)::{{s}}.job_status,
    run_at = CASE
               WHEN o.action = 'snooze' OR (o.action = 'retry' AND j.attempts < j.max_attempts)
               THEN t.now + o.delay_us * interval '1 microsecond'
               ELSE j.run_at
             END,
    attempts = CASE WHEN o.action = 'snooze' THEN j.attempts - 1 ELSE j.attempts END,
    last_error = CASE WHEN o.action IN ('retry', 'fail', 'cancel') THEN o.error ELSE j.last_error END,
    lease_until = NULL,
    lease_token = NULL,
    worker_id = NULL,
    updated_at = t.now
FROM ` + o + `, t
WHERE j.id = o.id AND j.lease_token = o.token
RETURNING j.id, j.status::text`
}

// Notify names the channel and the queues an insert announces.
type Notify struct {
	Channel string
	Queues  []string
}

func (n *Notify) args() (any, []string) {
	if n == nil || len(n.Queues) == 0 {
		return "", nil
	}
	return n.Channel, n.Queues
}

var queries = map[string]string{
	// Deduplication: ON CONFLICT without a target skips a row that would violate any
	// unique constraint — jobs_dedup_idx on the plain table, the job_dedup table's key
	// (kept by trigger) in partitioned mode, where a conflict target must name an index
	// that includes the partition key. Ids are generated unique, so the primary key
	// never conflicts.
	"insert": `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, ` + notifyColumn + `)
INSERT INTO {{s}}.jobs (queue, kind, payload, priority, run_at, max_attempts, deduplication_key, created_at, updated_at)
SELECT $2, $3, $4::jsonb, $5, coalesce($6::timestamptz, t.now + $7::bigint * interval '1 microsecond'), $8, $9, t.now, t.now
FROM t
WHERE t.notified >= 0
ON CONFLICT DO NOTHING
RETURNING id`,

	"insert_many": `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, clock_timestamp() AS ts, ` + notifyColumn + `),
input AS MATERIALIZED (
  SELECT {{s}}.uuid_v7((SELECT ts FROM t), i.ord) AS id, i.*
  FROM unnest($2::text[], $3::text[], $4::jsonb[], $5::int[], $6::timestamptz[], $7::bigint[], $8::int[], $9::text[])
       WITH ORDINALITY AS i(queue, kind, payload, priority, run_at, delay_us, max_attempts, dedup, ord)
),
ins AS (
  INSERT INTO {{s}}.jobs (id, queue, kind, payload, priority, run_at, max_attempts, deduplication_key, created_at, updated_at)
  SELECT input.id, queue, kind, payload, priority, coalesce(run_at, t.now + delay_us * interval '1 microsecond'),
         max_attempts, dedup, t.now, t.now
  FROM input, t
  WHERE t.notified >= 0
  ORDER BY ord
  ON CONFLICT DO NOTHING
  RETURNING id
)
SELECT input.id, ins.id IS NOT NULL FROM input LEFT JOIN ins ON ins.id = input.id ORDER BY input.ord`,

	"dedup_holders": `
SELECT j.kind, j.deduplication_key, j.id
FROM {{s}}.jobs j JOIN unnest($1::text[], $2::text[]) AS k(kind, key)
  ON j.kind = k.kind AND j.deduplication_key = k.key`,

	// The claim: lock up to $5 due pending jobs of one queue in index order, skipping
	// rows other claimers hold, and lease them under a fresh token in the same statement.
	"claim": `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, ` + asyncCommit + `),
claimed AS (
  SELECT id FROM {{s}}.jobs
  WHERE status = 'pending' AND queue = $2 AND run_at <= (SELECT now FROM t)
  ORDER BY priority DESC, run_at, id
  LIMIT $5
  FOR UPDATE SKIP LOCKED
)
UPDATE {{s}}.jobs AS j
SET status = 'running',
    attempts = j.attempts + 1,
    lease_until = t.now + $4::bigint * interval '1 microsecond',
    lease_token = gen_random_uuid(),
    worker_id = $3,
    updated_at = t.now
FROM t
WHERE j.id = ANY(ARRAY(SELECT id FROM claimed)) AND t.async IS NOT NULL
RETURNING ` + prefixed("j"),

	// Heartbeat renews every listed lease that is still held and unexpired. It never
	// touches the token.
	"heartbeat": `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, ` + asyncCommit + `)
UPDATE {{s}}.jobs AS j
SET lease_until = t.now + $4::bigint * interval '1 microsecond',
    updated_at = t.now
FROM unnest($2::uuid[], $3::uuid[]) AS h(id, token), t
WHERE j.id = h.id AND j.lease_token = h.token AND j.lease_until > t.now AND t.async IS NOT NULL
RETURNING j.id`,

	// Finish applies many outcomes at once, each fenced by its lease token.
	// retry: pending after the delay, or failed once attempts are exhausted.
	// snooze: pending after the delay and the claim's attempt given back.
	"finish": `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
` + finishUpdate("unnest($2::uuid[], $3::uuid[], $4::text[], $5::bigint[], $6::text[]) AS o(id, token, action, delay_us, error)"),

	// finish_delete is finish for clients that delete succeeded jobs at once instead
	// of keeping them for retention: completions become fenced DELETEs, the other
	// outcomes the same UPDATE as finish.
	"finish_delete": `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
o AS (SELECT * FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::bigint[], $6::text[]) AS o(id, token, action, delay_us, error)),
del AS (
  DELETE FROM {{s}}.jobs AS j USING o
  WHERE o.action = 'complete' AND j.id = o.id AND j.lease_token = o.token
  RETURNING j.id
),
upd AS (` + finishUpdate("(SELECT * FROM o WHERE action <> 'complete')") + `)
SELECT id, 'succeeded' FROM del UNION ALL SELECT * FROM upd`,

	"expired": `
SELECT id, lease_token, kind, attempts, max_attempts
FROM {{s}}.jobs
WHERE status = 'running' AND lease_until < coalesce($1::timestamptz, now())
ORDER BY lease_until
LIMIT $2`,

	// Reclaim returns expired leases to pending after the retry delay, or fails them at
	// max_attempts. Fenced by token and by the lease still being expired, so a job whose
	// worker heartbeated in the meantime is left alone.
	"reclaim": `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.jobs AS j
SET status = (CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END)::{{s}}.job_status,
    run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                  ELSE t.now + r.delay_us * interval '1 microsecond' END,
    last_error = 'lease expired on worker ' || coalesce(j.worker_id, '?') || ' (attempt ' || j.attempts || ')',
    lease_until = NULL,
    lease_token = NULL,
    worker_id = NULL,
    updated_at = t.now
FROM unnest($2::uuid[], $3::uuid[], $4::bigint[]) AS r(id, token, delay_us), t
WHERE j.id = r.id AND j.lease_token = r.token AND j.status = 'running' AND j.lease_until < t.now
RETURNING j.id, j.status::text`,

	"get": `SELECT ` + jobColumns + ` FROM {{s}}.jobs WHERE id = $1`,

	"finished": `
SELECT id, status::text, attempts, coalesce(last_error, ''), lease_token IS NOT NULL
FROM {{s}}.jobs WHERE id = ANY($1::uuid[])`,

	// Keyset paging by id: ids are time-ordered, so pages come oldest first.
	"list": `
SELECT ` + jobColumns + ` FROM {{s}}.jobs
WHERE ($1::text[] IS NULL OR status::text = ANY($1))
  AND ($2::text IS NULL OR queue = $2)
  AND ($3::text IS NULL OR kind = $3)
  AND ($4::uuid IS NULL OR id > $4)
ORDER BY id
LIMIT $5`,

	// A human retries a failed or cancelled job: due now, with at least one attempt left.
	"admin_retry": `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.jobs AS j
SET status = 'pending', run_at = t.now, max_attempts = greatest(j.max_attempts, j.attempts + 1), updated_at = t.now
FROM t
WHERE j.id = $2 AND j.status IN ('failed', 'cancelled')
RETURNING ` + prefixed("j"),

	// A human cancels a pending or running job. A running job loses its lease: its
	// worker's next heartbeat fails, its context is cancelled, and its outcome is fenced out.
	"admin_cancel": `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.jobs AS j
SET status = 'cancelled', lease_until = NULL, lease_token = NULL, worker_id = NULL,
    last_error = coalesce($3, 'cancelled by an operator'), updated_at = t.now
FROM t
WHERE j.id = $2 AND j.status IN ('pending', 'running')
RETURNING ` + prefixed("j"),

	"admin_delete": `DELETE FROM {{s}}.jobs WHERE id = $1 AND status <> 'running' RETURNING ` + jobColumns,
}

// InsertParams describe one job to insert.
type InsertParams struct {
	Queue       string
	Kind        string
	Payload     []byte
	Priority    int
	RunAt       *time.Time    // absolute; wins over Delay
	Delay       time.Duration // relative to the statement's now
	MaxAttempts int
	DedupKey    *string
}

// InsertResult tells whether a job was inserted, and its id (or the id of the job
// already holding the deduplication key).
type InsertResult struct {
	ID       string
	Inserted bool
}

// Insert adds one job.
func (s *Store) Insert(ctx context.Context, db DBTX, now *time.Time, p InsertParams, n *Notify) (InsertResult, error) {
	var id string
	ch, qs := n.args()
	err := db.QueryRow(ctx, s.sql["insert"], Now(now), p.Queue, p.Kind, string(p.Payload), p.Priority,
		p.RunAt, micros(p.Delay), p.MaxAttempts, p.DedupKey, ch, qs).Scan(&id)
	if err == nil {
		return InsertResult{ID: id, Inserted: true}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return InsertResult{}, err
	}
	holders, err := s.dedupHolders(ctx, db, []string{p.Kind}, []string{*p.DedupKey})
	if err != nil {
		return InsertResult{}, err
	}
	return InsertResult{ID: holders[[2]string{p.Kind, *p.DedupKey}]}, nil
}

// InsertMany adds a batch in one statement; results are in input order.
func (s *Store) InsertMany(ctx context.Context, db DBTX, now *time.Time, ps []InsertParams, nt *Notify) ([]InsertResult, error) {
	n := len(ps)
	queues, kinds, payloads := make([]string, n), make([]string, n), make([]string, n)
	prios, maxes := make([]int32, n), make([]int32, n)
	runAts, delays := make([]*time.Time, n), make([]int64, n)
	keys := make([]*string, n)
	for i, p := range ps {
		queues[i], kinds[i], payloads[i] = p.Queue, p.Kind, string(p.Payload)
		prios[i], maxes[i] = int32(p.Priority), int32(p.MaxAttempts)
		runAts[i], delays[i], keys[i] = p.RunAt, micros(p.Delay), p.DedupKey
	}
	ch, qs := nt.args()
	rows, err := db.Query(ctx, s.sql["insert_many"], Now(now), queues, kinds, payloads, prios, runAts, delays, maxes, keys, ch, qs)
	if err != nil {
		return nil, err
	}
	out := make([]InsertResult, 0, n)
	for rows.Next() {
		var r InsertResult
		if err := rows.Scan(&r.ID, &r.Inserted); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, fmt.Errorf("store: inserted %d results for %d jobs", len(out), n)
	}
	var dk, dv []string
	for i, r := range out {
		if !r.Inserted {
			dk, dv = append(dk, ps[i].Kind), append(dv, *ps[i].DedupKey)
		}
	}
	if len(dk) == 0 {
		return out, nil
	}
	holders, err := s.dedupHolders(ctx, db, dk, dv)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if !out[i].Inserted {
			out[i].ID = holders[[2]string{ps[i].Kind, *ps[i].DedupKey}]
		}
	}
	return out, nil
}

func (s *Store) dedupHolders(ctx context.Context, db DBTX, kinds, keys []string) (map[[2]string]string, error) {
	rows, err := db.Query(ctx, s.sql["dedup_holders"], kinds, keys)
	if err != nil {
		return nil, fmt.Errorf("finding deduplication key holders: %w", err)
	}
	defer rows.Close()
	m := map[[2]string]string{}
	for rows.Next() {
		var k, v, id string
		if err := rows.Scan(&k, &v, &id); err != nil {
			return nil, err
		}
		m[[2]string{k, v}] = id
	}
	return m, rows.Err()
}

// ClaimParams describe one claim.
type ClaimParams struct {
	Queue    string
	WorkerID string
	Limit    int
	Lease    time.Duration
}

// Claim leases up to p.Limit due jobs of one queue. Rows come back in claim order
// (priority, then run_at, then id).
func (s *Store) Claim(ctx context.Context, db DBTX, now *time.Time, p ClaimParams) ([]*Job, error) {
	jobs, err := collectJobs(db.Query(ctx, s.sql["claim"], Now(now), p.Queue, p.WorkerID, micros(p.Lease), p.Limit))
	if err != nil {
		return nil, err
	}
	SortClaimOrder(jobs)
	return jobs, nil
}

// SortClaimOrder sorts jobs as the claim's ORDER BY does (UPDATE … RETURNING does not
// keep the CTE's order).
func SortClaimOrder(jobs []*Job) {
	less := func(a, b *Job) bool {
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if !a.RunAt.Equal(b.RunAt) {
			return a.RunAt.Before(b.RunAt)
		}
		return a.ID < b.ID
	}
	// insertion sort: claim batches are small and usually nearly sorted
	for i := 1; i < len(jobs); i++ {
		for k := i; k > 0 && less(jobs[k], jobs[k-1]); k-- {
			jobs[k], jobs[k-1] = jobs[k-1], jobs[k]
		}
	}
}

// Lease identifies a claimed job and the token its claim received.
type Lease struct {
	ID    string
	Token string
}

// Heartbeat renews the given leases for d and returns the ids it renewed; a missing id
// means that lease is lost.
func (s *Store) Heartbeat(ctx context.Context, db DBTX, now *time.Time, leases []Lease, d time.Duration) (map[string]bool, error) {
	ids, tokens := splitLeases(leases)
	rows, err := db.Query(ctx, s.sql["heartbeat"], Now(now), ids, tokens, micros(d))
	if err != nil {
		return nil, err
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(renewed))
	for _, id := range renewed {
		m[id] = true
	}
	return m, nil
}

func splitLeases(leases []Lease) (ids, tokens []string) {
	ids, tokens = make([]string, len(leases)), make([]string, len(leases))
	for i, l := range leases {
		ids[i], tokens[i] = l.ID, l.Token
	}
	return ids, tokens
}

// Action is what a worker reports for a claimed job.
type Action string

// The outcomes Finish accepts.
const (
	ActionComplete Action = "complete"
	ActionRetry    Action = "retry"
	ActionFail     Action = "fail"
	ActionSnooze   Action = "snooze"
	ActionCancel   Action = "cancel"
)

// Outcome is one job's result, fenced by its lease.
type Outcome struct {
	Lease
	Action Action
	Delay  time.Duration // retry and snooze
	Error  string        // retry, fail, cancel
}

// Finish applies outcomes in one statement and returns, for each job it changed, the
// status it now has. A job missing from the map had lost its lease: nothing was written.
func (s *Store) Finish(ctx context.Context, db DBTX, now *time.Time, outs []Outcome) (map[string]string, error) {
	return s.finish(ctx, db, now, outs, "finish")
}

// FinishDeleting is Finish, but a completed job is deleted instead of kept as
// succeeded.
func (s *Store) FinishDeleting(ctx context.Context, db DBTX, now *time.Time, outs []Outcome) (map[string]string, error) {
	return s.finish(ctx, db, now, outs, "finish_delete")
}

func (s *Store) finish(ctx context.Context, db DBTX, now *time.Time, outs []Outcome, stmt string) (map[string]string, error) {
	n := len(outs)
	ids, tokens, actions, delays, errs := make([]string, n), make([]string, n), make([]string, n), make([]int64, n), make([]*string, n)
	for i, o := range outs {
		ids[i], tokens[i], actions[i], delays[i] = o.ID, o.Token, string(o.Action), micros(o.Delay)
		if o.Error != "" {
			e := o.Error
			errs[i] = &e
		}
	}
	rows, err := db.Query(ctx, s.sql[stmt], Now(now), ids, tokens, actions, delays, errs)
	if err != nil {
		return nil, err
	}
	return collectStatuses(rows)
}

func collectStatuses(rows pgx.Rows) (map[string]string, error) {
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		m[id] = st
	}
	return m, rows.Err()
}

// Expired is a running job whose lease has run out.
type Expired struct {
	Lease
	Kind        string
	Attempts    int
	MaxAttempts int
}

// ListExpired returns up to limit jobs whose lease expired, oldest expiry first.
func (s *Store) ListExpired(ctx context.Context, db DBTX, now *time.Time, limit int) ([]Expired, error) {
	rows, err := db.Query(ctx, s.sql["expired"], Now(now), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Expired
	for rows.Next() {
		var e Expired
		if err := rows.Scan(&e.ID, &e.Token, &e.Kind, &e.Attempts, &e.MaxAttempts); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Reclaim returns the given expired leases to the queue with their delays (or fails
// them at max attempts); it returns the new status of each job it changed.
func (s *Store) Reclaim(ctx context.Context, db DBTX, now *time.Time, leases []Lease, delays []time.Duration) (map[string]string, error) {
	ids, tokens := splitLeases(leases)
	us := make([]int64, len(delays))
	for i, d := range delays {
		us[i] = micros(d)
	}
	rows, err := db.Query(ctx, s.sql["reclaim"], Now(now), ids, tokens, us)
	if err != nil {
		return nil, err
	}
	return collectStatuses(rows)
}

// Get returns one job, or pgx.ErrNoRows.
func (s *Store) Get(ctx context.Context, db DBTX, id string) (*Job, error) {
	return scanJob(db.QueryRow(ctx, s.sql["get"], id))
}

// ListParams filter and page a job listing. Zero values mean "any".
type ListParams struct {
	Statuses []string
	Queue    string
	Kind     string
	AfterID  string
	Limit    int
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// List returns jobs matching p, ordered by id (oldest first).
func (s *Store) List(ctx context.Context, db DBTX, p ListParams) ([]*Job, error) {
	var statuses []string
	if len(p.Statuses) > 0 {
		statuses = p.Statuses
	}
	return collectJobs(db.Query(ctx, s.sql["list"], statuses, nullable(p.Queue), nullable(p.Kind), nullable(p.AfterID), p.Limit))
}

// AdminRetry makes a failed or cancelled job pending and due now.
func (s *Store) AdminRetry(ctx context.Context, db DBTX, now *time.Time, id string) (*Job, error) {
	return scanJob(db.QueryRow(ctx, s.sql["admin_retry"], Now(now), id))
}

// AdminCancel cancels a pending or running job.
func (s *Store) AdminCancel(ctx context.Context, db DBTX, now *time.Time, id, reason string) (*Job, error) {
	return scanJob(db.QueryRow(ctx, s.sql["admin_cancel"], Now(now), id, nullable(reason)))
}

// AdminDelete deletes a job that is not running.
func (s *Store) AdminDelete(ctx context.Context, db DBTX, id string) (*Job, error) {
	return scanJob(db.QueryRow(ctx, s.sql["admin_delete"], id))
}

// Copier is satisfied by pgx.Tx, *pgx.Conn and *pgxpool.Pool.
type Copier interface {
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error)
}

// CopyInsert writes a batch of jobs without deduplication keys with COPY, the fastest
// path PostgreSQL offers. ids are generated by the caller (time-ordered). With
// withRunAt every row's RunAt must be set; otherwise run_at takes its default, the
// database's now(). A non-nil now sets created_at and updated_at (an injected
// clock); nil leaves them to the database.
func (s *Store) CopyInsert(ctx context.Context, db Copier, ids [][16]byte, ps []InsertParams, withRunAt bool, now *time.Time) error {
	cols := []string{"id", "queue", "kind", "payload", "priority", "max_attempts"}
	if withRunAt {
		cols = append(cols, "run_at")
	}
	if now != nil {
		cols = append(cols, "created_at", "updated_at")
	}
	i := -1
	src := pgx.CopyFromFunc(func() ([]any, error) {
		i++
		if i >= len(ps) {
			return nil, nil
		}
		p := &ps[i]
		row := []any{ids[i], p.Queue, p.Kind, json.RawMessage(p.Payload), int32(p.Priority), int32(p.MaxAttempts)}
		if withRunAt {
			row = append(row, *p.RunAt)
		}
		if now != nil {
			row = append(row, *now, *now)
		}
		return row, nil
	})
	n, err := db.CopyFrom(ctx, pgx.Identifier{s.Schema, "jobs"}, cols, src)
	if err != nil {
		return err
	}
	if int(n) != len(ps) {
		return fmt.Errorf("store: copied %d of %d jobs", n, len(ps))
	}
	return nil
}

// SendNotify announces queues on channel (delivered when db's transaction commits).
func (s *Store) SendNotify(ctx context.Context, db DBTX, n *Notify) error {
	ch, qs := n.args()
	if len(qs) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, "SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q", ch, qs)
	return err
}

// FinishedRow is what Finished reads of a job.
type FinishedRow struct {
	Status    string
	Attempts  int
	LastError string
	Running   bool // still leased
}

// Finished reads the state of the given jobs (absent ids were deleted).
func (s *Store) Finished(ctx context.Context, db DBTX, ids []string) (map[string]FinishedRow, error) {
	rows, err := db.Query(ctx, s.sql["finished"], ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]FinishedRow, len(ids))
	for rows.Next() {
		var id string
		var r FinishedRow
		if err := rows.Scan(&id, &r.Status, &r.Attempts, &r.LastError, &r.Running); err != nil {
			return nil, err
		}
		out[id] = r
	}
	return out, rows.Err()
}
