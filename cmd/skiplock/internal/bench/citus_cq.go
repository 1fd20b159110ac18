package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/store"
)

// CQ's shape: the quiet keys, and how many rounds of one job each they enqueue, once
// on the empty queue (the control) and once behind the backlog.
const (
	cqQuietKeys = 10
	cqRounds    = 5
	cqBacklog   = 1000000
	cqLoadChunk = 10000
)

// cqRecorder is CQ's handler: it counts the backlog's runs and records each quiet
// job's start and how many of the backlog's jobs had started by then.
type cqRecorder struct {
	backlog int // jobs 0 … backlog−1 are key A's
	aRan    atomic.Int64
	mu      sync.Mutex
	started map[int]time.Time
	aAt     map[int]int64
	runs    map[int]int
	waiting map[int]chan struct{}
}

func (q *cqRecorder) handle(ctx context.Context, job *skiplock.Job) error {
	now := time.Now()
	i, ok := noopIndex(job.Payload)
	if !ok {
		return skiplock.Permanent(fmt.Errorf("CQ: payload %q carries no job index", job.Payload))
	}
	if i < q.backlog {
		q.aRan.Add(1)
		return nil
	}
	a := q.aRan.Load()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.runs[i]++
	if q.runs[i] == 1 {
		q.started[i], q.aAt[i] = now, a
		if ch := q.waiting[i]; ch != nil {
			close(ch)
		}
	}
	return nil
}

// cqRounds enqueues rounds of one job per quiet key, waits for each round's jobs to
// start, and returns each job's wait and how many of key A's jobs started meanwhile.
func cqQuiet(ctx context.Context, app *skiplock.Client, q *cqRecorder, first int) (*latencies, []int64, error) {
	lat := &latencies{}
	var behind []int64
	i := first
	for round := 0; round < cqRounds; round++ {
		type sent struct {
			i     int
			begin time.Time
			a     int64
			ch    chan struct{}
		}
		var batch []sent
		for k := 0; k < cqQuietKeys; k++ {
			ch := make(chan struct{})
			q.mu.Lock()
			q.waiting[i] = ch
			q.mu.Unlock()
			s := sent{i: i, begin: time.Now(), a: q.aRan.Load(), ch: ch}
			if _, err := app.Enqueue(ctx, noop{I: i}, &skiplock.EnqueueOpts{ConcurrencyKey: "quiet-" + strconv.Itoa(k)}); err != nil {
				return nil, nil, fmt.Errorf("CQ: enqueueing quiet job %d: %w", i, err)
			}
			batch = append(batch, s)
			i++
		}
		for _, s := range batch {
			select {
			case <-s.ch:
			case <-time.After(60 * time.Second):
				return nil, nil, fmt.Errorf("CQ: quiet job %d did not start within 60 s (%d of key A's jobs ran)", s.i, q.aRan.Load())
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			q.mu.Lock()
			lat.add(q.started[s.i].Sub(s.begin))
			behind = append(behind, q.aAt[s.i]-s.a)
			q.mu.Unlock()
		}
	}
	return lat, behind, nil
}

func runCQ(ctx context.Context, e *Env) (*Result, error) {
	cl, err := e.cluster("CQ")
	if err != nil {
		return nil, err
	}
	return isolatedValue(ctx, cl, func() (*Result, error) { return cqRun(ctx, cl) })
}

func cqRun(ctx context.Context, cl *Env) (*Result, error) {
	backlog := cl.n(cqBacklog)
	schema, err := cl.schema(ctx, "bench_cq")
	if err != nil {
		return nil, err
	}
	q := &cqRecorder{backlog: backlog, started: map[int]time.Time{}, aAt: map[int]int64{}, runs: map[int]int{}, waiting: map[int]chan struct{}{}}
	pool, err := cl.pool(ctx, 8)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	app, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	worker := func() (*skiplock.Client, error) {
		ws := skiplock.NewWorkers()
		if err := ws.AddHandler("noop", q.handle, nil); err != nil {
			return nil, err
		}
		c, err := skiplock.NewClient(pool, cl.clientConfig(skiplock.Config{Schema: schema, Workers: ws, DeleteOnSuccess: true,
			Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: W5Workers}}}))
		if err != nil {
			return nil, err
		}
		return c, c.Start(ctx)
	}

	// The control: the quiet keys' pickup on an empty queue.
	w, err := worker()
	if err != nil {
		return nil, fmt.Errorf("CQ: starting the worker: %w", err)
	}
	control, _, err := cqQuiet(ctx, app, q, backlog)
	w.Stop(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}

	// Key A's backlog, in statements of cqLoadChunk, each on a connection of its own
	// (loadConn), then the worker on it.
	st, err := store.New(schema)
	if err != nil {
		return nil, err
	}
	loadStart := time.Now()
	var loaded atomic.Int64
	stop := cl.progress("CQ load", backlog, loaded.Load)
	for first := 0; first < backlog; first += cqLoadChunk {
		m := min(cqLoadChunk, backlog-first)
		var got int64
		err := cl.loadConn(ctx, func(db skiplock.DB) (err error) {
			got, err = st.BenchBurst(ctx, db, skiplock.DefaultQueue, "noop", "A", first, m)
			return err
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("CQ: loading key A's jobs: %w", err)
		}
		loaded.Add(got)
	}
	stop()
	load := time.Since(loadStart)
	if loaded.Load() != int64(backlog) {
		return nil, fmt.Errorf("CQ: loaded %d of key A's %d jobs", loaded.Load(), backlog)
	}
	if _, err := cl.Pool.Exec(ctx, `VACUUM ANALYZE "`+schema+`".jobs`); err != nil {
		return nil, err
	}
	w, err = worker()
	if err != nil {
		return nil, fmt.Errorf("CQ: starting the worker on the backlog: %w", err)
	}
	defer w.Stop(context.WithoutCancel(ctx))
	// Steady state first: the worker has been taking key A's jobs for a while.
	warm := int64(min(2000, backlog/10))
	for deadline := time.Now().Add(2 * time.Minute); q.aRan.Load() < warm; {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("CQ: %d of key A's jobs ran in 2 minutes, want %d before the quiet keys", q.aRan.Load(), warm)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	aBefore := q.aRan.Load()
	t0 := time.Now()
	lat, behind, err := cqQuiet(ctx, app, q, backlog+cqQuietKeys*cqRounds)
	if err != nil {
		return nil, err
	}
	took := time.Since(t0)
	aRate := float64(q.aRan.Load()-aBefore) / took.Seconds()
	if err := w.Stop(ctx); err != nil {
		return nil, fmt.Errorf("CQ: stopping the worker: %w", err)
	}
	aDone := q.aRan.Load()
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, n := range q.runs {
		if n != 1 {
			return nil, fmt.Errorf("CQ: quiet job %d ran %d times", i, n)
		}
	}
	quiet := 2 * cqQuietKeys * cqRounds
	if len(q.runs) != quiet {
		return nil, fmt.Errorf("CQ: %d quiet jobs ran, want %d", len(q.runs), quiet)
	}
	var pending int64
	if err := cl.Pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".jobs WHERE concurrency_key = 'A' AND status = 'pending'`).Scan(&pending); err != nil {
		return nil, err
	}
	if pending+aDone > int64(backlog) {
		return nil, fmt.Errorf("CQ: %d of key A's jobs ran and %d are pending, more than the %d loaded", aDone, pending, backlog)
	}
	sort.Slice(behind, func(i, j int) bool { return behind[i] < behind[j] })
	r := &Result{Workload: "CQ", N: cqQuietKeys * cqRounds, Seconds: took.Seconds(), Settings: cl.Settings,
		Verified: fmt.Sprintf("ok: %d quiet jobs ran once each (%d with the empty queue, %d behind the backlog); %d of key A's ran, %d still pending",
			quiet, quiet/2, quiet/2, aDone, pending),
		Extra: map[string]any{
			"backlog":                             fmt.Sprintf("%s pending jobs of key A loaded in %s (INSERT … SELECT through the coordinator, 10,000 a statement, each on a new connection)", thousands(float64(backlog)), load.Round(time.Millisecond)),
			"quiet":                               fmt.Sprintf("%d rounds of one job on each of %d quiet keys, each round enqueued once the last started, with the worker (MaxWorkers %d) %s of key A's jobs in", cqRounds, cqQuietKeys, W5Workers, thousands(float64(aBefore))),
			"wait_behind_backlog_p50_p95_p99_max": pcts(lat) + fmt.Sprintf(", max %.2f ms", maxMs(lat)),
			"wait_empty_queue_p50_p95_p99_max":    pcts(control) + fmt.Sprintf(", max %.2f ms", maxMs(control)),
			"key_A_jobs_started_meanwhile":        fmt.Sprintf("median %d, max %d per quiet job (key A ran at %s jobs/s meanwhile)", behind[len(behind)/2], behind[len(behind)-1], thousands(aRate)),
		}}
	lat.fill(r)
	return r, nil
}

// maxMs is the largest of l's durations in milliseconds.
func maxMs(l *latencies) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m time.Duration
	for _, d := range l.d {
		m = max(m, d)
	}
	return float64(m.Microseconds()) / 1000
}
