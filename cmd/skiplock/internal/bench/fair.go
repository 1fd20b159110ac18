package bench

// The fair queue's workloads (docs/fairness.md): W11, the noisy neighbour — key A
// enqueues a million jobs at once while keys B…K each enqueue one job every 10 ms,
// B…K's pickup measured without the burst, with it, and with it isolated in a queue
// of its own, in the same run — and W12, the fair claim's throughput with 1, 100 and
// 10,000 keys against W5's.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/store"
)

const (
	w11Keys     = 10                    // B…K
	w11Every    = 10 * time.Millisecond // each of them enqueues one job this often
	w11Seconds  = 10                    // each measured window, at Scale 1
	w11WarmTick = 100                   // the warm-up trickle: one second
	w11Conns    = 8                     // the working client's pool, as W5's
	w11AppConns = 12                    // the enqueuers' pool: one per key, and spare
	// w11Isolated is the plain queue the isolation reference puts A's second burst in
	// (runW11), worked by the same client as the fair queue.
	w11Isolated = "w11_isolated"
)

// W11's windows: the warm-up, without the burst, with A's burst in B…K's fair queue,
// and with A's burst isolated in a plain queue of its own (the reference that tells
// the machine's share of the ratio from the queue's).
const (
	w11Warm = iota
	w11Without
	w11With
	w11Isolation
	w11Phases
)

// w11Run is the state W11's handler and enqueuers share.
type w11Run struct {
	// burst: A's jobs in the fair queue carry indexes [0, burst), its jobs in the
	// isolated queue [burst, 2·burst); B…K's the rest.
	burst int
	sent  []atomic.Int64 // by index: when B…K's job was enqueued (Unix ns), 0 for A's
	back  []atomic.Int64 // by index: when its Enqueue call returned
	ran   []atomic.Int64 // by index: when its handler began
	// claimed: by index, the job's UpdatedAt as its handler saw it, the claim
	// statement's database time (one clock with the host's on the benchmark machine).
	claimed []atomic.Int64
	ticks   [w11Phases]int // by phase: the jobs each key enqueues
	base    [w11Phases]int // by phase: the first index
	aDone   atomic.Int64   // A's jobs run in the fair queue
	isoDone atomic.Int64   // A's jobs run in the isolated queue
	tr      *tracker
	trStart skiplock.HandlerFunc
}

func (r *w11Run) handle(ctx context.Context, job *skiplock.Job) error {
	now := time.Now().UnixNano()
	if i, ok := noopIndex(job.Payload); ok {
		if i < r.burst {
			r.aDone.Add(1)
		} else if i < 2*r.burst {
			r.isoDone.Add(1)
		} else if i < len(r.sent) && r.ran[i].Load() == 0 {
			r.ran[i].Store(now)
			r.claimed[i].Store(job.UpdatedAt.UnixNano())
		}
	}
	return r.trStart(ctx, job)
}

// w11Window is one window's figures, from the times recorded by index.
type w11Window struct {
	pickup, fromCall latencies
	// stages splits fromCall: the Enqueue call, from its return to the claim, and
	// from the claim to the handler.
	stages [3]latencies
}

// window computes phase p's figures once every job ran. A job's pickup runs from
// its Enqueue call's return (the job is committed: from then on it waits for the
// queue) to its handler's first line — 0 when the handler began before the call
// returned; fromCall runs from just before the call, so it also counts the call.
func (r *w11Run) window(p int) *w11Window {
	w := &w11Window{}
	for i := r.base[p]; i < r.base[p]+r.ticks[p]*w11Keys; i++ {
		at, back, ran, claimed := r.sent[i].Load(), r.back[i].Load(), r.ran[i].Load(), r.claimed[i].Load()
		if at == 0 || back == 0 || ran == 0 {
			continue
		}
		w.pickup.add(time.Duration(max(ran-back, 0)))
		w.fromCall.add(time.Duration(ran - at))
		w.stages[0].add(time.Duration(back - at))
		w.stages[1].add(time.Duration(max(claimed-back, 0)))
		w.stages[2].add(time.Duration(ran - claimed))
	}
	return w
}

// trickle runs phase p: each of B…K enqueues ticks jobs, one every w11Every, on a
// schedule (a late enqueue does not shift the ones after it).
func (r *w11Run) trickle(ctx context.Context, app *skiplock.Client, p int) error {
	var wg sync.WaitGroup
	errs := make([]error, w11Keys)
	start := time.Now()
	for k := range w11Keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := string(rune('B' + k))
			for t := range r.ticks[p] {
				if d := time.Until(start.Add(time.Duration(t) * w11Every)); d > 0 {
					select {
					case <-ctx.Done():
						errs[k] = ctx.Err()
						return
					case <-time.After(d):
					}
				}
				i := r.base[p] + t*w11Keys + k
				r.sent[i].Store(time.Now().UnixNano())
				if _, err := app.Enqueue(ctx, noop{I: i}, &skiplock.EnqueueOpts{ConcurrencyKey: key}); err != nil {
					errs[k] = err
					return
				}
				r.back[i].Store(time.Now().UnixNano())
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runW11 is the noisy neighbour. A working client (MaxWorkers W5Workers) works a fair
// queue. After a second of warm-up, keys B…K enqueue one job each every 10 ms for
// w11Seconds (the window without the burst); then key A's million jobs are inserted
// in one statement, and B…K enqueue again for w11Seconds while A's backlog drains
// (the window with the burst). Each of B…K's jobs is timed from its Enqueue call's
// return — the job is committed and waits for the queue — to its handler's first
// line: its pickup. The target: p99 with the burst at most twice p99 without it. The
// time from just before the call is reported beside it: it adds the call's own
// commit, which competes with A's drain for the machine, not for the queue.
//
// Once A's backlog has drained, the isolation reference: A's million jobs again, now
// in a plain queue of their own (w11Isolated) that the same client works with as many
// workers, and B…K enqueue into their fair queue for w11Seconds more. The machine
// bears the same drain, but no claim of B…K's queue meets A's jobs: B…K's p99 there
// over their p99 without the burst is the machine's share of the ratio, and their p99
// with the burst over it the queue's. Then everything drains, and each job is checked
// to have succeeded exactly once.
func runW11(ctx context.Context, e *Env) (*Result, error) {
	schema, err := e.schema(ctx, "bench_w11")
	if err != nil {
		return nil, err
	}
	pool, err := e.pool(ctx, w11Conns)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	appPool, err := e.pool(ctx, w11AppConns)
	if err != nil {
		return nil, err
	}
	defer appPool.Close()
	st, err := store.New(schema)
	if err != nil {
		return nil, err
	}
	ticks := max(int(float64(w11Seconds*time.Second/w11Every)*min(e.Scale, 1)), 20)
	if e.Scale <= 0 {
		ticks = w11Seconds * int(time.Second/w11Every)
	}
	r := &w11Run{burst: e.n(1_000_000), ticks: [w11Phases]int{w11WarmTick, ticks, ticks, ticks}}
	r.base[0] = 2 * r.burst
	for p := 1; p < w11Phases; p++ {
		r.base[p] = r.base[p-1] + r.ticks[p-1]*w11Keys
	}
	total := r.base[w11Phases-1] + r.ticks[w11Phases-1]*w11Keys
	r.sent, r.back = make([]atomic.Int64, total), make([]atomic.Int64, total)
	r.ran, r.claimed = make([]atomic.Int64, total), make([]atomic.Int64, total)
	r.tr = newTracker(total)
	r.trStart = r.tr.handler()

	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("noop", r.handle, nil); err != nil {
		return nil, err
	}
	qc := skiplock.QueueConfig{MaxWorkers: W5Workers}
	worker, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Workers: ws,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: qc, w11Isolated: qc}})
	if err != nil {
		return nil, err
	}
	app, err := skiplock.NewClient(appPool, skiplock.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	if err := worker.QueueSetFair(ctx, skiplock.DefaultQueue, nil); err != nil {
		return nil, err
	}
	if err := worker.Start(ctx); err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = worker.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err := waitWarmed(ctx, "W11", worker, w11Conns); err != nil {
		return nil, err
	}
	for _, p := range []int{w11Warm, w11Without} {
		if err := r.trickle(ctx, app, p); err != nil {
			return nil, fmt.Errorf("W11: enqueueing B…K: %w", err)
		}
	}
	insertStart := time.Now()
	if _, err := st.BenchBurst(ctx, e.Pool, skiplock.DefaultQueue, "noop", "A", 0, r.burst); err != nil {
		return nil, fmt.Errorf("W11: inserting A's burst: %w", err)
	}
	burstAt := time.Now()
	if err := r.trickle(ctx, app, w11With); err != nil {
		return nil, fmt.Errorf("W11: enqueueing B…K: %w", err)
	}
	windowEnd := time.Now()
	aLeft := int64(r.burst) - r.aDone.Load()
	stopProgress := sync.OnceFunc(e.progress("W11", total, func() int64 { return r.tr.runs.Load() }))
	defer stopProgress()
	wait := func(done func() bool) error {
		for !done() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil
	}
	// The isolation reference starts once A's burst in the fair queue has drained.
	if err := wait(func() bool { return r.aDone.Load() >= int64(r.burst) }); err != nil {
		return nil, err
	}
	drainedA := time.Now()
	if _, err := st.BenchBurst(ctx, e.Pool, w11Isolated, "noop", "A", r.burst, r.burst); err != nil {
		return nil, fmt.Errorf("W11: inserting A's isolated burst: %w", err)
	}
	isoAt := time.Now()
	if err := r.trickle(ctx, app, w11Isolation); err != nil {
		return nil, fmt.Errorf("W11: enqueueing B…K: %w", err)
	}
	isoLeft := int64(r.burst) - r.isoDone.Load()
	isoEnd := time.Now()
	if err := wait(func() bool { return r.tr.runs.Load() >= int64(total) }); err != nil {
		return nil, err
	}
	stopProgress()
	stopped = true
	if err := worker.Stop(ctx); err != nil {
		return nil, err
	}
	verified, err := r.tr.verify(ctx, e.Pool, schema, total, false)
	if err != nil {
		return nil, fmt.Errorf("W11: %w", err)
	}
	res := &Result{Workload: "W11", N: total, Seconds: time.Since(insertStart).Seconds(),
		JobsPerSec: float64(r.burst+ticks*w11Keys) / drainedA.Sub(burstAt).Seconds(), Settings: e.Settings, Verified: verified,
		Extra: map[string]any{}}
	var figs, calls [w11Phases]Result
	var ws11 [w11Phases]*w11Window
	for p := w11Without; p < w11Phases; p++ {
		ws11[p] = r.window(p)
		ws11[p].pickup.fill(&figs[p])
		ws11[p].fromCall.fill(&calls[p])
	}
	without, with, iso := figs[w11Without], figs[w11With], figs[w11Isolation]
	res.P50ms, res.P95ms, res.P99ms = with.P50ms, with.P95ms, with.P99ms
	res.Extra["pickup_without_burst_ms"] = fmt.Sprintf("p50 %.2f p95 %.2f p99 %.2f (%d jobs of B…K; from Enqueue's return)", without.P50ms, without.P95ms, without.P99ms, ticks*w11Keys)
	res.Extra["pickup_with_burst_ms"] = fmt.Sprintf("p50 %.2f p95 %.2f p99 %.2f (%d jobs of B…K; from Enqueue's return)", with.P50ms, with.P95ms, with.P99ms, ticks*w11Keys)
	res.Extra["pickup_isolated_burst_ms"] = fmt.Sprintf("p50 %.2f p95 %.2f p99 %.2f (%d jobs of B…K; A's burst in the plain queue %s, worked by the same client)",
		iso.P50ms, iso.P95ms, iso.P99ms, ticks*w11Keys, w11Isolated)
	res.Extra["p99_without_burst_ms"] = without.P99ms
	res.Extra["p99_isolated_burst_ms"] = iso.P99ms
	if without.P99ms > 0 && iso.P99ms > 0 {
		res.Extra["ratio_split"] = fmt.Sprintf("p99 with ÷ without %.2f× = machine %.2f× (isolated ÷ without: the same drain in a queue of its own) × queue %.2f× (with ÷ isolated)",
			with.P99ms/without.P99ms, iso.P99ms/without.P99ms, with.P99ms/iso.P99ms)
	}
	ratio := func(a, b float64) float64 {
		if b > 0 {
			return a / b
		}
		return 0
	}
	res.Extra["from_enqueue_call_ms"] = fmt.Sprintf("without the burst p50 %.2f p99 %.2f, with it p50 %.2f p99 %.2f (p99 %.2f×), isolated p50 %.2f p99 %.2f (p99 %.2f×): the pickup plus the Enqueue call itself, whose commit competes with A's drain for the machine",
		calls[w11Without].P50ms, calls[w11Without].P99ms, calls[w11With].P50ms, calls[w11With].P99ms, ratio(calls[w11With].P99ms, calls[w11Without].P99ms),
		calls[w11Isolation].P50ms, calls[w11Isolation].P99ms, ratio(calls[w11Isolation].P99ms, calls[w11Without].P99ms))
	for p, name := range map[int]string{w11Without: "stages_without_burst", w11With: "stages_with_burst", w11Isolation: "stages_isolated_burst"} {
		var parts []string
		for k, stage := range []string{"enqueue call", "to claim", "claim to handler"} {
			var x Result
			ws11[p].stages[k].fill(&x)
			parts = append(parts, fmt.Sprintf("%s p50 %.2f p99 %.2f", stage, x.P50ms, x.P99ms))
		}
		res.Extra[name] = strings.Join(parts, "; ")
	}
	res.Extra["burst"] = fmt.Sprintf("%d jobs of key A inserted in %s; %d of them still pending when the window with the burst ended (%s)",
		r.burst, burstAt.Sub(insertStart).Round(time.Millisecond), aLeft, windowEnd.Sub(burstAt).Round(time.Millisecond))
	res.Extra["isolated_burst"] = fmt.Sprintf("%d jobs of key A inserted in the plain queue %s in %s once the first burst had drained; %d of them still pending when the isolation window ended",
		r.burst, w11Isolated, isoAt.Sub(drainedA).Round(time.Millisecond), isoLeft)
	// How hard each burst pressed on the machine while B…K were measured: A's jobs run
	// per second in each window. The plain queue drains faster than the fair one, so
	// the isolated window bears at least the same drain.
	res.Extra["a_rate_in_window"] = fmt.Sprintf("fair queue %.0f jobs/s (the window with the burst), isolated plain queue %.0f jobs/s (the isolation window)",
		float64(int64(r.burst)-aLeft)/windowEnd.Sub(burstAt).Seconds(), float64(int64(r.burst)-isoLeft)/isoEnd.Sub(isoAt).Seconds())
	res.Extra["a_drain_seconds"] = fmt.Sprintf("%.1f (without fairness, a job of B…K enqueued after the burst would wait about this long)",
		drainedA.Sub(burstAt).Seconds())
	res.Extra["keys"] = strconv.Itoa(w11Keys) + " (B…K), one job every " + w11Every.String() + " each, and A"
	if without.P99ms > 0 {
		res.Limit, res.Ratio = "p99 without burst", with.P99ms/without.P99ms
	}
	res.judgeBy("p99 with burst ≤ 2 × without", func(x *Result) bool {
		base, ok := number(x.Extra["p99_without_burst_ms"])
		return ok && base > 0 && x.P99ms <= 2*base
	})
	var warnings []string
	if aLeft <= 0 {
		// A drained within the window: the window did not measure a burst throughout.
		warnings = append(warnings, "key A's backlog drained before the window with the burst ended: raise --scale")
	}
	if isoLeft <= 0 {
		warnings = append(warnings, "key A's isolated backlog drained before the isolation window ended: raise --scale")
	}
	if len(warnings) > 0 {
		res.Extra["warning"] = strings.Join(warnings, "; ")
	}
	return res, nil
}

// w12Keys are the numbers of keys W12 spreads its jobs over.
var w12Keys = []int{1, 100, 10000}

// runW12 is W5 on a fair queue, the jobs spread over 1, 100 and 10,000 concurrency
// keys: what the fair claim costs against the plain one. Each key count runs twice,
// the plain queue first (W5's shape with the same keyed jobs: the control) and then
// the fair queue, so that each ratio compares runs a few seconds apart on a machine
// whose speed drifts; W5 of the same run is reported beside them. The result's rate
// and ratio are those of the key count whose ratio is lowest.
func runW12(ctx context.Context, e *Env) (*Result, error) {
	res := &Result{Workload: "W12", Settings: e.Settings, Extra: map[string]any{"concurrency": W5Workers}}
	for i, keys := range w12Keys {
		var rates [2]float64
		var batches string
		for k, fair := range []bool{false, true} {
			name := "W12_" + strconv.Itoa(keys) + map[bool]string{false: "_plain", true: ""}[fair]
			r, _, err := work(ctx, e, workOpts{name: name, n: e.n(50000), workers: W5Workers, keys: keys, fair: fair})
			if err != nil {
				return nil, err
			}
			res.N += r.N
			res.Seconds += r.Seconds
			rates[k] = r.JobsPerSec
			if fair {
				batches, _ = r.Extra["batches"].(string)
			}
		}
		ratio := rates[1] / rates[0]
		if i == 0 || ratio < res.Ratio {
			res.JobsPerSec, res.Ratio = rates[1], ratio
		}
		res.Extra[fmt.Sprintf("keys_%05d", keys)] = fmt.Sprintf("fair %.0f jobs/s, plain %.0f jobs/s: %.2f×; fair %s",
			rates[1], rates[0], ratio, batches)
	}
	res.Limit = "plain queue"
	if e.w5 > 0 {
		res.Extra["vs_w5"] = fmt.Sprintf("%.2f× W5 (%.0f jobs/s, earlier in the run)", res.JobsPerSec/e.w5, e.w5)
	}
	// work fails unless every job of its run succeeded exactly once.
	res.Verified = "ok: at each key count, fair and plain, every job succeeded, each ran exactly once"
	res.judgeBy("≥ 0.85 × the plain queue (W5's shape, same keys, run just before), at each key count",
		func(x *Result) bool { return x.Ratio >= 0.85 })
	return res, nil
}
