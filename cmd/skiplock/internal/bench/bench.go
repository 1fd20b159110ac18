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
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
