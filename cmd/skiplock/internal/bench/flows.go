package bench

// F1: enqueue flows of 1,000 children (docs/flows.md), each flow one statement in
// its own transaction, from 2 goroutines: the flow counterpart of W3 (batches of
// 1,000 plain jobs), judged against W3 measured in the same run.

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock"
)

// flowChildren is the size of F1's flows.
const flowChildren = 1000

func runF1(ctx context.Context, e *Env) (*Result, error) {
	total := e.n(100000)
	nflows := (total + flowChildren - 1) / flowChildren
	schema, elapsed, lat, err := bulkRun(ctx, e, "F1", total, flowChildren,
		func(ctx context.Context, c *skiplock.Client, db skiplock.DB, first, n int) error {
			f := skiplock.Flow{Args: noop{I: -1 - first}, Children: make([]skiplock.Flow, n)}
			for k := range f.Children {
				f.Children[k] = skiplock.Flow{Args: noop{I: first + k}}
			}
			_, err := c.EnqueueFlowTx(ctx, db, f)
			return err
		})
	if err != nil {
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
