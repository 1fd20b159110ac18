package store

// Enqueueing: the insert statements (one job, a batch, COPY) and the follow-up query
// that names the job holding a deduplication key.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

type enqueueStatements struct {
	insert, insertMany, dedupHolders stmt
}

func newEnqueueStatements(b *builder) enqueueStatements {
	return enqueueStatements{
		// Deduplication: ON CONFLICT without a target skips a row that would violate any
		// unique constraint — jobs_dedup_idx on the plain table, the job_dedup table's key
		// (kept by trigger) in partitioned mode, where a conflict target must name an index
		// that includes the partition key. Ids are generated unique, so the primary key
		// never conflicts.
		insert: b.add("insert", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, `+notifyColumn+`)
INSERT INTO {{s}}.jobs (queue, kind, payload, priority, run_at, max_attempts, deduplication_key, metadata, created_at, updated_at)
SELECT $2, $3, $4::jsonb, $5, coalesce($6::timestamptz, t.now + $7::bigint * interval '1 microsecond'), $8, $9, $12::jsonb, t.now, t.now
FROM t
WHERE t.notified >= 0
ON CONFLICT DO NOTHING
RETURNING id`),

		insertMany: b.add("insert_many", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, clock_timestamp() AS ts, `+notifyColumn+`),
input AS MATERIALIZED (
  SELECT {{s}}.uuid_v7((SELECT ts FROM t), i.ord) AS id, i.*
  FROM unnest($2::text[], $3::text[], $4::jsonb[], $5::int[], $6::timestamptz[], $7::bigint[], $8::int[], $9::text[], $12::jsonb[])
       WITH ORDINALITY AS i(queue, kind, payload, priority, run_at, delay_us, max_attempts, dedup, metadata, ord)
),
ins AS (
  INSERT INTO {{s}}.jobs (id, queue, kind, payload, priority, run_at, max_attempts, deduplication_key, metadata, created_at, updated_at)
  SELECT input.id, queue, kind, payload, priority, coalesce(run_at, t.now + delay_us * interval '1 microsecond'),
         max_attempts, dedup, metadata, t.now, t.now
  FROM input, t
  WHERE t.notified >= 0
  ORDER BY ord
  ON CONFLICT DO NOTHING
  RETURNING id
)
SELECT input.id, ins.id IS NOT NULL FROM input LEFT JOIN ins ON ins.id = input.id ORDER BY input.ord`),

		dedupHolders: b.add("dedup_holders", `
SELECT j.kind, j.deduplication_key, j.id
FROM {{s}}.jobs j JOIN unnest($1::text[], $2::text[]) AS k(kind, key)
  ON j.kind = k.kind AND j.deduplication_key = k.key`),
	}
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
	Metadata    []byte // a JSON object, or nil for none
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
	err := db.QueryRow(ctx, s.enqueue.insert.sql, Now(now), p.Queue, p.Kind, string(p.Payload), p.Priority,
		p.RunAt, micros(p.Delay), p.MaxAttempts, p.DedupKey, ch, qs, jsonOrNil(p.Metadata)).Scan(&id)
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
	keys, metas := make([]*string, n), make([]*string, n)
	for i, p := range ps {
		queues[i], kinds[i], payloads[i] = p.Queue, p.Kind, string(p.Payload)
		prios[i], maxes[i] = int32(p.Priority), int32(p.MaxAttempts)
		runAts[i], delays[i], keys[i], metas[i] = p.RunAt, micros(p.Delay), p.DedupKey, jsonOrNil(p.Metadata)
	}
	ch, qs := nt.args()
	rows, err := db.Query(ctx, s.enqueue.insertMany.sql, Now(now), queues, kinds, payloads, prios, runAts, delays, maxes, keys, ch, qs, metas)
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
	rows, err := db.Query(ctx, s.enqueue.dedupHolders.sql, kinds, keys)
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
	cols := []string{"id", "queue", "kind", "payload", "priority", "max_attempts", "metadata"}
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
		var meta any // NULL unless set
		if p.Metadata != nil {
			meta = json.RawMessage(p.Metadata)
		}
		row := []any{ids[i], p.Queue, p.Kind, json.RawMessage(p.Payload), int32(p.Priority), int32(p.MaxAttempts), meta}
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

// jsonOrNil passes a JSON document as text, and nil as NULL.
func jsonOrNil(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}
