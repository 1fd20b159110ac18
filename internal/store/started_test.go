package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// A claim writes started only for the jobs an idle executor takes at once (the
// first Limit-Waiting in claim order); the others read as claimed until a heartbeat
// records their start. Listings and stats tell the two apart.
func TestClaimWritesWaitingJobsClaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	for range 5 {
		insertJobAt(t, ctx, s, pool, "now() - interval '1 minute'")
	}
	jobs, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 4, Waiting: 3, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 4 {
		t.Fatalf("claimed %d jobs, want 4", len(jobs))
	}
	for i, j := range jobs {
		if want := i == 0; j.Started != want {
			t.Errorf("job %d in claim order: started %v, want %v", i, j.Started, want)
		}
	}
	count := func(statuses ...string) int {
		t.Helper()
		got, err := s.List(ctx, pool, ListParams{Statuses: statuses, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	if r, c, both := count(StatusRunning), count(StatusClaimed), count(StatusRunning, StatusClaimed); r != 1 || c != 3 || both != 4 {
		t.Fatalf("listed running %d, claimed %d, both %d; want 1, 3, 4", r, c, both)
	}
	if p, c := count(StatusPending, StatusClaimed), count(StatusPending, StatusRunning); p != 4 || c != 2 {
		t.Fatalf("listed pending+claimed %d, pending+running %d; want 4, 2", p, c)
	}
	live, err := s.LiveStats(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 || live[0].Running != 1 || live[0].Claimed != 3 {
		t.Fatalf("stats %+v, want 1 running and 3 claimed", live)
	}
	page, err := s.ListPage(ctx, pool, ListParams{Statuses: []string{StatusClaimed}, Limit: 10}, true, 100)
	if err != nil || len(page) != 3 {
		t.Fatalf("page of claimed jobs: %d rows (%v), want 3", len(page), err)
	}
	if n, _, err := s.CountCapped(ctx, pool, ListParams{Statuses: []string{StatusRunning}}, 100); err != nil || n != 1 {
		t.Fatalf("counted %d running (%v), want 1", n, err)
	}

	// A heartbeat records the start of job 1 only; job 2's lease is renewed as it stands.
	leases := []Lease{{ID: jobs[1].ID, Token: *jobs[1].LeaseToken}, {ID: jobs[2].ID, Token: *jobs[2].LeaseToken}}
	if _, err := s.Heartbeat(ctx, pool, nil, leases, time.Minute, []bool{true, false}); err != nil {
		t.Fatal(err)
	}
	if r, c := count(StatusRunning), count(StatusClaimed); r != 2 || c != 2 {
		t.Fatalf("after the heartbeat: running %d, claimed %d; want 2, 2", r, c)
	}
	// A stale token records nothing.
	stale := []Lease{{ID: jobs[3].ID, Token: "00000000-0000-0000-0000-000000000000"}}
	if _, err := s.Heartbeat(ctx, pool, nil, stale, time.Minute, []bool{true}); err != nil {
		t.Fatal(err)
	}
	if c := count(StatusClaimed); c != 2 {
		t.Fatalf("a heartbeat under a stale token changed a job: claimed %d, want 2", c)
	}
	// The next claim of a job writes started afresh: a reclaimed waiting job claimed
	// by a worker with idle executors reads as running.
	if _, err := pool.Exec(ctx, `UPDATE `+s.Table("jobs")+` SET status = 'pending', lease_token = NULL WHERE id = $1`, jobs[3].ID); err != nil {
		t.Fatal(err)
	}
	again, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w2", Limit: 2, Lease: time.Minute})
	if err != nil || len(again) != 2 || !again[0].Started || !again[1].Started {
		t.Fatalf("second claim: %d jobs (%v), want 2 started", len(again), err)
	}
}

// The limited claim writes started the same way, and a successor (a limit slot's
// handoff) always waits.
func TestLimitedClaimWritesWaitingJobsClaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("limits")+` (scope, target, key, max_running) VALUES ('queue', 'default', '', 3)`); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		insertJobAt(t, ctx, s, pool, "now() - interval '1 minute'")
	}
	res, err := s.ClaimLimited(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 3, Waiting: 1, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 3 || !res.Jobs[0].Started || !res.Jobs[1].Started || res.Jobs[2].Started {
		var got []bool
		for _, j := range res.Jobs {
			got = append(got, j.Started)
		}
		t.Fatalf("limited claim: started %v, want [true true false]", got)
	}
	pred := Lease{ID: res.Jobs[0].ID, Token: *res.Jobs[0].LeaseToken}
	succ, err := s.ClaimSuccessors(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Lease: time.Minute, Preds: []Lease{pred}})
	if err != nil {
		t.Fatal(err)
	}
	if len(succ) != 1 || succ[0].Started || succ[0].SlotOf == nil {
		t.Fatalf("successor claim: %+v, want one successor, not started", succ)
	}
}

// The fair claim writes started for the first jobs in its fair order, as the others do.
func TestFairClaimWritesWaitingJobsClaimed(t *testing.T) {
	t.Parallel()
	s, pool := fairStore(t, nil)
	for i, k := range []string{"a", "b", "c"} {
		addJobs(t, s, pool, k, 2, 0, i)
	}
	for _, limited := range []bool{false, true} {
		res, err := s.ClaimFair(context.Background(), pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 3, Waiting: 2, Lease: time.Minute}, limited)
		if err != nil {
			t.Fatal(err)
		}
		var got []bool
		for _, j := range res.Jobs {
			got = append(got, j.Started)
		}
		if len(got) != 3 || !got[0] || got[1] || got[2] {
			t.Fatalf("fair claim (limited %v): started %v in fair order, want [true false false]", limited, got)
		}
	}
}

// The plain claim's bound (startBound) starts exactly the first Limit-Waiting jobs in
// claim order across priorities, run_at and id ties, all of them without waiting
// jobs, and none when every job waits.
func TestClaimStartsTheFirstInClaimOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct{ waiting, want int }{{3, 3}, {5, 1}, {4, 2}, {0, 6}, {6, 0}} {
		queue := fmt.Sprintf("q%d", c.waiting)
		var ps []InsertParams
		for i, prio := range []int{0, 5, 5, 0, 9, 5} {
			at := now.Add(-time.Duration(i%2) * time.Minute)
			ps = append(ps, InsertParams{Queue: queue, Kind: "k", Payload: []byte(`{}`), MaxAttempts: 1, Priority: prio, RunAt: &at})
		}
		if _, err := s.InsertMany(ctx, pool, &now, ps, nil); err != nil {
			t.Fatal(err)
		}
		jobs, err := s.Claim(ctx, pool, &now, ClaimParams{Queue: queue, WorkerID: "w", Limit: 6, Waiting: c.waiting, Lease: time.Minute})
		if err != nil || len(jobs) != 6 {
			t.Fatalf("claimed %d of 6: %v", len(jobs), err)
		}
		for i, j := range jobs {
			if want := i < c.want; j.Started != want {
				t.Errorf("waiting %d: job %d in claim order (priority %d, run_at %s): started %v, want %v", c.waiting, i, j.Priority, j.RunAt, j.Started, want)
			}
		}
	}
}
