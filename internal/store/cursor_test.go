package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// explainPlan runs sql under EXPLAIN (ANALYZE, BUFFERS) — it really runs — and calls
// visit on every node of its plan.
func explainPlan(t *testing.T, ctx context.Context, db DBTX, visit func(node map[string]any), sql string, args ...any) {
	t.Helper()
	var out []byte
	if err := db.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct{ Plan map[string]any }
	if err := json.Unmarshal(out, &plans); err != nil {
		t.Fatal(err)
	}
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		visit(n)
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	walk(plans[0].Plan)
}

// pinSnapshot holds the xmin horizon until the test ends, as an idle REPEATABLE READ
// session does: a transaction with a snapshot of jobs and an xid.
func pinSnapshot(t *testing.T, ctx context.Context, s *Store, pool *pgxpool.Pool) {
	t.Helper()
	pin, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pin.Rollback(context.Background()) })
	if _, err := pin.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := pin.Exec(ctx, "SELECT txid_current(), count(*) FROM "+s.Table("jobs")); err != nil {
		t.Fatal(err)
	}
}

// nodeBlocks is the buffers a plan node touched.
func nodeBlocks(n map[string]any) float64 {
	return n["Shared Hit Blocks"].(float64) + n["Shared Read Blocks"].(float64)
}

// readyIndexBlocks runs the claim under EXPLAIN (ANALYZE, BUFFERS) — it really claims
// — and returns how many buffers its scans of jobs_ready_idx touched (index and heap).
func readyIndexBlocks(t *testing.T, ctx context.Context, s *Store, db DBTX, p ClaimParams) (blocks float64, claimed int) {
	t.Helper()
	prio, after, lag := p.cursorArgs()
	return explainReady(t, ctx, db, s.lease.claim.sql, nil, p.Queue, "w", micros(time.Minute), p.Limit, prio, after, lag, p.ready())
}

// explainReady runs sql under EXPLAIN (ANALYZE, BUFFERS) (explainPlan) and returns the
// buffers its scans of jobs_ready_idx touched (index and heap) and the rows it wrote
// to jobs.
func explainReady(t *testing.T, ctx context.Context, db DBTX, sql string, args ...any) (blocks float64, written int) {
	t.Helper()
	explainPlan(t, ctx, db, func(n map[string]any) {
		if n["Index Name"] == "jobs_ready_idx" {
			blocks += nodeBlocks(n)
		}
		if n["Node Type"] == "ModifyTable" && n["Relation Name"] == "jobs" {
			written = int(n["Actual Rows"].(float64))
		}
	}, sql, args...)
	return blocks, written
}

// claimUnderPin inserts 3,000 pending jobs (concurrency keys key0 to key49), pins the
// horizon, and claims all but 100 of them in claims of 100 through claim, which
// returns how many it took and where the next claim resumes. Then it measures with
// blocks the buffers what (the scans of jobs_ready_idx a claim makes) touches for a
// claim of 10 from that cursor and from the head, and fails unless the cursor's are at
// most a fifth. It returns the cursor.
func claimUnderPin(t *testing.T, ctx context.Context, s *Store, pool *pgxpool.Pool, what string,
	claim func(after *ClaimCursor) (int, *ClaimCursor), blocks func(p ClaimParams) (float64, int)) *ClaimCursor {
	t.Helper()
	const n = 3000
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, run_at, concurrency_key)
SELECT 'k', '{}', now() - interval '1 hour' + g * interval '1 millisecond', 'key' || g % 50 FROM generate_series(1, $1) g`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+s.Table("jobs")); err != nil {
		t.Fatal(err)
	}
	pinSnapshot(t, ctx, s, pool)
	var cursor *ClaimCursor
	for taken := 0; taken < n-100; {
		got, next := claim(cursor)
		if got != 100 {
			t.Fatalf("claim took %d jobs, want 100", got)
		}
		cursor = next
		taken += got
	}
	p := ClaimParams{Queue: "default", Limit: 10, Lag: time.Second}
	p.After = cursor
	fromCursor, got := blocks(p)
	if got != 10 {
		t.Fatalf("cursor claim took %d jobs, want 10", got)
	}
	p.After = nil
	fromHead, got := blocks(p)
	if got != 10 {
		t.Fatalf("head claim took %d jobs, want 10", got)
	}
	t.Logf("buffers read by %s after %d claimed jobs: from the head %.0f, from the cursor %.0f", what, n-100, fromHead, fromCursor)
	if fromHead < 50 || fromCursor*5 > fromHead {
		t.Fatalf("from the head %.0f buffers, from the cursor %.0f: want the cursor's at most a fifth", fromHead, fromCursor)
	}
	return cursor
}

// plainClaimUnderPin makes a schema and runs claimUnderPin in it with the plain claim
// (Store.Claim) from its cursor. It returns the store, the pool and the cursor.
func plainClaimUnderPin(t *testing.T, ctx context.Context) (*Store, *pgxpool.Pool, *ClaimCursor) {
	t.Helper()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	return s, pool, claimUnderPin(t, ctx, s, pool, "the ready-index scans", func(after *ClaimCursor) (int, *ClaimCursor) {
		jobs, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 100, Lease: time.Minute,
			After: after, Lag: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			return 0, after
		}
		return len(jobs), CursorOf(jobs[len(jobs)-1])
	}, func(p ClaimParams) (float64, int) { return readyIndexBlocks(t, ctx, s, pool, p) })
}

// insertJobAt inserts a pending job of the default queue due at runAt (an SQL
// expression over args) and returns its id.
func insertJobAt(t *testing.T, ctx context.Context, s *Store, pool *pgxpool.Pool, runAt string, args ...any) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, run_at)
VALUES ('k', '{}', `+runAt+`) RETURNING id`, args...).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestClaimCursorUnderPinnedSnapshot: with a snapshot held open (vacuum and index
// entry killing stopped), a claim from the index head walks every job claimed since,
// and a claim from the cursor does not. Then what lies behind the cursor: ClaimHead
// finds it, the cursor's claim leaves it, a head claim takes it.
func TestClaimCursorUnderPinnedSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, cursor := plainClaimUnderPin(t, ctx)

	// A job behind the cursor (an old run_at, as a late-committing enqueue leaves).
	behind := insertJobAt(t, ctx, s, pool, "now() - interval '2 hours'")
	head, at, err := s.ClaimHead(ctx, pool, nil, "default")
	if err != nil || head == nil {
		t.Fatalf("ClaimHead: %v, %v", head, err)
	}
	if !head.RunAt.Before(cursor.RunAt) || at.IsZero() {
		t.Fatalf("ClaimHead = %+v at %v; want the job behind the cursor %+v", head, at, cursor)
	}
	jobs, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 1000, Lease: time.Minute,
		After: cursor, Lag: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.ID == behind {
			t.Fatal("the cursor's claim took the job behind it")
		}
	}
	jobs, err = s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 1, Lease: time.Minute})
	if err != nil || len(jobs) != 1 || jobs[0].ID != behind {
		t.Fatalf("head claim: %v, %v; want the job behind the cursor", jobs, err)
	}
	if head, _, err := s.ClaimHead(ctx, pool, nil, "default"); err != nil || head != nil {
		t.Fatalf("ClaimHead on an empty queue: %+v, %v", head, err)
	}
}

// TestClaimCursorKeepsPriorityOrder: a claim from a cursor still takes higher
// priorities first and lower ones last, each from the floor on.
func TestClaimCursorKeepsPriorityOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, priority, run_at)
SELECT 'k', '{}', p, now() - interval '1 minute' + g * interval '1 second'
FROM generate_series(1, 10) g, (VALUES (-1), (0), (5)) v(p)`); err != nil {
		t.Fatal(err)
	}
	var floor time.Time
	if err := pool.QueryRow(ctx, `SELECT run_at FROM `+s.Table("jobs")+` WHERE priority = 0 ORDER BY run_at OFFSET 4 LIMIT 1`).Scan(&floor); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 100, Lease: time.Minute,
		After: &ClaimCursor{Priority: 0, RunAt: floor}, Lag: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Lag of an hour: the floor is an hour ago, so all 30 are in range, in claim order.
	if len(jobs) != 30 || jobs[0].Priority != 5 || jobs[10].Priority != 0 || jobs[29].Priority != -1 {
		t.Fatalf("claimed %d jobs, priorities %d, %d, %d", len(jobs), jobs[0].Priority, jobs[10].Priority, jobs[len(jobs)-1].Priority)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+s.Table("jobs")+` SET status = 'pending', lease_until = NULL, lease_token = NULL`); err != nil {
		t.Fatal(err)
	}
	jobs, err = s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 100, Lease: time.Minute,
		After: &ClaimCursor{Priority: 0, RunAt: floor}, Lag: 0})
	if err != nil {
		t.Fatal(err)
	}
	// The floor is the cursor's run_at (the fifth job's): jobs 5..10 of each priority, in claim order.
	if len(jobs) != 18 || jobs[0].Priority != 5 || jobs[6].Priority != 0 || jobs[17].Priority != -1 {
		t.Fatalf("claimed %d jobs from the floor", len(jobs))
	}
	for _, j := range jobs {
		if j.RunAt.Before(floor) {
			t.Fatalf("claimed a job before the floor: %v < %v", j.RunAt, floor)
		}
	}
}

// TestClaimFromTheJobTheHeadCheckFound: the head check's answer is where the next
// claim starts (cursor.go, checkHead), not the index head. Under a pinned snapshot, a
// job behind the cursor but after the claimed jobs' dead entries is taken by a claim
// from its position without reading those entries, which a claim from the head reads
// one by one.
func TestClaimFromTheJobTheHeadCheckFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, cursor := plainClaimUnderPin(t, ctx)

	// Just behind the cursor: after nearly all the claimed jobs' entries.
	behind := insertJobAt(t, ctx, s, pool, "$1::timestamptz - interval '10 milliseconds'", cursor.RunAt)
	head, _, err := s.ClaimHead(ctx, pool, nil, "default")
	if err != nil || head == nil || !head.RunAt.Equal(cursor.RunAt.Add(-10*time.Millisecond)) {
		t.Fatalf("ClaimHead = %+v, %v; want the job 10 ms behind the cursor %+v", head, err, cursor)
	}
	claim := func(db DBTX, after *ClaimCursor) float64 {
		t.Helper()
		blocks, got := readyIndexBlocks(t, ctx, s, db, ClaimParams{Queue: "default", Limit: 1, After: after, Lag: time.Second})
		if got != 1 {
			t.Fatalf("claim from %+v took %d jobs, want the one behind the cursor", after, got)
		}
		return blocks
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fromHead := claim(tx, nil)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	fromFound := claim(pool, head)
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM `+s.Table("jobs")+` WHERE id = $1`, behind).Scan(&status); err != nil || status != "running" {
		t.Fatalf("the job behind the cursor is %q, %v; want running", status, err)
	}
	t.Logf("buffers read by a claim of the job behind the cursor: from the head %.0f, from where the head check found it %.0f", fromHead, fromFound)
	if fromHead < 50 || fromFound*5 > fromHead {
		t.Fatalf("from the head %.0f buffers, from the job found %.0f: want the latter at most a fifth", fromHead, fromFound)
	}
}
