package bench

// The long-horizon workload W14 (issue #49, "hours without drift"): jobs offered at
// 70% of the W5 figure measured earlier in the same run, for 30 minutes, through the
// public API (EnqueueMany every 10 ms, open loop) to a worker with the client's
// defaults and a retention that keeps the table at a steady size. Run twice, one
// after the other in the same invocation:
//
//   - the control: nothing else happens;
//   - the disturbed run: a REPEATABLE READ session holds a snapshot and an xid for
//     the middle 10 minutes (nothing the claims, completions and retention leave
//     behind can be vacuumed meanwhile), and a heavy analytic read — a full scan of
//     the jobs table grouped and sorted, in a REPEATABLE READ transaction of its
//     own — starts every 3 minutes.
//
// Both runs are cut into windows of one minute (--scale shrinks the window, so every
// phase keeps its number of windows):
//
//	warmup  2 windows   not judged
//	before  8 windows
//	middle 10 windows   the snapshot held (disturbed run)
//	after  10 windows   the snapshot released
//
// Each window reports what was offered and completed, the pickup p50/p99 (from just
// before the EnqueueMany call to the handler's first line, for every job), the
// EnqueueMany p99, the jobs table's dead and live tuples, its heap and index sizes,
// the vacuums and analyzes that finished (each invalidates every connection's cached
// plans on the table, so the claims re-plan at once), and the claims' mean time. The
// verdict (judgeW14) holds the disturbed run beside the control.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
)

const (
	w14Window        = time.Minute // at Scale 1
	w14WarmWindows   = 2
	w14BeforeWindows = 8
	w14MiddleWindows = 10
	w14AfterWindows  = 10
	w14ReadEvery     = 3   // windows between two analytic reads (disturbed run)
	w14RateShare     = 0.7 // of W5's jobs/s in the same run
	// w14ProbeMinScale is the smallest scale at which W14 measures W5's rate at its
	// full size itself (tests run at smaller scales and use W5's own figure).
	w14ProbeMinScale = 0.05
	w14Tick          = 10 * time.Millisecond
	w14MaxBatch      = 1000 // jobs per EnqueueMany call
	w14AppConns      = 16   // the enqueuing client's pool: at most this many calls in flight
	w14WorkerConns   = 8
	// w14RetentionWindows is how long a succeeded job is kept, in windows: the table
	// reaches a steady size after it.
	w14RetentionWindows = 2
)

// W14 phases, as reported in each window.
const (
	W14Warmup = "warmup"
	W14Before = "before"
	W14Middle = "middle"
	W14After  = "after"
)

// w14Plan is W14's timeline at the run's scale.
type w14Plan struct {
	window                             time.Duration
	warm, before, middle, after, total int
}

func newW14Plan(scale float64) w14Plan {
	if scale <= 0 {
		scale = 1
	}
	p := w14Plan{window: max(time.Duration(float64(w14Window)*scale), 200*time.Millisecond),
		warm: w14WarmWindows, before: w14BeforeWindows, middle: w14MiddleWindows, after: w14AfterWindows}
	p.total = p.warm + p.before + p.middle + p.after
	return p
}

func (p w14Plan) phase(k int) string {
	switch {
	case k < p.warm:
		return W14Warmup
	case k < p.warm+p.before:
		return W14Before
	case k < p.warm+p.before+p.middle:
		return W14Middle
	default:
		return W14After
	}
}

// readAt reports whether the disturbed run starts an analytic read at window k's start.
func (p w14Plan) readAt(k int) bool { return k >= p.warm && (k-p.warm)%w14ReadEvery == 1 }

// W14Window is one window of one W14 run.
type W14Window struct {
	Phase  string  `json:"phase"`
	StartS float64 `json:"start_s"`
	// Snapshot: the snapshot was held through the window; Read: an analytic read
	// started at its start, ReadS how long it took.
	Snapshot        bool    `json:"snapshot,omitempty"`
	Read            bool    `json:"read,omitempty"`
	ReadS           float64 `json:"read_s,omitempty"`
	OfferedPerSec   float64 `json:"offered_per_sec"`
	CompletedPerSec float64 `json:"completed_per_sec"`
	P50ms           float64 `json:"p50_ms"`
	P99ms           float64 `json:"p99_ms"`
	EnqueueP99ms    float64 `json:"enqueue_p99_ms"`
	DeadTuples      int64   `json:"dead_tuples"`
	LiveTuples      int64   `json:"live_tuples"`
	TableMB         float64 `json:"table_mb"`
	IndexMB         float64 `json:"index_mb"`
	Passes          int64   `json:"passes"`
	Claims          int64   `json:"claims"`
	ClaimMeanMs     float64 `json:"claim_mean_ms"`
	// RetainedPerSec is what the worker's retention runs deleted per second
	// (Counters.RetentionDeleted): in the steady state it follows CompletedPerSec
	// two windows later. RetentionBehind counts its runs that stopped at their batch
	// cap with expired jobs left.
	RetainedPerSec  float64 `json:"retained_per_sec"`
	RetentionBehind int64   `json:"retention_behind,omitempty"`
}

// w14Mark is what the observer reads at a window's end.
type w14Mark struct {
	succeeded, claims      int64
	retained, behind       int64
	claimTime              time.Duration
	dead, live, passes     int64
	tableBytes, indexBytes int64
}

// w14Job is one job's payload: its index and when its EnqueueMany call began, in µs
// of the Unix clock (the handler, in the same process, reads the same clock).
type w14Job struct {
	I int   `json:"i"`
	T int64 `json:"t"`
}

// Kind implements skiplock.JobArgs.
func (w14Job) Kind() string { return "w14" }

// w14Recorder collects one run's readings from the enqueuers and the handler.
type w14Recorder struct {
	plan    w14Plan
	start   time.Time
	pickup  []logHist // per window of the enqueue's start
	enqueue []logHist
	ran     []atomic.Uint64 // one bit per job: its handler has run
	first   atomic.Int64    // first runs
	twice   atomic.Int64    // runs of a job that had run already
	bad     atomic.Int64    // payloads without an index in range
	all     chan struct{}   // closed when every job ran
	total   int64
	once    sync.Once
}

func newW14Recorder(plan w14Plan, total int) *w14Recorder {
	return &w14Recorder{plan: plan, pickup: make([]logHist, plan.total), enqueue: make([]logHist, plan.total),
		ran: make([]atomic.Uint64, (total+63)/64), all: make(chan struct{}), total: int64(total)}
}

// window is the window a reading taken at t belongs to.
func (r *w14Recorder) window(t time.Time) int {
	return min(max(int(t.Sub(r.start)/r.plan.window), 0), r.plan.total-1)
}

func (r *w14Recorder) handle(_ context.Context, job *skiplock.Job) error {
	now := time.Now()
	i, t, ok := w14Payload(job.Payload)
	if !ok || i < 0 || int64(i) >= r.total {
		r.bad.Add(1)
		return skiplock.Permanent(fmt.Errorf("W14: payload %q carries no job index in range", job.Payload))
	}
	begin := time.UnixMicro(t)
	bit := uint64(1) << (i % 64)
	if r.ran[i/64].Or(bit)&bit != 0 {
		r.twice.Add(1)
		return nil
	}
	r.pickup[r.window(begin)].add(now.Sub(begin))
	if r.first.Add(1) == r.total {
		r.once.Do(func() { close(r.all) })
	}
	return nil
}

// w14Payload reads {"i":N,"t":M} as the enqueuer wrote it, or {"i": N, "t": M} as jsonb
// returns it (no reflection: the handler runs tens of thousands of times a second).
func w14Payload(p []byte) (i int, t int64, ok bool) {
	s := string(p)
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return 0, 0, false
	}
	a, rest, ok1 := w14Number(s[1:len(s)-1], `"i":`)
	b, rest, ok2 := w14Number(strings.TrimPrefix(strings.TrimSpace(rest), ","), `"t":`)
	return int(a), b, ok1 && ok2 && strings.TrimSpace(rest) == ""
}

// w14Number reads `key N` at the start of s (spaces allowed around N) and returns N
// and what follows it.
func w14Number(s, key string) (int64, string, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, key) {
		return 0, "", false
	}
	s = strings.TrimLeft(s[len(key):], " ")
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || end == 0 && s[end] == '-') {
		end++
	}
	n, err := strconv.ParseInt(s[:end], 10, 64)
	return n, s[end:], err == nil
}

func (r *w14Recorder) done() int64 { return r.first.Load() }

// EnvW14Rate, when set, fixes W14's offered rate (jobs/s) instead of 70% of W5's: two
// builds compared on a shared machine, whose W5 moves with its load, then offer the same.
const EnvW14Rate = "SKIPLOCK_W14_RATE"

// w14FixedRate reads EnvW14Rate: 0 when unset.
func w14FixedRate() (float64, error) {
	v := os.Getenv(EnvW14Rate)
	if v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%s=%q is not a positive number of jobs per second", EnvW14Rate, v)
	}
	return f, nil
}

// w14Drain is how long a run waits for its last jobs after its last enqueue.
func w14Drain(plan w14Plan) time.Duration { return max(5*plan.window, 30*time.Second) }

// w14Undrained is wait's error when jobs were still waiting drain after the last
// enqueue: the run could not keep up. The run is still reported (its windows show
// where it fell behind) and its verdict is missed.
type w14Undrained struct {
	started, total int64
	drain          time.Duration
}

func (u *w14Undrained) Error() string {
	return fmt.Sprintf("%d of %d jobs started within %s of the last enqueue", u.started, u.total, u.drain)
}

// wait waits until every job ran, for at most drain; a handler run with a bad
// payload ends it at once.
func (r *w14Recorder) wait(ctx context.Context, drain time.Duration) error {
	deadline := time.NewTimer(drain)
	defer deadline.Stop()
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case <-r.all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return &w14Undrained{started: r.done(), total: r.total, drain: drain}
		case <-check.C:
			if n := r.bad.Load(); n > 0 {
				return fmt.Errorf("%d handler runs with a payload out of range", n)
			}
		}
	}
}

// w14Run is what one run of W14's timeline measured.
type w14Run struct {
	windows []W14Window
	elapsed time.Duration
	total   int
	xid     int64 // the disturbed run's held xid
	reads   []time.Duration
	// unstarted counts the jobs that had not started when the run gave up waiting
	// (w14Undrained): their pickup times are missing from the windows.
	unstarted int64
}

func runW14(ctx context.Context, e *Env) (*Result, error) {
	if e.w5 <= 0 {
		return nil, errors.New("W14: needs W5's jobs/s from the same run (name W5 too, or let Select add it)")
	}
	plan := newW14Plan(e.Scale)
	w5 := e.w5
	fixed, err := w14FixedRate()
	if err != nil {
		return nil, err
	}
	switch {
	case fixed > 0:
		w5 = fixed / w14RateShare
	case e.Scale < 1 && e.Scale >= w14ProbeMinScale:
		// W5 shrunk with the scale is a burst of a fraction of a second (5,000 jobs at
		// 0.1) whose rate moved by 2× between runs: the offered rate, and so whether
		// even the control kept up, moved with it. The rate comes from W5 at its full
		// size instead (as workload W14r, in its own schema).
		r, _, err := work(ctx, e, workOpts{name: "W14r", n: 50000, workers: W5Workers})
		if err != nil {
			return nil, err
		}
		w5 = r.JobsPerSec
	}
	rate := w14RateShare * w5
	offered := fmt.Sprintf("%.0f%% of W5's %.0f", 100*w14RateShare, w5)
	if fixed > 0 {
		offered = "fixed by " + EnvW14Rate
	}
	control, err := runW14Timeline(ctx, e, plan, rate, false)
	if err != nil {
		return nil, fmt.Errorf("W14 (control): %w", err)
	}
	disturbed, err := runW14Timeline(ctx, e, plan, rate, true)
	if err != nil {
		return nil, fmt.Errorf("W14: %w", err)
	}
	v := judgeW14(plan, rate, control.windows, disturbed.windows)
	r := &Result{Workload: "W14", N: disturbed.total, Seconds: disturbed.elapsed.Seconds(),
		JobsPerSec: float64(disturbed.total) / disturbed.elapsed.Seconds(),
		Settings: e.Settings + fmt.Sprintf("; %.0f jobs/s offered (%s): Client.EnqueueMany every %s, pool of %d; "+
			"worker: MaxWorkers %d, pool of %d, client defaults but retention: succeeded jobs kept %s, run every %s",
			rate, offered, w14Tick, w14AppConns, W5Workers, w14WorkerConns,
			time.Duration(w14RetentionWindows)*plan.window, plan.window/2),
		Target:   fmt.Sprintf("disturbed windows' median p99 ≤ %g× the control's; no upward trend; size and dead tuples within %.0f%% of the control's %d windows after the release", w14P99Factor, 100*w14Recovered, w14RecoverWindows),
		Met:      boolp(v.met() && control.unstarted == 0 && disturbed.unstarted == 0),
		Verified: fmt.Sprintf("ok: every job of both runs ran once (%d + %d jobs)", control.total, disturbed.total),
		Extra: map[string]any{
			"control":   w14Windows(control.windows),
			"disturbed": w14Windows(disturbed.windows),
			"phases": fmt.Sprintf("warm-up %s (not judged), before %s, middle %s (snapshot held in the disturbed run), after %s; windows of %s; "+
				"an analytic read every %s in the disturbed run", time.Duration(plan.warm)*plan.window, time.Duration(plan.before)*plan.window,
				time.Duration(plan.middle)*plan.window, time.Duration(plan.after)*plan.window, plan.window, time.Duration(w14ReadEvery)*plan.window),
			"measured": "pickup: from just before Client.EnqueueMany (autocommit) to the handler's first line, every job, in log buckets of 2%; " +
				"each job counted in the window its enqueue began",
			"snapshot": fmt.Sprintf("xid %d held for %s", disturbed.xid, time.Duration(plan.middle)*plan.window),
			"reads":    fmt.Sprint(disturbed.reads),
			"verdict":  v.String(),
		},
	}
	var behind []string
	for _, side := range []struct {
		name string
		run  *w14Run
	}{{"control", control}, {"disturbed", disturbed}} {
		if side.run.unstarted > 0 {
			behind = append(behind, fmt.Sprintf("the %s run: %d of its %d jobs had not started %s after its last enqueue",
				side.name, side.run.unstarted, side.run.total, w14Drain(plan)))
		}
	}
	if len(behind) > 0 {
		r.Verified = "incomplete: no job ran twice, but " + strings.Join(behind, "; ") + " (their pickups are missing from the windows)"
		r.Extra["verdict"] = "missed: a run did not keep up; " + v.String()
	}
	return r, nil
}

// runW14Timeline runs W14's timeline once: the control (disturb false) or the
// disturbed run.
func runW14Timeline(ctx context.Context, e *Env, plan w14Plan, rate float64, disturb bool) (*w14Run, error) {
	name := "bench_w14c"
	if disturb {
		name = "bench_w14"
	}
	schema, err := e.schema(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("creating the schema: %w", err)
	}
	total := int(rate * (time.Duration(plan.total) * plan.window).Seconds())
	rec := newW14Recorder(plan, total)
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("w14", rec.handle, nil); err != nil {
		return nil, fmt.Errorf("registering the handler: %w", err)
	}
	workerPool, err := e.pool(ctx, w14WorkerConns)
	if err != nil {
		return nil, fmt.Errorf("worker pool: %w", err)
	}
	defer workerPool.Close()
	worker, err := skiplock.NewClient(workerPool, skiplock.Config{Schema: schema, Workers: ws,
		Queues:         map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: W5Workers}},
		HorizonWarning: -1,
		Retention:      skiplock.RetentionConfig{Succeeded: time.Duration(w14RetentionWindows) * plan.window, Interval: plan.window / 2}})
	if err != nil {
		return nil, fmt.Errorf("creating the worker: %w", err)
	}
	if err := worker.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting the worker: %w", err)
	}
	defer worker.Stop(context.WithoutCancel(ctx))
	appPool, err := e.pool(ctx, w14AppConns)
	if err != nil {
		return nil, fmt.Errorf("enqueuing pool: %w", err)
	}
	defer appPool.Close()
	app, err := skiplock.NewClient(appPool, skiplock.Config{Schema: schema})
	if err != nil {
		return nil, fmt.Errorf("creating the enqueuing client: %w", err)
	}
	defer app.Close()
	if err := waitWarmed(ctx, "W14", worker, w14WorkerConns); err != nil {
		return nil, err
	}
	label := "W14 control"
	if disturb {
		label = "W14"
	}
	stopBar := e.progress(label, total, rec.done)
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(stopBar) }
	defer stop()

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	marks := make([]w14Mark, plan.total+1)
	statsSQL := `SELECT coalesce(n_dead_tup, 0), coalesce(n_live_tup, 0),
  vacuum_count + autovacuum_count + analyze_count + autoanalyze_count, pg_table_size(relid), pg_indexes_size(relid)
FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'`
	read := func() (w14Mark, error) {
		c := worker.Counters()
		m := w14Mark{succeeded: c.Succeeded, claims: c.ClaimStatements, claimTime: c.ClaimTime,
			retained: c.RetentionDeleted, behind: c.RetentionBehind}
		err := e.Pool.QueryRow(ctx, statsSQL, schema).Scan(&m.dead, &m.live, &m.passes, &m.tableBytes, &m.indexBytes)
		return m, err
	}
	if marks[0], err = read(); err != nil {
		return nil, fmt.Errorf("reading the table statistics: %w", err)
	}
	rec.start = time.Now()
	run := &w14Run{total: total}
	readTimes := make([]time.Duration, plan.total)
	obsErr := make(chan error, 1)
	go func() {
		err := w14Observe(runCtx, e, plan, rec.start, schema, disturb, marks, readTimes, &run.xid, read)
		if err != nil {
			cancelRun()
		}
		obsErr <- err
	}()

	enqErr := w14Generate(runCtx, app, rec, rate, total)
	if err := <-obsErr; err != nil {
		return nil, err
	}
	if enqErr != nil {
		return nil, enqErr
	}
	drain := w14Drain(plan)
	var undrained *w14Undrained
	if err := rec.wait(ctx, drain); errors.As(err, &undrained) {
		run.unstarted = undrained.total - undrained.started
	} else if err != nil {
		return nil, err
	}
	run.elapsed = time.Since(rec.start)
	stop()
	if err := worker.Stop(ctx); err != nil {
		return nil, fmt.Errorf("stopping the worker: %w", err)
	}
	if n := rec.twice.Load(); n > 0 {
		return nil, fmt.Errorf("%d handler runs of a job that had run already", n)
	}
	if n := rec.bad.Load(); n > 0 {
		return nil, fmt.Errorf("%d handler runs with a payload out of range", n)
	}
	run.windows = w14Split(plan, rec, marks, readTimes, disturb)
	for _, d := range readTimes {
		if d > 0 {
			run.reads = append(run.reads, d.Round(time.Millisecond))
		}
	}
	return run, nil
}

// w14Generate offers total jobs at rate per second from rec.start: at every tick the
// jobs that fell due go out in EnqueueMany calls of at most w14MaxBatch, each in a
// goroutine of its own, at most w14AppConns at a time (a machine that cannot keep up
// shows as windows offered below the rate).
func w14Generate(ctx context.Context, app *skiplock.Client, rec *w14Recorder, rate float64, total int) error {
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var first error
	slots := make(chan struct{}, w14AppConns)
	tick := time.NewTicker(w14Tick)
	defer tick.Stop()
	launched := 0
	for launched < total && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		due := min(int(time.Since(rec.start).Seconds()*rate)+1, total)
		for launched < due && ctx.Err() == nil {
			n := min(due-launched, w14MaxBatch)
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				continue
			}
			wg.Add(1)
			go func(from, n int) {
				defer wg.Done()
				defer func() { <-slots }()
				begin := time.Now()
				params := make([]skiplock.EnqueueParams, n)
				for k := range params {
					params[k] = skiplock.EnqueueParams{Kind: "w14",
						Payload: []byte(`{"i":` + strconv.Itoa(from+k) + `,"t":` + strconv.FormatInt(begin.UnixMicro(), 10) + `}`)}
				}
				_, err := app.EnqueueMany(ctx, params)
				rec.enqueue[rec.window(begin)].add(time.Since(begin))
				if err != nil {
					errMu.Lock()
					first = errors.Join(first, fmt.Errorf("enqueueing jobs %d…%d: %w", from, from+n-1, err))
					errMu.Unlock()
				}
			}(launched, n)
			launched += n
		}
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
