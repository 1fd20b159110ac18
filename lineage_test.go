package skiplock_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestLineageOfALoneEnqueue: a job Enqueue writes in a transaction of its own records
// no lineage row (migration 0020: its transaction wrote only it), while a caller's
// transaction, a batch on the pool and a lone enqueue that announces its queue after
// its commit (overlapping enqueues) keep theirs; so does the one right after a lone
// enqueue on the same connection (the setting ends with its transaction). On the plain
// and the partitioned layout (the conversion reinstalls the trigger).
func TestLineageOfALoneEnqueue(t *testing.T) {
	t.Parallel()
	eachLayout(t, func(t *testing.T, e *env) {
		// One connection: every call below runs on the same session.
		cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
		e.must(err)
		cfg.MaxConns = 1
		pool, err := pgxNewPool(cfg)
		e.must(err)
		t.Cleanup(pool.Close)
		c, err := skiplock.NewClient(pool, skiplock.Config{Schema: e.schema, Clock: e.clock})
		e.must(err)
		t.Cleanup(c.Close)

		lineage := func(id string) int64 {
			t.Helper()
			return scalar[int64](e, "SELECT count(*) FROM "+e.q("tx_lineage")+" WHERE job_id = $1", id)
		}
		byTx := func(id string) []*skiplock.Job {
			t.Helper()
			j, err := c.JobGet(e.ctx, id)
			e.must(err)
			if j.TxID == 0 {
				t.Fatalf("job %s: no txid", id)
			}
			jobs, err := c.JobsByTx(e.ctx, j.TxID)
			e.must(err)
			return jobs
		}

		alone, err := c.Enqueue(e.ctx, emailArgs{To: "a"}, nil)
		e.must(err)
		if n := lineage(alone.ID); n != 0 {
			t.Errorf("a lone Enqueue wrote %d lineage rows, want none", n)
		}
		if jobs := byTx(alone.ID); len(jobs) != 0 {
			t.Errorf("JobsByTx of a lone enqueue: %d jobs, want none", len(jobs))
		}
		raw, err := c.EnqueueRaw(e.ctx, "email", []byte(`{"to":"r"}`), nil)
		e.must(err)
		if n := lineage(raw.ID); n != 0 {
			t.Errorf("a lone EnqueueRaw wrote %d lineage rows, want none", n)
		}

		// The next transaction on that connection records its lineage.
		var inTx []string
		e.must(pgx.BeginFunc(e.ctx, pool, func(tx pgx.Tx) error {
			r, err := c.EnqueueTx(e.ctx, tx, emailArgs{To: "b"}, nil)
			inTx = append(inTx, r.ID)
			return err
		}))
		if jobs := byTx(inTx[0]); len(jobs) != 1 || jobs[0].ID != inTx[0] {
			t.Errorf("JobsByTx of a one-job caller transaction right after a lone enqueue: %v", jobs)
		}
		batch, err := c.EnqueueMany(e.ctx, []skiplock.EnqueueParams{{Args: emailArgs{To: "c"}}, {Args: emailArgs{To: "d"}}})
		e.must(err)
		if jobs := byTx(batch[0].ID); len(jobs) != 2 {
			t.Errorf("JobsByTx of a batch on the pool: %d jobs, want 2", len(jobs))
		}
		plain, err := c.EnqueueMany(e.ctx, []skiplock.EnqueueParams{{Args: emailArgs{To: "e"}}})
		e.must(err)
		if n := lineage(plain[0].ID); n != 0 {
			t.Errorf("a lone EnqueueMany of one job wrote %d lineage rows, want none", n)
		}
	})
}
