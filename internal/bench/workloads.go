package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/store"
)

// insertRate measures single-row INSERT commits per second over d with conns
// connections, as pgbench's simple insert does.
func insertRate(ctx context.Context, e *Env, conns int, d time.Duration) (float64, error) {
	if _, err := e.Pool.Exec(ctx, `DROP TABLE IF EXISTS bench_b0; CREATE TABLE bench_b0 (id bigserial PRIMARY KEY, v int NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, err
	}
	pool, err := e.pool(ctx, int32(conns))
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	deadline := time.Now().Add(d)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := pool.Exec(ctx, "INSERT INTO bench_b0 (v) VALUES ($1)", i); err != nil {
					errs <- err
					return
				}
				total.Add(1)
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(total.Load()) / time.Since(start).Seconds(), nil
}

func runB0(ctx context.Context, e *Env) (*Result, error) {
	d := time.Duration(float64(3*time.Second) * min(max(e.Scale, 0.1), 1))
	one, err := insertRate(ctx, e, 1, d)
	if err != nil {
		return nil, err
	}
	many, err := insertRate(ctx, e, 16, d)
	if err != nil {
		return nil, err
	}
	e.b0one, e.b0many = one, many
	return &Result{Workload: "B0", JobsPerSec: one, Seconds: d.Seconds() * 2, Settings: e.Settings,
		Extra: map[string]any{"insert_commits_per_sec_1_conn": int(one), "insert_commits_per_sec_16_conns": int(many)}}, nil
}

// preinsert writes n noop jobs with COPY into schema (not timed).
func preinsert(ctx context.Context, e *Env, schema string, n int) error {
	c, err := skiplock.NewClient(e.Pool, skiplock.Config{Schema: schema, NotifyCoalesce: -1})
	if err != nil {
		return err
	}
	defer c.Close()
	for i := 0; i < n; i += 5000 {
		m := min(5000, n-i)
		ps := make([]skiplock.EnqueueParams, m)
		for k := range ps {
			ps[k] = skiplock.EnqueueParams{Args: noop{I: i + k}}
		}
		if _, err := c.EnqueueManyTx(ctx, e.Pool, ps); err != nil {
			return err
		}
	}
	_, err = e.Pool.Exec(ctx, `VACUUM ANALYZE "`+schema+`".jobs`)
	return err
}

func runB1(ctx context.Context, e *Env) (*Result, error) {
	schema, err := e.schema(ctx, "bench_b1")
	if err != nil {
		return nil, err
	}
	n := e.n(100000)
	if err := preinsert(ctx, e, schema, n); err != nil {
		return nil, err
	}
	st, err := store.New(schema)
	if err != nil {
		return nil, err
	}
	pool, err := e.pool(ctx, 2)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	var done atomic.Int64
	stop := e.progress("B1", n, done.Load)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				jobs, err := st.Claim(ctx, pool, nil, store.ClaimParams{Queue: skiplock.DefaultQueue, WorkerID: fmt.Sprint("b1-", w), Limit: 1000, Lease: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					return
				}
				outs := make([]store.Outcome, len(jobs))
				for i, j := range jobs {
					outs[i] = store.Outcome{Lease: store.Lease{ID: j.ID, Token: *j.LeaseToken}, Action: store.ActionComplete}
				}
				res, err := st.Finish(ctx, pool, nil, outs)
				if err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(res)))
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
	if done.Load() != int64(n) {
		return nil, fmt.Errorf("B1 completed %d of %d", done.Load(), n)
	}
	e.b1 = float64(n) / elapsed.Seconds()
	return &Result{Workload: "B1", N: n, Seconds: elapsed.Seconds(), JobsPerSec: e.b1, Settings: e.Settings}, nil
}

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
	return r, nil
}

// workResult works n pre-inserted jobs with one client and reports the rate.
type workOpts struct {
	name            string
	n               int
	workers         int
	deleteOnSuccess bool
	marks           []float64 // fractions at which to record the elapsed time
}

func work(ctx context.Context, e *Env, o workOpts) (*Result, map[float64]time.Duration, error) {
	schema, err := e.schema(ctx, "bench_"+o.name)
	if err != nil {
		return nil, nil, err
	}
	if err := preinsert(ctx, e, schema, o.n); err != nil {
		return nil, nil, err
	}
	pool, err := e.pool(ctx, 8)
	if err != nil {
		return nil, nil, err
	}
	defer pool.Close()
	tr := newTracker(o.n)
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("noop", tr.handler(), nil); err != nil {
		return nil, nil, err
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Workers: ws, DeleteOnSuccess: o.deleteOnSuccess,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: o.workers}}})
	if err != nil {
		return nil, nil, err
	}
	done := func() int64 { return c.Counters().Succeeded }
	stopProgress := e.progress(o.name, o.n, done)
	marks := map[float64]time.Duration{}
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return nil, nil, err
	}
	next := 0
	for done() < int64(o.n) {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		d := done()
		for next < len(o.marks) && float64(d) >= o.marks[next]*float64(o.n) {
			marks[o.marks[next]] = time.Since(start)
			next++
		}
		<-time.After(time.Millisecond)
	}
	elapsed := time.Since(start)
	for ; next < len(o.marks); next++ {
		marks[o.marks[next]] = elapsed
	}
	stopProgress()
	if err := c.Stop(ctx); err != nil {
		return nil, nil, err
	}
	pc := c.Counters()
	verified, err := tr.verify(ctx, e.Pool, schema, o.n, o.deleteOnSuccess)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", o.name, err)
	}
	r := &Result{Workload: o.name, N: o.n, Seconds: elapsed.Seconds(), JobsPerSec: float64(o.n) / elapsed.Seconds(),
		Settings: e.Settings, Verified: verified, Extra: map[string]any{
			"batches": fmt.Sprintf("%d claims (avg %.0f jobs, %s in all), %d completion statements (avg %.0f, %s in all)",
				pc.ClaimStatements, float64(pc.Claimed)/float64(max(pc.ClaimStatements, 1)), pc.ClaimTime.Round(time.Millisecond),
				pc.CompletionStatements, float64(pc.Completed)/float64(max(pc.CompletionStatements, 1)), pc.CompletionTime.Round(time.Millisecond)),
		}}
	if e.b1 > 0 {
		r.Limit, r.Ratio = "B1", r.JobsPerSec/e.b1
	}
	return r, marks, nil
}

func runW4(ctx context.Context, e *Env) (*Result, error) {
	r, _, err := work(ctx, e, workOpts{name: "W4", n: e.n(10000), workers: 1})
	if err == nil {
		r.Target = "≥ 25,000 jobs/s"
		r.Met = boolp(r.JobsPerSec >= 25000)
	}
	return r, err
}

// W5Workers is the concurrency W5 uses (the best found on a 2-core machine).
const W5Workers = 100

func runW5(ctx context.Context, e *Env) (*Result, error) {
	r, _, err := work(ctx, e, workOpts{name: "W5", n: e.n(50000), workers: W5Workers})
	if err != nil {
		return nil, err
	}
	r.Target = "≥ 40,000 jobs/s (≥ 0.85 × B1)"
	r.Met = boolp(r.JobsPerSec >= 40000)
	r.Extra["concurrency"] = W5Workers
	d, _, err := work(ctx, e, workOpts{name: "W5d", n: e.n(50000), workers: W5Workers, deleteOnSuccess: true})
	if err != nil {
		return nil, err
	}
	r.Extra["with_delete_on_success_jobs_per_sec"] = int(d.JobsPerSec)
	return r, nil
}

func runW7(ctx context.Context, e *Env) (*Result, error) {
	n := e.n(1000000)
	r, marks, err := work(ctx, e, workOpts{name: "W7", n: n, workers: W5Workers, marks: []float64{0.1, 0.9, 1}})
	if err != nil {
		return nil, err
	}
	first := 0.1 * float64(n) / marks[0.1].Seconds()
	last := 0.1 * float64(n) / (marks[1] - marks[0.9]).Seconds()
	r.Target = "≥ 40,000 jobs/s, last 10% within 20% of first"
	r.Met = boolp(r.JobsPerSec >= 40000 && last >= 0.8*first)
	r.Extra["first_10pct_jobs_per_sec"], r.Extra["last_10pct_jobs_per_sec"], r.Extra["concurrency"] = int(first), int(last), W5Workers
	return r, nil
}

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

var _ = pgxpool.New
