package skiplock_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
)

// TestEnqueueManyCopyMarksLimitedQueues: a batch written with COPY (64 jobs or more)
// marks its jobs of a limited queue for jobs_group_ready_idx and leaves those of an
// unlimited queue out of it, as the insert statements do — on the client's pool and
// in a caller's transaction.
func TestEnqueueManyCopyMarksLimitedQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: "lim", Key: skiplock.EachKey, MaxRunning: 1}))
	batch := func() []skiplock.EnqueueParams {
		ps := make([]skiplock.EnqueueParams, 100)
		for i := range ps {
			q := "free"
			if i%2 == 0 {
				q = "lim"
			}
			ps[i] = skiplock.EnqueueParams{Kind: "k", Payload: []byte(`{}`), Opts: skiplock.EnqueueOpts{Queue: q}}
		}
		return ps
	}
	if _, err := e.client.EnqueueMany(e.ctx, batch()); err != nil {
		t.Fatal(err)
	}
	e.must(pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, err := e.client.EnqueueManyTx(e.ctx, tx, batch())
		return err
	}))
	var lim, limMarked, free, freeMarked int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FILTER (WHERE queue = 'lim'), count(*) FILTER (WHERE queue = 'lim' AND grouped),
       count(*) FILTER (WHERE queue = 'free'), count(*) FILTER (WHERE queue = 'free' AND grouped) FROM "`+e.schema+`".jobs`).Scan(&lim, &limMarked, &free, &freeMarked); err != nil {
		t.Fatal(err)
	}
	if lim != 100 || free != 100 {
		t.Fatalf("%d jobs in lim and %d in free, want 100 each", lim, free)
	}
	if limMarked != lim {
		t.Errorf("%d of %d COPY'd jobs of a limited queue are in jobs_group_ready_idx", limMarked, lim)
	}
	if freeMarked != 0 {
		t.Errorf("%d COPY'd jobs of an unlimited queue are in jobs_group_ready_idx", freeMarked)
	}
}
