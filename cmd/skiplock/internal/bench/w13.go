package bench

// W13: the Node client's worker on the SQL worker protocol (clients/node, migration
// 0018) against the Go worker, at the same concurrency: the rate at which each works a
// pre-inserted backlog, and the pickup latency (enqueue to claim) of jobs enqueued at a
// steady 100/s. Both are measured from the jobs' rows (the database's clock), the same
// way for both workers, so the Node process's start-up is not counted.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/skiplock/skiplock"
)

// W13Workers is the concurrency both W13 workers run at.
const W13Workers = 16

// EnvNodeClient names the clients/node directory W13 runs (default clients/node,
// from the working directory); it must be built (npm ci && npm run build).
const EnvNodeClient = "SKIPLOCK_NODE_CLIENT"

// w13Pickups is how many jobs W13 enqueues at w13Rate to measure pickup.
const (
	w13Pickups = 300
	w13Rate    = 100
)

func runW13(ctx context.Context, e *Env) (*Result, error) {
	dir := os.Getenv(EnvNodeClient)
	if dir == "" {
		dir = filepath.Join("clients", "node")
	}
	script := filepath.Join(dir, "dist", "test", "bench_worker.js")
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("W13 runs the Node client's worker: build it first ((cd %s && npm ci && npm run build)), or set %s to its directory: %w", dir, EnvNodeClient, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return nil, fmt.Errorf("W13 runs the Node client's worker: %w", err)
	}
	n := e.n(20000)
	goRate, goPick, err := w13Measure(ctx, e, "bench_w13_go", n, w13Go)
	if err != nil {
		return nil, fmt.Errorf("W13 (Go worker): %w", err)
	}
	nodeRate, nodePick, err := w13Measure(ctx, e, "bench_w13_node", n, w13Node(script, e.URL))
	if err != nil {
		return nil, fmt.Errorf("W13 (Node worker): %w", err)
	}
	r := &Result{Workload: "W13", N: n, Seconds: float64(n) / nodeRate, JobsPerSec: nodeRate, Settings: e.Settings,
		Limit: "the Go worker (same run, same concurrency)", Ratio: nodeRate / goRate,
		Verified: "every job succeeded (its row's status); the Node worker's runs are not tracked one by one",
		Extra: map[string]any{
			"concurrency":          W13Workers,
			"prefetch":             "both workers' defaults, the same adaptive rule: about 50 ms of work, at most 1,000 jobs ahead",
			"go_jobs_per_sec":      int(goRate),
			"go_pickup_p50_p99":    fmt.Sprintf("%.2f / %.2f ms", goPick.P50ms, goPick.P99ms),
			"node_pickup_p50_p99":  fmt.Sprintf("%.2f / %.2f ms", nodePick.P50ms, nodePick.P99ms),
			"pickup_measured_over": fmt.Sprintf("%d jobs enqueued at %d/s, enqueue to claim (created_at to attempted_at)", w13Pickups, w13Rate),
		}}
	r.P50ms, r.P95ms, r.P99ms = nodePick.P50ms, nodePick.P95ms, nodePick.P99ms
	r.judgeBy("≥ 0.5 × the Go worker's jobs/s at the same concurrency", func(x *Result) bool { return x.Ratio >= 0.5 })
	return r, nil
}

// w13Start starts a worker on schema's default queue; the returned function stops it.
type w13Start func(ctx context.Context, e *Env, schema string) (stop func() error, err error)

func w13Go(ctx context.Context, e *Env, schema string) (func() error, error) {
	pool, err := e.pool(ctx, W13Workers+4)
	if err != nil {
		return nil, err
	}
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("noop", func(context.Context, *skiplock.Job) error { return nil }, nil); err != nil {
		pool.Close()
		return nil, err
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Workers: ws,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: W13Workers}}})
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return func() error {
		defer pool.Close()
		return c.Stop(ctx)
	}, nil
}

func w13Node(script, url string) w13Start {
	return func(ctx context.Context, e *Env, schema string) (func() error, error) {
		cmd := exec.CommandContext(ctx, "node", script)
		cmd.Env = append(os.Environ(), "SKIPLOCK_BENCH_DSN="+url, "SKIPLOCK_BENCH_SCHEMA="+schema,
			fmt.Sprintf("SKIPLOCK_BENCH_CONCURRENCY=%d", W13Workers))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return func() error {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return cmd.Wait()
		}, nil
	}
}

// w13Measure works n pre-inserted jobs with the worker start starts and returns its
// rate (n over the first claim to the last completion), then its pickup latencies.
func w13Measure(ctx context.Context, e *Env, name string, n int, start w13Start) (float64, *Result, error) {
	schema, err := e.schema(ctx, name)
	if err != nil {
		return 0, nil, err
	}
	if err := preinsert(ctx, e, schema, n); err != nil {
		return 0, nil, err
	}
	stop, err := start(ctx, e, schema)
	if err != nil {
		return 0, nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = stop()
		}
	}()
	jobs := `"` + schema + `".jobs`
	succeeded := func(want int) error {
		stopProgress := e.progress(name, want, func() int64 {
			var k int64
			_ = e.Pool.QueryRow(ctx, `SELECT count(*) FROM `+jobs+` WHERE status = 'succeeded'`).Scan(&k)
			return k
		})
		defer stopProgress()
		for {
			var k int
			if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM `+jobs+` WHERE status = 'succeeded'`).Scan(&k); err != nil {
				return err
			}
			if k >= want {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if err := succeeded(n); err != nil {
		return 0, nil, err
	}
	var secs float64
	if err := e.Pool.QueryRow(ctx, `SELECT extract(epoch FROM max(updated_at) - min(attempted_at)) FROM `+jobs).Scan(&secs); err != nil {
		return 0, nil, err
	}
	if secs <= 0 {
		return 0, nil, errors.New("no time elapsed between the first claim and the last completion")
	}
	// Pickup: jobs enqueued one at a time at w13Rate while the worker waits for them.
	var since time.Time
	if err := e.Pool.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		return 0, nil, err
	}
	c, err := skiplock.NewClient(e.Pool, skiplock.Config{Schema: schema})
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	t0 := time.Now()
	for i := range w13Pickups {
		if _, err := c.Enqueue(ctx, noop{I: i}, nil); err != nil {
			return 0, nil, err
		}
		<-time.After(time.Until(t0.Add(time.Duration(i+1) * time.Second / w13Rate)))
	}
	if err := succeeded(n + w13Pickups); err != nil {
		return 0, nil, err
	}
	rows, err := e.Pool.Query(ctx, `SELECT attempted_at - created_at FROM `+jobs+` WHERE created_at >= $1`, since)
	if err != nil {
		return 0, nil, err
	}
	var l latencies
	for rows.Next() {
		var d time.Duration
		if err := rows.Scan(&d); err != nil {
			return 0, nil, err
		}
		l.add(d)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	stopped = true
	if err := stop(); err != nil {
		return 0, nil, fmt.Errorf("stopping the worker: %w", err)
	}
	var pick Result
	l.fill(&pick)
	return float64(n) / secs, &pick, nil
}
