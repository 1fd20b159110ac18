package maint_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/skiplocktest"
)

// The reclaimer's floor: after a pass from the head, passes start at the last pass's
// time less the margin and still reclaim every lease ending after that; a lease
// ending before the floor (as a transaction that began before the last pass and
// committed after it leaves) is reclaimed by the next pass from the head, at most
// maint.ReclaimFullEvery passes later; and a clock that went back sends the next
// pass to the head at once.
func TestReclaimerFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, clock, r := newReclaimer(t)
	running := func(leaseUntil time.Time) string {
		t.Helper()
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, status, lease_token, lease_until, attempts)
VALUES ('k', '{}', 'running', gen_random_uuid(), $1, 1) RETURNING id`, leaseUntil).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	status := func(id string) string {
		t.Helper()
		var st string
		if err := pool.QueryRow(ctx, `SELECT status::text FROM `+s.Table("jobs")+` WHERE id = $1`, id).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	pass := func(at time.Time) maint.ReclaimResult {
		t.Helper()
		clock.Set(at)
		res, err := r.Reclaim(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	if f := maint.StartAt(r, t0); f != nil {
		t.Fatalf("a new reclaimer starts at %v, want the head", f)
	}
	pass(t0)
	if f := maint.StartAt(r, t0.Add(time.Minute)); f == nil || !f.Equal(t0.Add(-maint.ReclaimFloorMargin)) {
		t.Fatalf("after a pass at t0 the next starts at %v, want t0 - %v", f, maint.ReclaimFloorMargin)
	}

	// A lease ending after the floor is reclaimed by the next pass.
	a := running(t0.Add(time.Minute))
	if res := pass(t0.Add(2 * time.Minute)); res.Requeued != 1 || status(a) != "pending" {
		t.Fatalf("pass 2: %+v, job a %s; want it requeued", res, status(a))
	}

	// A lease ending before the floor waits for the pass from the head.
	b := running(t0.Add(-time.Hour))
	at := t0.Add(2 * time.Minute)
	for n := 3; n <= maint.ReclaimFullEvery; n++ {
		at = at.Add(15 * time.Second)
		if res := pass(at); res.Requeued != 0 || status(b) != "running" {
			t.Fatalf("pass %d (from the floor): %+v, job b %s; want it left for the pass from the head", n, res, status(b))
		}
	}
	at = at.Add(15 * time.Second)
	if res := pass(at); res.Requeued != 1 || status(b) != "pending" {
		t.Fatalf("pass %d (from the head): %+v, job b %s; want it requeued", maint.ReclaimFullEvery+1, res, status(b))
	}

	// The clock goes back an hour: the next pass starts at the head.
	back := at.Add(-time.Hour)
	pass(at.Add(15 * time.Second)) // a pass from the floor, so the floor is at its latest
	c := running(back.Add(-time.Minute))
	if res := pass(back); res.Requeued != 1 || status(c) != "pending" {
		t.Fatalf("after the clock went back: %+v, job c %s; want it requeued", res, status(c))
	}
}

// A full batch of expired leases that another transaction holds locked (a handler's
// CompleteTx transaction each, say) ends the pass: the reclaim skips them, and
// listing again would return the same batch for ever. Once the locks are gone, the
// next pass reclaims them.
func TestReclaimerEndsAPassOfLockedLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, _, r := newReclaimer(t)
	const n = 1000 // the reclaimer's batch
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, status, lease_token, lease_until, attempts)
SELECT 'k', '{}', 'running', gen_random_uuid(), $1::timestamptz - i * interval '1 millisecond', 1 FROM generate_series(1, $2) AS i`,
		t0, n); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT 1 FROM `+s.Table("jobs")+` FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a pass that never ends fails here
	defer cancel()
	if res, err := r.Reclaim(tctx, pool); err != nil || res.Requeued != 0 {
		t.Fatalf("a pass over %d locked leases: %+v, %v; want it to end having reclaimed none", n, res, err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Reclaim(ctx, pool); err != nil || res.Requeued != n {
		t.Fatalf("the pass after the locks were gone: %+v, %v; want %d requeued", res, err, n)
	}
}

// t0 is the injected clock's start in the reclaimer's tests.
var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// newReclaimer returns a store on a fresh schema, a pool, a fake clock at t0 and a
// reclaimer using them, with no retry delay.
func newReclaimer(t *testing.T) (*store.Store, *pgxpool.Pool, *skiplocktest.FakeClock, *maint.Reclaimer) {
	t.Helper()
	s, err := store.New(pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	clock := skiplocktest.NewFakeClock(t0)
	return s, pgtest.Pool(t), clock, &maint.Reclaimer{Store: s, Clock: clock, Delay: func(string, int) time.Duration { return 0 }}
}
