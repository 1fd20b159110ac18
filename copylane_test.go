package skiplock_test

import (
	"maps"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
)

// TestCopyMarksLanes: a batch written with COPY (64 jobs or more), and a flow's nodes
// likewise, mark their jobs as the insert statements do — those of a limited queue for
// jobs_group_ready_idx, those of a fair queue for jobs_fair_idx, those of a plain
// queue for neither — on the client's pool and in a caller's transaction.
func TestCopyMarksLanes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: "lim", Key: skiplock.EachKey, MaxRunning: 1}))
	if _, err := e.client.EnqueueMany(e.ctx, []skiplock.EnqueueParams{{Kind: "seed", Payload: []byte(`{}`), Opts: skiplock.EnqueueOpts{Queue: "fq"}}}); err != nil {
		t.Fatal(err) // a queue is made fair once something names it
	}
	e.must(e.client.QueueSetFair(e.ctx, "fq", nil))
	queues := []string{"lim", "fq", "free"}
	batch := func() []skiplock.EnqueueParams {
		ps := make([]skiplock.EnqueueParams, 99)
		for i := range ps {
			ps[i] = skiplock.EnqueueParams{Kind: "k", Payload: []byte(`{}`), Opts: skiplock.EnqueueOpts{Queue: queues[i%3]}}
		}
		return ps
	}
	flow := func() skiplock.Flow {
		f := skiplock.Flow{Kind: "parent", Payload: []byte(`{}`), Opts: skiplock.EnqueueOpts{Queue: "free"}}
		for _, p := range batch() {
			f.Children = append(f.Children, skiplock.Flow{Kind: p.Kind, Payload: p.Payload, Opts: p.Opts})
		}
		return f
	}
	if _, err := e.client.EnqueueMany(e.ctx, batch()); err != nil {
		t.Fatal(err)
	}
	e.must(pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, err := e.client.EnqueueManyTx(e.ctx, tx, batch())
		return err
	}))
	if _, err := e.client.EnqueueFlow(e.ctx, flow()); err != nil {
		t.Fatal(err)
	}
	e.must(pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, err := e.client.EnqueueFlowTx(e.ctx, tx, flow())
		return err
	}))
	rows, err := e.pool.Query(e.ctx, `SELECT queue, kind, grouped, fair_indexed, count(*) FROM "`+e.schema+`".jobs GROUP BY 1, 2, 3, 4 ORDER BY 1, 2`)
	e.must(err)
	got := map[string]int64{}
	for rows.Next() {
		var q, kind string
		var grouped, fair bool
		var n int64
		e.must(rows.Scan(&q, &kind, &grouped, &fair, &n))
		if grouped != (q == "lim") || fair != (q == "fq") {
			t.Errorf("%d jobs of kind %s in queue %s marked grouped %v, fair_indexed %v; want %v, %v", n, kind, q, grouped, fair, q == "lim", q == "fq")
		}
		got[q+"/"+kind] = n
	}
	e.must(rows.Err())
	want := map[string]int64{"lim/k": 132, "fq/k": 132, "free/k": 132, "free/parent": 2, "fq/seed": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("jobs by queue and kind %v, want %v", got, want)
	}
}
