package store

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// limitedIndexBlocks runs a limited claim's claim and status statements under EXPLAIN
// (ANALYZE, BUFFERS) — the claim really claims — and returns how many buffers their
// scans of jobs_ready_idx touched (index and heap), and how many jobs the claim took.
func limitedIndexBlocks(t *testing.T, ctx context.Context, s *Store, db DBTX, p ClaimParams) (blocks float64, claimed int) {
	t.Helper()
	prio, after, lag := p.cursorArgs()
	blocks, claimed = explainReady(t, ctx, db, s.limits.claim.sql, nil, p.Queue, "w", micros(time.Minute), p.Limit, p.Limit+16,
		uuidArg(nil), uuidArg(nil), prio, after, lag, p.ready())
	status, _ := explainReady(t, ctx, db, s.limits.status.sql, nil, p.Queue, p.Limit, prio, after, lag)
	return blocks + status, claimed
}

// TestLimitedClaimCursorUnderPinnedSnapshot: a limited claim resumes from a cursor as
// the plain claim does (TestClaimCursorUnderPinnedSnapshot). With a snapshot held
// open, its head window and its status read from the index head walk every job
// claimed since (before the cursor, a limited claim of 100 took 6 ms after 10,000
// claimed jobs and 16 ms after 50,000, growing without bound); from the cursor they
// do not.
func TestLimitedClaimCursorUnderPinnedSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "default", Key: "*", MaxRunning: 100}, "c"); err != nil {
		t.Fatal(err)
	}
	claimUnderPin(t, ctx, s, pool, "the limited claim's ready-index scans", func(after *ClaimCursor) (int, *ClaimCursor) {
		res, err := s.ClaimLimited(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 100, Lease: time.Minute,
			After: after, Lag: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.Next == nil {
			t.Fatalf("claim took %d jobs and left none waiting", len(res.Jobs))
		}
		return len(res.Jobs), res.Next
	}, func(p ClaimParams) (float64, int) { return limitedIndexBlocks(t, ctx, s, pool, p) })
}

// TestLimitedClaimNextIsFirstHeldBack: the position a limited claim hands on is the
// first job it left waiting, never one past a job a limit held back, and nil once
// nothing waits.
func TestLimitedClaimNextIsFirstHeldBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	// a1, a2, b1, b2 in claim order; one running job per key.
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, run_at, concurrency_key)
SELECT 'k', '{}', now() - interval '1 hour' + g * interval '1 second', k
FROM unnest(ARRAY['a', 'a', 'b', 'b']) WITH ORDINALITY AS u(k, g)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "default", Key: "*", MaxRunning: 1}, "c"); err != nil {
		t.Fatal(err)
	}
	var cursor *ClaimCursor
	claim := func(wantKeys string, wantWaiting int) []*Job {
		t.Helper()
		res, err := s.ClaimLimited(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 10, Lease: time.Minute,
			After: cursor, Lag: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		keys := ""
		for _, j := range res.Jobs {
			keys += j.ConcurrencyKey
		}
		if keys != wantKeys || res.Waiting != wantWaiting {
			t.Fatalf("claimed keys %q with %d waiting, want %q with %d", keys, res.Waiting, wantKeys, wantWaiting)
		}
		if (res.Next == nil) != (wantWaiting == 0) {
			t.Fatalf("next %v with %d waiting", res.Next, res.Waiting)
		}
		if res.Next != nil {
			cursor = res.Next
		}
		return res.Jobs
	}
	finish := func(j *Job) {
		t.Helper()
		if _, err := s.Finish(ctx, pool, nil, []Outcome{{Lease: Lease{ID: j.ID, Token: *j.LeaseToken}, Action: ActionComplete}}); err != nil {
			t.Fatal(err)
		}
	}
	first := claim("ab", 2) // a2 and b2 held back: the cursor is at a2, before b1
	if cursor.RunAt.After(first[1].RunAt) {
		t.Fatalf("cursor %v passed the held-back a2 (b1 at %v)", cursor.RunAt, first[1].RunAt)
	}
	claim("", 2) // both keys busy: nothing, the cursor stays
	finish(first[0])
	second := claim("a", 1) // a2, from the cursor
	finish(first[1])
	finish(second[0])
	claim("b", 0)
}
