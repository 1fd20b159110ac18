package bench

// The latency workload W6: jobs enqueued at a steady rate, timed from commit to
// handler start.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
)

func runW6(ctx context.Context, e *Env) (*Result, error) {
	schema, err := e.schema(ctx, "bench_w6")
	if err != nil {
		return nil, err
	}
	rate, seconds := 200, 10*min(max(e.Scale, 0.1), 1)
	total := int(float64(rate) * seconds)
	var mu sync.Mutex
	committed := map[string]time.Time{}
	ackedAt := map[string]time.Time{}
	startedAt := map[string]time.Time{}
	ws := skiplock.NewWorkers()
	allDone := make(chan struct{})
	var count atomic.Int64
	ws.AddHandler("noop", func(ctx context.Context, job *skiplock.Job) error {
		now := time.Now()
		mu.Lock()
		startedAt[job.ID] = now
		mu.Unlock()
		if count.Add(1) == int64(total) {
			close(allDone)
		}
		return nil
	}, nil)
	workerPool, err := e.pool(ctx, 8)
	if err != nil {
		return nil, err
	}
	defer workerPool.Close()
	worker, err := skiplock.NewClient(workerPool, skiplock.Config{Schema: schema, Workers: ws,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 10}}})
	if err != nil {
		return nil, err
	}
	if err := worker.Start(ctx); err != nil {
		return nil, err
	}
	defer worker.Stop(context.WithoutCancel(ctx))
	appPool, err := e.pool(ctx, 2)
	if err != nil {
		return nil, err
	}
	defer appPool.Close()
	app, err := skiplock.NewClient(appPool, skiplock.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	<-time.After(200 * time.Millisecond) // let the listener connect before the clock starts
	stop := e.progress("W6", total, count.Load)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	start := time.Now()
	for i := 0; i < total; i++ {
		<-tick.C
		tx, err := appPool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		res, err := app.EnqueueTx(ctx, tx, noop{I: i}, nil)
		if err != nil {
			return nil, err
		}
		at := time.Now() // the commit starts: latency includes the commit's own disk sync
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		acked := time.Now()
		mu.Lock()
		committed[res.ID] = at
		ackedAt[res.ID] = acked
		mu.Unlock()
	}
	tick.Stop()
	select {
	case <-allDone:
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("W6: %d of %d jobs started", count.Load(), total)
	}
	elapsed := time.Since(start)
	stop()
	var lat, fromAck latencies
	mu.Lock()
	for id, c := range committed {
		lat.add(startedAt[id].Sub(c))
		fromAck.add(max(startedAt[id].Sub(ackedAt[id]), 0)) // a job may start before its producer hears the commit ack
	}
	mu.Unlock()
	var ack Result
	fromAck.fill(&ack)
	r := &Result{Workload: "W6", N: total, Seconds: elapsed.Seconds(), JobsPerSec: float64(total) / elapsed.Seconds(), Settings: e.Settings + "; client defaults",
		Target: "p50 ≤ 2 ms, p99 ≤ 5 ms", Verified: fmt.Sprintf("ok: %d jobs started once each", len(startedAt)),
		Extra: map[string]any{
			"measured":                    "from Commit() called (includes the commit's disk sync) to handler start",
			"from_commit_ack_p50_p95_p99": fmt.Sprintf("%.2f / %.2f / %.2f ms", ack.P50ms, ack.P95ms, ack.P99ms),
		}}
	lat.fill(r)
	r.Met = boolp(r.P50ms <= 2 && r.P99ms <= 5)
	return r, nil
}
