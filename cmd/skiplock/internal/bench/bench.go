// Package bench runs skiplock's benchmark workloads (skiplock bench, make bench)
// against a real PostgreSQL and reports throughput and latency figures, each job
// checked for exactly-once success.
//
// The figures are for reading, never for asserting in tests: disk-sync speed on the
// same machine swings by 2× between runs, which is why B0 (the machine's INSERT
// commit rate) and B1 (the SQL ceiling of claim+complete) are measured in the same run
// and the enqueue and work figures are printed as ratios to them.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/migrate"
)

// Result is one workload's figures.
type Result struct {
	Workload   string  `json:"workload"`
	Title      string  `json:"title"`
	N          int     `json:"n"`
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	P50ms      float64 `json:"p50_ms"`
	P95ms      float64 `json:"p95_ms"`
	P99ms      float64 `json:"p99_ms"`
	Settings   string  `json:"settings"`
	// Limit names the reference figure, Ratio is JobsPerSec / that figure.
	Limit  string  `json:"limit,omitempty"`
	Ratio  float64 `json:"ratio,omitempty"`
	Target string  `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
	// Verified says how exactly-once success was checked.
	Verified string         `json:"verified,omitempty"`
	Extra    map[string]any `json:"extra,omitempty"`
	// Run is which run of several (--runs) this result comes from, counting from 1;
	// Runs, set only on a summary (Summarize), is how many runs it is the median of.
	Run  int `json:"run,omitempty"`
	Runs int `json:"runs,omitempty"`

	// judge is the rule that decides Met from the result's own figures (judgeBy), so
	// that a summary of several runs can be judged by the same rule.
	judge func(*Result) bool
}

// judgeBy sets r's target and the rule that decides it, and applies the rule.
func (r *Result) judgeBy(target string, rule func(*Result) bool) {
	r.Target, r.judge = target, rule
	r.Met = boolp(rule(r))
}

// Env is what workloads run against.
type Env struct {
	Pool     *pgxpool.Pool // admin pool
	URL      string
	Settings string // e.g. "durable: fsync=on synchronous_commit=on"
	Progress io.Writer
	// Scale shrinks every workload's size (1 = the documented sizes); tests use less.
	Scale float64
	// b0, b1 hold the baselines for ratios; w3 is F1's reference, w5 W9's.
	b0one, b0many, b1, w3, w5 float64
	// b2one, b2many and b3 are the enqueue path's references (references.go).
	b2one, b2many, b3 float64
	// created lists the schemas the running workload made (schema), dropped when it
	// ends (isolated).
	created []string

	// Citus says Pool is a Citus coordinator: every schema is laid out for Citus
	// (migrate.Citus), and the working clients run as Citus requires (citusConfig).
	Citus bool
	// Keys spreads the jobs of W3, W5 and W6 round-robin over this many concurrency
	// keys, the distribution column on Citus (0: no key).
	Keys int
	// DeleteOnSuccess makes W5's and W6's working clients delete succeeded jobs, as
	// docs/citus.md recommends on Citus (W5 then runs once, without its W5d pass).
	DeleteOnSuccess bool
	// Cluster is a Citus coordinator beside Pool, a plain node, for the workloads that
	// compare the two or run on the cluster (C1, CH, CN, CQ; docs/citus.md,
	// "Benchmarks on the cluster"); nil without one.
	Cluster *Env
}

func (e *Env) n(full int) int {
	if e.Scale <= 0 || e.Scale == 1 {
		return full
	}
	return max(int(float64(full)*e.Scale), 10)
}

// Workload is one benchmark.
type Workload struct {
	Name  string
	Title string
	Run   func(ctx context.Context, e *Env) (*Result, error)
	// Long workloads (W10, W10C and W10L: thirteen minutes each) run only when named, not
	// with "all"; so do W5PY, which needs the Python client beside the binary, and E1,
	// the cost breakdown (four minutes).
	Long bool
}

// All lists the workloads in run order (baselines first).
func All() []Workload {
	return []Workload{
		{"B0", "INSERT commit rate, 1 and 16 connections (hardware baseline)", isolated(runB0), false},
		{"B1", "raw claim+complete SQL, batches of 1,000, 2 connections (SQL ceiling)", isolated(runB1), false},
		{"B2", "plain one-row INSERT of W1's row into a table as wide as jobs (primary key only), 1 and 16 connections (W1's and W2's limit)", isolated(runB2), false},
		{"B3", "bare COPY of W3's rows into the jobs table, batches of 1,000, 2 goroutines (W3's limit)", isolated(runB3), false},
		{"W1", "enqueue one by one, sequential, 1 connection", isolated(runW1), false},
		{"W2", "enqueue from 16 goroutines", isolated(runW2), false},
		{"W3", "bulk enqueue, batches of 1,000", isolated(runW3), false},
		{"W4", "work pre-inserted jobs, concurrency 1", isolated(runW4), false},
		{"W5", "work pre-inserted jobs, best concurrency", isolated(runW5), false},
		{"W6", "latency from the enqueue call to handler start, 200 jobs/s for 10 s", isolated(runW6), false},
		{"W7", "burn-down of 1,000,000 pre-inserted jobs", isolated(runW7), false},
		{"W8", "outbox relay", isolated(runW8), false},
		{"W9", "work with limits: 1,000 keys at 5 each (not binding); then a binding queue limit of 50, 10 ms jobs", isolated(runW9), false},
		{"G1", "the HTTP worker gateway: W5's jobs worked by 100 HTTP workers (vs W5), and pickup at 200 jobs/s (vs the Go worker)", isolated(runG1), false},
		{"W10", "800 jobs/s while an idle REPEATABLE READ session pins the xmin horizon for 10 min (60 s of warm-up and 30 s of baseline before, 90 s after)", isolated(runW10), true},
		{"W10C", "W10's timeline with no pin: a control for W10's rule (what the machine alone does)", isolated(runW10Control), true},
		{"W10L", "W10 on a queue under a limit that never binds: the limited claim under the pin", isolated(runW10Limited), true},
		{"W5PY", "W5's jobs worked by the Python client on the SQL worker protocol, concurrency 100", isolated(runW5PY), true},
		{"W11", "fair queue, noisy neighbour: key A enqueues 1,000,000 jobs at once, keys B…K one every 10 ms each; B…K's pickup without the burst, with it, and with it isolated in a plain queue of its own (the machine's share of the ratio)", isolated(runW11), false},
		{"W12", "fair queue throughput, pre-inserted jobs over 1, 100 and 10,000 keys, best concurrency, each beside the plain queue (W5's shape)", isolated(runW12), false},
		{"F1", "enqueue flows of 1,000 children (one statement each), 2 goroutines", isolated(runF1), false},
		{"D1", "the dashboard on 1,000,000 jobs: every page and filter through its http.Handler", isolated(runD1), false},
		{"E1", "the per-enqueue cost breakdown: W1's insert against schemas each lacking one cost (an index, a trigger, the lineage row, the NOTIFY, the statement's shape), 1 and 16 connections, 5 interleaved rounds, with the server's CPU per enqueue (run only when named)", isolated(runE1), true},
		{"W13", "the Node client's worker on the SQL worker protocol against the Go worker, both at concurrency 16: 20,000 pre-inserted jobs in each of 3 rounds alternating which goes first, then pickup at 100 jobs/s (needs node and a built clients/node; run only when named)", isolated(runW13), true},
		{"W14", "hours without drift: 70% of W5's rate for 30 min, beside a control run of the same timeline; the disturbed run holds a snapshot for the middle 10 min and runs an analytic read every 3 min (one hour in all; run only when named)", isolated(runW14), true},
		// The Citus cluster's workloads (citus.go): run only when named, with a cluster.
		{"C1", "W3, W5 and W6 on the plain node and on the Citus cluster, in turns, with the cluster's ratio to the plain node", runC1, true},
		{"CH", "the router hop: enqueue, claim, heartbeat and finish of one job at a time, median and p99 per statement on the plain node and through the Citus coordinator", runCH, true},
		{"CN", "per-node figures on the Citus cluster: W5's shape with every key on one worker node, then over all, with each node's CPU per job, and the model of jobs/s per added worker node", runCN, true},
		{"CQ", "the quiet keys' wait on the Citus cluster while key A holds 1,000,000 pending jobs", runCQ, true},
	}
}

// Select returns the workloads named in spec ("all" or "W1,W5"); baselines that a
// selected workload's ratio needs are added.
func Select(spec string) ([]Workload, error) {
	all := All()
	if spec == "" || spec == "all" {
		var out []Workload
		for _, w := range all {
			if !w.Long {
				out = append(out, w)
			}
		}
		return out, nil
	}
	want := map[string]bool{}
	for _, w := range strings.Split(spec, ",") {
		want[strings.ToUpper(strings.TrimSpace(w))] = true
	}
	for name := range want {
		found := false
		for _, w := range all {
			found = found || w.Name == name
		}
		if !found {
			return nil, fmt.Errorf("unknown workload %q (B0…B3, W1…W14, W10C, W10L, W5PY, W13, E1, F1, D1, G1, C1, CH, CN, CQ or all)", name)
		}
	}
	if want["W14"] {
		// A wrong fixed rate is refused now, not after the workloads before W14 ran.
		if _, err := w14FixedRate(); err != nil {
			return nil, err
		}
	}
	if want["W1"] || want["W2"] {
		want["B0"], want["B2"] = true, true
	}
	if want["W3"] {
		want["B3"] = true
	}
	if want["F1"] {
		want["W3"] = true
	}
	if want["W9"] || want["G1"] || want["W5PY"] || want["W12"] || want["W14"] {
		want["W5"] = true // W9's, G1's, W5PY's and W12's targets are shares of W5 in the same run, and W14's rate is
	}
	if want["W4"] || want["W5"] || want["W7"] || want["W9"] || want["W12"] {
		want["B1"] = true
	}
	var out []Workload
	for _, w := range all {
		if want[w.Name] {
			out = append(out, w)
		}
	}
	return out, nil
}

// isolated runs a workload and then drops the schemas it made, so that no workload
// runs beside the leftovers of the ones before it. Those kept pages in shared
// buffers and gave autovacuum work during later workloads: in the full bench W7 fell
// from ~55k to ~45k jobs/s two thirds of the way through, and autovacuum was
// vacuuming B1's 100,000 jobs during its last tenth, which ran at 76% of its first
// (92–119% with the leftovers dropped; docs/benchmarks-archive.md).
func isolated(run func(context.Context, *Env) (*Result, error)) func(context.Context, *Env) (*Result, error) {
	return func(ctx context.Context, e *Env) (*Result, error) {
		e.created = nil
		r, err := run(ctx, e)
		for _, name := range e.created {
			if derr := dropSchema(context.WithoutCancel(ctx), e.Pool, name); derr != nil && err == nil {
				err = fmt.Errorf("dropping schema %s: %w", name, derr)
			}
		}
		e.created = nil
		return r, err
	}
}

// dropSchema drops the schema name and what it holds. On Citus a drop of distributed
// tables takes locks on every node, and another session's DDL on the cluster (a
// schema made or dropped beside it) can make it a distributed deadlock's victim
// (40P01), which rolls it back whole: it is then tried again, up to 5 times.
func dropSchema(ctx context.Context, pool *pgxpool.Pool, name string) error {
	var err error
	for range 5 {
		_, err = pool.Exec(ctx, `DROP SCHEMA IF EXISTS "`+name+`" CASCADE`)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
	}
	return err
}

// schema creates a fresh, migrated schema for a workload.
func (e *Env) schema(ctx context.Context, name string) (string, error) {
	if e.Citus {
		// Citus 13.2 sends a migration's function to the worker nodes with the schema's
		// name folded to lower case, which fails for "bench_W5".
		name = strings.ToLower(name)
	}
	if err := dropSchema(ctx, e.Pool, name); err != nil {
		return "", err
	}
	e.created = append(e.created, name)
	if _, err := migrate.Up(ctx, e.Pool, name); err != nil {
		return "", err
	}
	if e.Citus {
		if _, err := migrate.Citus(ctx, e.Pool, name); err != nil {
			return "", fmt.Errorf("the Citus layout of %s: %w", name, err)
		}
	}
	return name, nil
}

// clientConfig is cfg for a workload's client on e: with e.DeleteOnSuccess it deletes
// succeeded jobs, and on Citus the scheduler and the retention service are off, so
// that their walks of every shard do not run beside the workload's statements.
func (e *Env) clientConfig(cfg skiplock.Config) skiplock.Config {
	cfg.DeleteOnSuccess = cfg.DeleteOnSuccess || e.DeleteOnSuccess
	if e.Citus {
		cfg.SchedulerInterval = -1
		cfg.Retention.Interval = -1
	}
	return cfg
}

// key is the concurrency key of the i-th job of W3, W5 or W6: one of e.Keys, round
// robin, or none.
func (e *Env) key(i int) string { return keyName(i, e.Keys) }

// keyName is the i-th job's concurrency key when the jobs are spread round robin over
// keys keys ("tenant-0" …), or none when keys is 0.
func keyName(i, keys int) string {
	if keys <= 0 {
		return ""
	}
	return "tenant-" + strconv.Itoa((i%keys+keys)%keys)
}

// schemaClient creates a fresh, migrated schema, opens a pool of conns connections
// (pool) and returns a client on them; the caller closes both.
func (e *Env) schemaClient(ctx context.Context, name string, conns int32) (*skiplock.Client, *pgxpool.Pool, error) {
	schema, err := e.schema(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	pool, err := e.pool(ctx, conns)
	if err != nil {
		return nil, nil, err
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, pool, nil
}

// pool opens a pool of conns connections for a workload's clients, and returns once
// all of them are open. pgxpool.NewWithConfig returns before its MinConns are
// connected, so without the wait the first statements of a timed run queued behind
// the opening of the application's own connections: 60–100 ms of W5's 1.3 s on this
// VM (docs/benchmarks-archive.md, 2026-12-01 16:10). Opening them is the application's
// setup, like the backlog checkpointed before the clock; what each statement costs
// on its first use on a connection (parsing and planning against a cold catalog
// cache, ~17 ms for the claim) is the queue's, and stays in the throughput
// workloads' timing. The latency workloads start their clock once the working
// client's own warmer has paid it (waitWarmed).
func (e *Env) pool(ctx context.Context, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = conns
	cfg.MinConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	held := make([]*pgxpool.Conn, 0, conns)
	for range conns {
		var c *pgxpool.Conn
		if c, err = pool.Acquire(ctx); err != nil {
			break
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	if len(held) < int(conns) {
		pool.Close()
		return nil, fmt.Errorf("opening the workload's %d connections: %w", conns, err)
	}
	return pool, nil
}

// progress prints "\r[W5] done/total" to Progress until stop is closed.
func (e *Env) progress(name string, total int, done func() int64) (stop func()) {
	if e.Progress == nil {
		return func() {}
	}
	if f, ok := e.Progress.(interface{ Stat() (os.FileInfo, error) }); ok {
		if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			return func() {} // not a terminal: no bar
		}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprintf(e.Progress, "\r%-60s\r", "")
				return
			case <-t.C:
				d := done()
				width := 30
				filled := int(float64(width) * float64(d) / float64(max(total, 1)))
				filled = min(max(filled, 0), width)
				fmt.Fprintf(e.Progress, "\r[%s] %s%s %d/%d", name, strings.Repeat("█", filled), strings.Repeat("░", width-filled), d, total)
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}

// latencies collects durations and reports percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) fill(r *Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	pct := func(p float64) float64 {
		i := int(p * float64(len(l.d)-1))
		return float64(l.d[i].Microseconds()) / 1000
	}
	r.P50ms, r.P95ms, r.P99ms = pct(0.50), pct(0.95), pct(0.99)
}

func boolp(b bool) *bool { return &b }

// atLeast is the rule of a throughput target: at least rate jobs/s.
func atLeast(rate float64) func(*Result) bool {
	return func(x *Result) bool { return x.JobsPerSec >= rate }
}

// noop is the benchmark job.
type noop struct {
	I int `json:"i"`
}

func (noop) Kind() string { return "noop" }

// tracker counts handler runs per job to verify exactly-once success. It is the
// harness's own work inside every measured handler, so it is kept cheap: a job is
// known by the index its payload carries (noop.I, unique per job), counted in a slot
// of one array with an atomic add. Keyed by id instead, in 64 locked maps of
// 16-byte keys, the count was the handler's whole cost: a million random keys missed
// the cache on every run (0.94 s of the process's CPU in W7, "The harness's own
// exactly-once check" in docs/benchmarks-archive.md). Measured jobs carry 0, 1, …; warm-up
// jobs −1, −2, …, counted from the array's end. A payload the tracker cannot read, or
// an index outside the array, is counted as bad and fails verify; two jobs sharing a
// slot leave one slot at two runs and another at none, which fails it too.
type tracker struct {
	seen []atomic.Int32
	runs atomic.Int64
	bad  atomic.Int64 // payloads without a readable index in range
}

func newTracker(n int) *tracker { return &tracker{seen: make([]atomic.Int32, n)} }

// noopIndex reads noop.I from a job's payload: {"i":N} as encoding/json writes it, or
// {"i": N} as jsonb returns it.
func noopIndex(payload []byte) (int, bool) {
	const prefix = `{"i":`
	if len(payload) < len(prefix)+2 || string(payload[:len(prefix)]) != prefix || payload[len(payload)-1] != '}' {
		return 0, false
	}
	digits := payload[len(prefix) : len(payload)-1]
	if len(digits) > 0 && digits[0] == ' ' {
		digits = digits[1:]
	}
	i, err := strconv.Atoi(string(digits))
	return i, err == nil
}

// slot is the array index of a job whose payload carries index i.
func (t *tracker) slot(i int) (int, bool) {
	if i < 0 {
		i += len(t.seen)
	}
	return i, i >= 0 && i < len(t.seen)
}

func (t *tracker) handler() skiplock.HandlerFunc {
	return func(ctx context.Context, job *skiplock.Job) error {
		t.count(job.Payload)
		return nil
	}
}

// count records one run of the job whose payload is given.
func (t *tracker) count(payload []byte) {
	t.runs.Add(1)
	i, ok := noopIndex(payload)
	if ok {
		i, ok = t.slot(i)
	}
	if !ok {
		t.bad.Add(1)
		return
	}
	t.seen[i].Add(1)
}

// verify checks every job of schema succeeded exactly once (or was deleted on
// success, when deleted is true).
func (t *tracker) verify(ctx context.Context, pool *pgxpool.Pool, schema string, n int, deleted bool) (string, error) {
	var succeeded, other int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status <> 'succeeded') FROM "`+schema+`".jobs`).Scan(&succeeded, &other); err != nil {
		return "", err
	}
	dup, distinct := 0, 0
	for i := range t.seen {
		switch c := t.seen[i].Load(); {
		case c > 1:
			dup++
			distinct++
		case c == 1:
			distinct++
		}
	}
	switch {
	case t.bad.Load() > 0:
		return "", fmt.Errorf("%d handler runs had a payload without an index of this run's jobs", t.bad.Load())
	case dup > 0:
		return "", fmt.Errorf("%d jobs ran more than once", dup)
	case distinct != n:
		return "", fmt.Errorf("%d distinct jobs ran, want %d", distinct, n)
	case other != 0:
		return "", fmt.Errorf("%d jobs did not succeed", other)
	case !deleted && succeeded != int64(n):
		return "", fmt.Errorf("%d jobs succeeded, want %d", succeeded, n)
	case deleted && succeeded != 0:
		return "", fmt.Errorf("%d succeeded rows left with DeleteOnSuccess", succeeded)
	}
	if deleted {
		return fmt.Sprintf("ok: %d jobs ran once each, all deleted on success", n), nil
	}
	return fmt.Sprintf("ok: %d jobs succeeded, each ran exactly once", n), nil
}

// JSON renders results one object per line.
func JSON(w io.Writer, rs []*Result) error {
	enc := json.NewEncoder(w)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// Table renders results as a text table.
func Table(w io.Writer, rs []*Result) {
	fmt.Fprintf(w, "%-4s %-9s %8s %11s %8s %8s %8s  %-26s %-22s %s\n", "", "n", "seconds", "jobs/s", "p50 ms", "p95 ms", "p99 ms", "vs limit", "target", "check")
	for _, r := range rs {
		ratio := ""
		if r.Limit != "" {
			ratio = fmt.Sprintf("%.2f× %s", r.Ratio, r.Limit)
		}
		met := ""
		if r.Met != nil {
			met = map[bool]string{true: "MET", false: "missed"}[*r.Met]
		}
		lat := func(v float64) string {
			if v == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(w, "%-4s %-9d %8.2f %11.0f %8s %8s %8s  %-26s %-22s %s %s\n", r.Workload, r.N, r.Seconds, r.JobsPerSec,
			lat(r.P50ms), lat(r.P95ms), lat(r.P99ms), ratio, r.Target, met, r.Verified)
		keys := make([]string, 0, len(r.Extra))
		for k := range r.Extra {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "     %s: %v\n", k, r.Extra[k])
		}
	}
	if len(rs) > 0 {
		fmt.Fprintf(w, "settings: %s\n", rs[0].Settings)
	}
}

// waitWarmed waits until the working client's warmer has prepared its claim and
// completion on every one of its pool's conns connections (docs/runtime.md,
// "warmer"), as it does by itself in its first idle moments. A latency workload's
// clock starts after it: a steady worker's claims do not meet a cold connection, and
// the warmer's own statements are not part of the measured jobs' time.
func waitWarmed(ctx context.Context, workload string, worker *skiplock.Client, conns int) error {
	deadline := time.Now().Add(30 * time.Second)
	for worker.Counters().WarmedConns < int64(conns) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: warm-up: the worker warmed %d of its %d connections in 30s", workload, worker.Counters().WarmedConns, conns)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// enqueueOnEachConn holds n connections of pool at once and enqueues one no-op job
// through each, so every connection is open and has the insert prepared before a
// latency workload's clock starts (their first use would otherwise land in the tail).
func enqueueOnEachConn(ctx context.Context, workload string, app *skiplock.Client, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("%s: warm-up: acquiring connection %d: %w", workload, i, err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		if _, err := app.EnqueueTx(ctx, c, noop{I: -1 - i}, nil); err != nil {
			return fmt.Errorf("%s: warm-up: enqueueing on connection %d: %w", workload, i, err)
		}
	}
	return nil
}
