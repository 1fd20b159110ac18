package bench

// Several runs (skiplock bench --runs N): one disk sync on this kind of machine can
// take twice as long in one minute as in the next, so a single run of a latency
// workload says little, and issue #16 states W6's target as the median of three
// runs. Summarize turns the runs into that median, judged by each workload's own
// rule.

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Summarize returns, for each workload in runs (each run's results in workload
// order), one result holding the median over the runs of each figure: seconds,
// jobs/s, p50, p95, p99, the ratio to the run's own baseline, and every numeric
// extra figure (a text figure is kept when every run has the same). Each
// percentile is the median of that percentile over the runs, as issue #16 states
// W6's target. The summary is judged by the workload's own rule when it has one
// (W10's verdict reads its windows, which no median keeps: it has none), and says in
// how many runs the target was met.
func Summarize(runs [][]*Result) []*Result {
	var order []string
	byName := map[string][]*Result{}
	for _, run := range runs {
		for _, r := range run {
			if r == nil {
				continue
			}
			if _, seen := byName[r.Workload]; !seen {
				order = append(order, r.Workload)
			}
			byName[r.Workload] = append(byName[r.Workload], r)
		}
	}
	out := make([]*Result, 0, len(order))
	for _, name := range order {
		out = append(out, summarize(byName[name]))
	}
	return out
}

// summarize is Summarize for one workload's results (at least one).
func summarize(rs []*Result) *Result {
	first := rs[0]
	pick := func(f func(*Result) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = f(r)
		}
		return median(vs)
	}
	s := &Result{
		Workload: first.Workload, Title: first.Title, N: first.N, Settings: first.Settings,
		Limit: first.Limit, Target: first.Target, Runs: len(rs), judge: first.judge,
		Seconds:    pick(func(r *Result) float64 { return r.Seconds }),
		JobsPerSec: pick(func(r *Result) float64 { return r.JobsPerSec }),
		P50ms:      pick(func(r *Result) float64 { return r.P50ms }),
		P95ms:      pick(func(r *Result) float64 { return r.P95ms }),
		P99ms:      pick(func(r *Result) float64 { return r.P99ms }),
		Ratio:      pick(func(r *Result) float64 { return r.Ratio }),
		Verified:   fmt.Sprintf("median of %d runs", len(rs)),
		Extra:      map[string]any{},
	}
	if first.Verified != "" {
		s.Verified += "; each run " + first.Verified
	}
	for k, v := range first.Extra {
		if m, ok := medianExtra(rs, k); ok {
			s.Extra[k] = m
		} else if same(rs, k, v) {
			s.Extra[k] = v // a setting or note every run shares
		}
	}
	s.Extra["runs"] = perRun(rs)
	met, judged := 0, 0
	for _, r := range rs {
		if r.Met != nil {
			judged++
			if *r.Met {
				met++
			}
		}
	}
	if judged > 0 {
		s.Extra["met_in_runs"] = fmt.Sprintf("%d of %d", met, judged)
	}
	if s.judge != nil {
		s.Met = boolp(s.judge(s))
	}
	return s
}

// medianExtra is the median of extra figure k over the runs, when every run has it
// as a number: an int if they all were ints (rounded), else a float.
func medianExtra(rs []*Result, k string) (any, bool) {
	vs := make([]float64, len(rs))
	ints := true
	for i, r := range rs {
		v, ok := number(r.Extra[k])
		if !ok {
			return nil, false
		}
		_, isInt := r.Extra[k].(int)
		ints = ints && isInt
		vs[i] = v
	}
	m := median(vs)
	if ints {
		return int(math.Round(m)), true
	}
	return m, true
}

// same reports whether every run's extra figure k reads as v.
func same(rs []*Result, k string, v any) bool {
	want := fmt.Sprint(v)
	for _, r := range rs {
		if x, ok := r.Extra[k]; !ok || fmt.Sprint(x) != want {
			return false
		}
	}
	return true
}

// number reads an extra figure that is a number.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// median of vs (not empty): the middle value, or the mean of the two middle ones.
func median(vs []float64) float64 {
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// perRun lists each run's headline figures, in run order: jobs/s, and the
// percentiles when the workload measures latency.
func perRun(rs []*Result) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		p := fmt.Sprintf("%.0f jobs/s", r.JobsPerSec)
		if r.P50ms > 0 {
			p += fmt.Sprintf(", p50/p95/p99 %.2f / %.2f / %.2f ms", r.P50ms, r.P95ms, r.P99ms)
		}
		if r.Met != nil {
			p += map[bool]string{true: ", met", false: ", missed"}[*r.Met]
		}
		parts[i] = p
	}
	return strings.Join(parts, "; ")
}
