package bench

// The enqueue workloads: W1 and W2 (single enqueues from 1 and 16 connections,
// judged against B0) and W3 (batches of 1,000).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
)

// enqueueWorkload runs total single enqueues from conc goroutines on a pool of conc
// connections, each enqueue its own transaction.
func enqueueWorkload(ctx context.Context, e *Env, name string, total, conc int) (*Result, error) {
	schema, err := e.schema(ctx, "bench_"+name)
	if err != nil {
		return nil, err
	}
	pool, err := e.pool(ctx, int32(conc))
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var lat latencies
	var next, done atomic.Int64
	stop := e.progress(name, total, done.Load)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(total); i = next.Add(1) {
				t := time.Now()
				if _, err := c.Enqueue(ctx, noop{I: int(i)}, nil); err != nil {
					errs <- err
					return
				}
				lat.add(time.Since(t))
				done.Add(1)
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
	var rows int64
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".jobs`).Scan(&rows); err != nil {
		return nil, err
	}
	r := &Result{Workload: name, N: total, Seconds: elapsed.Seconds(), JobsPerSec: float64(total) / elapsed.Seconds(), Settings: e.Settings,
		Verified: fmt.Sprintf("ok: %d rows", rows)}
	if rows != int64(total) {
		return nil, fmt.Errorf("%s wrote %d rows, want %d", name, rows, total)
	}
	lat.fill(r)
	return r, nil
}

func runW1(ctx context.Context, e *Env) (*Result, error) {
	r, err := enqueueWorkload(ctx, e, "W1", e.n(10000), 1)
	return judgeRatio(r, err, "B0(1 conn)", e.b0one, 0.8)
}

func runW2(ctx context.Context, e *Env) (*Result, error) {
	r, err := enqueueWorkload(ctx, e, "W2", e.n(20000), 16)
	return judgeRatio(r, err, "B0(16 conns)", e.b0many, 0.7)
}

// judgeRatio sets r's ratio to the baseline measured in the same run and its target.
func judgeRatio(r *Result, err error, limit string, base, want float64) (*Result, error) {
	if err == nil && base > 0 {
		r.Limit, r.Ratio, r.Target = limit, r.JobsPerSec/base, fmt.Sprintf("≥ %.1f × %s", want, limit)
		r.Met = boolp(r.Ratio >= want)
	}
	return r, err
}

func runW3(ctx context.Context, e *Env) (*Result, error) {
	schema, err := e.schema(ctx, "bench_w3")
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
	batches := make(chan []skiplock.EnqueueParams, total/1000+1)
	for i := 0; i < total; i += 1000 {
		ps := make([]skiplock.EnqueueParams, min(1000, total-i))
		for k := range ps {
			ps[k] = skiplock.EnqueueParams{Args: noop{I: i + k}}
		}
		batches <- ps
	}
	close(batches)
	var lat latencies
	var done atomic.Int64
	stop := e.progress("W3", total, done.Load)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ps := range batches {
				t := time.Now()
				if _, err := c.EnqueueManyTx(ctx, pool, ps); err != nil {
					errs <- err
					return
				}
				lat.add(time.Since(t))
				done.Add(int64(len(ps)))
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
	var rows int64
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".jobs`).Scan(&rows); err != nil {
		return nil, err
	}
	if rows != int64(total) {
		return nil, fmt.Errorf("W3 wrote %d rows, want %d", rows, total)
	}
	r := &Result{Workload: "W3", N: total, Seconds: elapsed.Seconds(), JobsPerSec: float64(total) / elapsed.Seconds(), Settings: e.Settings,
		Target: "≥ 120,000 jobs/s", Verified: fmt.Sprintf("ok: %d rows", rows),
		Extra: map[string]any{"note": "latency columns are per batch of 1,000; 2 goroutines"}}
	r.Met = boolp(r.JobsPerSec >= 120000)
	lat.fill(r)
	e.w3 = r.JobsPerSec
	return r, nil
}
