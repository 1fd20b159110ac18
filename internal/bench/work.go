package bench

// The work workloads, which work pre-inserted jobs with one client: W4 (one worker),
// W5 (W5Workers, with and without DeleteOnSuccess) and W7 (a million jobs, first
// against last tenth).

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

// workOpts shape one work workload.
type workOpts struct {
	name            string
	n               int
	workers         int
	deleteOnSuccess bool
	marks           []float64 // fractions at which to record the elapsed time
}

// work works o.n pre-inserted jobs with one client and reports the rate, and the
// elapsed time at each of o.marks.
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
