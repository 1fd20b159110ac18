package maint_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/store"
)

// TestLaneSettlerSettlesAQueueMadeFairBySQL: a queue made fair by SQL while a
// transaction inserts into it, with no settle after: the racing insert's job is out of
// jobs_fair_idx, so no fair claim takes it. The lane settler's run (under its service
// lock, as every started client runs it) marks it, and its next run has nothing to do.
func TestLaneSettlerSettlesAQueueMadeFairBySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := store.New(pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	racer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer racer.Rollback(ctx)
	raced, err := s.Insert(ctx, racer, nil, store.InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 1, Solo: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("queues")+` (name, fair) VALUES ('q', true)`); err != nil {
		t.Fatal(err)
	}
	if err := racer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	claim := func() int {
		t.Helper()
		res, err := s.ClaimFair(ctx, pool, nil, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 10, Lease: time.Minute}, false)
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Jobs)
	}
	if n := claim(); n != 0 {
		t.Fatalf("the fair claim took %d jobs before a settle: the test does not exercise the lane settler", n)
	}

	settler := &maint.LaneSettler{Store: s, Every: time.Minute}
	r := &maint.Runner{Store: s, Pool: pool}
	for i, want := range []maint.LaneSettleResult{{Settled: true, Marked: 1}, {}} {
		ran, res, err := r.RunOnce(ctx, settler)
		if err != nil || !ran {
			t.Fatalf("run %d: ran %v, %v", i, ran, err)
		}
		if res.(maint.LaneSettleResult) != want {
			t.Fatalf("run %d: %+v, want %+v", i, res, want)
		}
	}
	res, err := s.ClaimFair(ctx, pool, nil, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 10, Lease: time.Minute}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 1 || res.Jobs[0].ID != raced.ID {
		t.Fatalf("after the lane settler the fair claim took %d jobs, want the racer's %s", len(res.Jobs), raced.ID)
	}
}
