package bench

// W13: the Node client's worker on the SQL worker protocol (clients/node, migration
// 0018) against the Go worker, at the same concurrency: the rate at which each works a
// pre-inserted backlog, and the pickup latency (enqueue to claim) of jobs enqueued at a
// steady 100/s. Both are measured from the jobs' rows (the database's clock), the same
// way for both workers, so the Node process's start-up is not counted. The backlog is
// worked in w13Rounds rounds that alternate which worker goes first, so that on a
// shared machine a swing of the load between two phases does not decide the ratio.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// w13Rounds is how many rounds W13 runs: each works a fresh backlog of n jobs with the
// Go worker and with the Node worker, the order alternating from round to round, so
// that a load swing on a shared machine reaches both workers instead of one phase.
const w13Rounds = 3

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
	workers := [2]struct {
		name   string
		schema string
		start  w13Start
		secs   float64
		pick   *Result
	}{{name: "Go", schema: "bench_w13_go", start: w13Go}, {name: "Node", schema: "bench_w13_node", start: w13Node(script, e.URL)}}
	ratios := make([]string, 0, w13Rounds)
	for round := range w13Rounds {
		var rates [2]float64
		for k := range 2 {
			w := &workers[(round+k)%2] // Go first in odd rounds, Node first in even ones
			// The last round's worker goes on to the pickup, warm as in the rounds before.
			secs, pick, err := w13Work(ctx, e, w.schema, n, w.start, round == w13Rounds-1)
			if err != nil {
				return nil, fmt.Errorf("W13 (%s worker, round %d): %w", w.name, round+1, err)
			}
			w.secs += secs
			w.pick = pick
			rates[(round+k)%2] = float64(n) / secs
		}
		ratios = append(ratios, fmt.Sprintf("%.2f×", rates[1]/rates[0]))
	}
	goPick, nodePick := workers[0].pick, workers[1].pick
	total := float64(n * w13Rounds)
	goRate, nodeRate := total/workers[0].secs, total/workers[1].secs
	r := &Result{Workload: "W13", N: n * w13Rounds, Seconds: workers[1].secs, JobsPerSec: nodeRate, Settings: e.Settings,
		Limit: "the Go worker (same run, same concurrency)", Ratio: nodeRate / goRate,
		Verified: "every job succeeded (its row's status); the Node worker's runs are not tracked one by one",
		Extra: map[string]any{
			"concurrency":          W13Workers,
			"rounds":               fmt.Sprintf("%d, each %d jobs per worker, Go and Node alternating first; rates over all rounds", w13Rounds, n),
			"round_ratios":         strings.Join(ratios, " "),
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

// w13Work works n pre-inserted jobs in a fresh schema with the worker start starts and
// returns the seconds from the first claim to the last completion, from the rows; with
// pickup, the same worker then takes the jobs of w13Pickup, whose latencies it returns.
func w13Work(ctx context.Context, e *Env, name string, n int, start w13Start, pickup bool) (float64, *Result, error) {
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
	var secs float64
	var pick *Result
	err = w13Succeeded(ctx, e, schema, n)
	if err == nil {
		err = e.Pool.QueryRow(ctx, `SELECT extract(epoch FROM max(updated_at) - min(attempted_at)) FROM "`+schema+`".jobs`).Scan(&secs)
	}
	if err == nil && secs <= 0 {
		err = errors.New("no time elapsed between the first claim and the last completion")
	}
	if err == nil && pickup {
		pick, err = w13Pickup(ctx, e, schema, n)
	}
	if serr := stop(); serr != nil && err == nil {
		err = fmt.Errorf("stopping the worker: %w", serr)
	}
	return secs, pick, err
}

// w13Succeeded waits until want jobs of schema have succeeded.
func w13Succeeded(ctx context.Context, e *Env, schema string, want int) error {
	q := `SELECT count(*) FROM "` + schema + `".jobs WHERE status = 'succeeded'`
	stopProgress := e.progress(schema, want, func() int64 {
		var k int64
		_ = e.Pool.QueryRow(ctx, q).Scan(&k)
		return k
	})
	defer stopProgress()
	for {
		var k int
		if err := e.Pool.QueryRow(ctx, q).Scan(&k); err != nil {
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

// w13Pickup enqueues w13Pickups jobs into schema, whose done jobs have succeeded, one
// at a time at w13Rate while its worker waits for them, and returns their pickup
// latencies (created_at to attempted_at).
func w13Pickup(ctx context.Context, e *Env, schema string, done int) (*Result, error) {
	var since time.Time
	if err := e.Pool.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		return nil, err
	}
	c, err := skiplock.NewClient(e.Pool, skiplock.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	t0 := time.Now()
	for i := range w13Pickups {
		if _, err := c.Enqueue(ctx, noop{I: i}, nil); err != nil {
			return nil, err
		}
		<-time.After(time.Until(t0.Add(time.Duration(i+1) * time.Second / w13Rate)))
	}
	if err := w13Succeeded(ctx, e, schema, done+w13Pickups); err != nil {
		return nil, err
	}
	rows, err := e.Pool.Query(ctx, `SELECT attempted_at - created_at FROM "`+schema+`".jobs WHERE created_at >= $1`, since)
	if err != nil {
		return nil, err
	}
	var l latencies
	for rows.Next() {
		var d time.Duration
		if err := rows.Scan(&d); err != nil {
			return nil, err
		}
		l.add(d)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var pick Result
	l.fill(&pick)
	return &pick, nil
}
