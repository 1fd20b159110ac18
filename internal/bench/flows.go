package bench

// F1: enqueue flows of 1,000 children (docs/flows.md), each flow one statement in
// its own transaction, from 2 goroutines: the flow counterpart of W3 (batches of
// 1,000 plain jobs), judged against W3 measured in the same run.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
)

// flowChildren is the size of F1's flows.
const flowChildren = 1000

func runF1(ctx context.Context, e *Env) (*Result, error) {
	schema, err := e.schema(ctx, "bench_f1")
	if err != nil {
		return nil, err
	}
	const workers = 2
	pool, err := e.pool(ctx, workers)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	total := e.n(100000)
	flows := make(chan skiplock.Flow, total/flowChildren+1)
	for i := 0; i < total; i += flowChildren {
		f := skiplock.Flow{Args: noop{I: -1 - i}, Children: make([]skiplock.Flow, min(flowChildren, total-i))}
		for k := range f.Children {
			f.Children[k] = skiplock.Flow{Args: noop{I: i + k}}
		}
		flows <- f
	}
	close(flows)
	nflows := len(flows)
	var lat latencies
	var done atomic.Int64
	stop := e.progress("F1", total, done.Load)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range flows {
				t := time.Now()
				if _, err := c.EnqueueFlowTx(ctx, pool, f); err != nil {
					errs <- err
					return
				}
				lat.add(time.Since(t))
				done.Add(int64(len(f.Children)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stop()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	var children, parents int64
	err = e.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE parent_id IS NOT NULL), count(*) FILTER (WHERE status = 'waiting')
FROM "`+schema+`".jobs`).Scan(&children, &parents)
	if err != nil {
		return nil, err
	}
	if children != int64(total) || parents != int64(nflows) {
		return nil, fmt.Errorf("F1 wrote %d children and %d waiting parents, want %d and %d", children, parents, total, nflows)
	}
	r := &Result{Workload: "F1", N: total, Seconds: elapsed.Seconds(), JobsPerSec: float64(total) / elapsed.Seconds(), Settings: e.Settings,
		Verified: fmt.Sprintf("ok: %d children, %d waiting parents", children, parents),
		Extra:    map[string]any{"note": "children/s; latency columns are per flow of 1,000 children; 2 goroutines"}}
	lat.fill(r)
	return judgeRatio(r, nil, "W3", e.w3, 0.5)
}
