package bench

// The enqueue workloads: W1 and W2 (single enqueues from 1 and 16 connections,
// judged against B2, a plain insert of the same row) and W3 (batches of 1,000,
// judged against B3, a bare COPY of the same rows).

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
)

// enqueueWorkload runs total single enqueues from conc goroutines on a pool of conc
// connections, each enqueue its own transaction.
func enqueueWorkload(ctx context.Context, e *Env, name string, total, conc int) (*Result, error) {
	c, pool, err := e.schemaClient(ctx, "bench_"+name, int32(conc))
	if err != nil {
		return nil, err
	}
	defer pool.Close()
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
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM "`+c.Schema()+`".jobs`).Scan(&rows); err != nil {
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
	return judgeRatio(r, err, "B2(1 conn)", e.b2one, 0.7)
}

func runW2(ctx context.Context, e *Env) (*Result, error) {
	r, err := enqueueWorkload(ctx, e, "W2", e.n(20000), 16)
	return judgeRatio(r, err, "B2(16 conns)", e.b2many, 0.7)
}

// judgeRatio sets r's ratio to the baseline measured in the same run and its target.
func judgeRatio(r *Result, err error, limit string, base, want float64) (*Result, error) {
	if err == nil && base > 0 {
		r.Limit, r.Ratio = limit, r.JobsPerSec/base
		r.judgeBy(fmt.Sprintf("≥ %.1f × %s", want, limit), func(x *Result) bool { return x.Ratio >= want })
	}
	return r, err
}

func runW3(ctx context.Context, e *Env) (*Result, error) {
	total := e.n(100000)
	schema, elapsed, lat, err := bulkRun(ctx, e, "W3", total, 1000,
		func(ctx context.Context, c *skiplock.Client, db skiplock.DB, first, n int) error {
			ps := make([]skiplock.EnqueueParams, n)
			for k := range ps {
				// With keys, each batch is one key's (a tenant's bulk insert): on Citus
				// it then stays on one node, and two concurrent batches over the same
				// new keys do not meet in the key table (docs/citus.md, "Benchmarks
				// on the cluster").
				ps[k] = skiplock.EnqueueParams{Args: noop{I: first + k}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: e.key(first / 1000)}}
			}
			_, err := c.EnqueueManyTx(ctx, db, ps)
			return err
		})
	if err != nil {
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
		Verified: fmt.Sprintf("ok: %d rows", rows),
		Extra:    map[string]any{"note": "latency columns are per batch of 1,000; 2 goroutines"}}
	lat.fill(r)
	if e.Keys > 0 {
		r.Extra["keys"] = e.Keys
	}
	if e.Citus {
		// B3's bare COPY and the single node's target do not apply on the cluster.
		e.w3 = r.JobsPerSec
		return r, nil
	}
	if e.b3 > 0 {
		r.Limit, r.Ratio = "B3 (bare COPY)", r.JobsPerSec/e.b3
		r.judgeBy("≥ 0.8 × B3 (bare COPY)", func(x *Result) bool { return x.Ratio >= 0.8 })
	} else {
		r.judgeBy("≥ 120,000 jobs/s", atLeast(120000))
	}
	e.w3 = r.JobsPerSec
	return r, nil
}

// bulkRun enqueues total jobs into a fresh schema from 2 goroutines, in units of up
// to unit jobs, each unit one call of insert (first is the unit's first job number)
// in its own transaction, and reports the schema, the elapsed time and the per-unit
// latencies. W3 and F1 share it, so they differ only in what a unit is.
func bulkRun(ctx context.Context, e *Env, name string, total, unit int,
	insert func(ctx context.Context, c *skiplock.Client, db skiplock.DB, first, n int) error) (string, time.Duration, *latencies, error) {
	return bulkRunPrepared(ctx, e, name, total, unit, nil, insert)
}

// bulkRunPrepared is bulkRun with prepare (when not nil) run on the fresh schema
// before the clock starts.
func bulkRunPrepared(ctx context.Context, e *Env, name string, total, unit int, prepare func(schema string) error,
	insert func(ctx context.Context, c *skiplock.Client, db skiplock.DB, first, n int) error) (string, time.Duration, *latencies, error) {
	schema, err := e.schema(ctx, "bench_"+strings.ToLower(name))
	if err != nil {
		return "", 0, nil, err
	}
	if prepare != nil {
		if err := prepare(schema); err != nil {
			return "", 0, nil, err
		}
	}
	const workers = 2
	pool, err := e.pool(ctx, workers)
	if err != nil {
		return "", 0, nil, err
	}
	defer pool.Close()
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		return "", 0, nil, err
	}
	defer c.Close()
	units := make(chan int, total/unit+1)
	for i := 0; i < total; i += unit {
		units <- i
	}
	close(units)
	lat := &latencies{}
	var done atomic.Int64
	stop := e.progress(name, total, done.Load)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := range units {
				n := min(unit, total-first)
				t := time.Now()
				if err := insert(ctx, c, pool, first, n); err != nil {
					errs <- err
					return
				}
				lat.add(time.Since(t))
				done.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stop()
	close(errs)
	if err := <-errs; err != nil {
		return "", 0, nil, err
	}
	return schema, elapsed, lat, nil
}
