package bench

import (
	"bytes"
	"encoding/json"
	"testing"
)

func w6Run(p50, p95, p99 float64, stage string) *Result {
	r := &Result{Workload: "W6", N: 2000, JobsPerSec: 200, P50ms: p50, P95ms: p95, P99ms: p99,
		Verified: "ok", Extra: map[string]any{"claims": 1990, "stage": stage, "note": "same"}}
	r.judgeBy(w6Target, w6Met)
	return r
}

// The summary of several runs is their median, figure by figure, judged by the
// workload's own rule: two runs of three met W6 and the median meets it, though the
// mean p99 (5.83 ms) would not.
func TestSummarizeTakesTheMedianAndJudgesIt(t *testing.T) {
	t.Parallel()
	runs := [][]*Result{
		{{Workload: "B0", JobsPerSec: 3000}, w6Run(1.40, 2.0, 4.0, "a")},
		{{Workload: "B0", JobsPerSec: 1000}, w6Run(1.70, 3.5, 9.0, "b")},
		{{Workload: "B0", JobsPerSec: 2000}, w6Run(1.45, 2.5, 4.5, "c")},
	}
	sum := Summarize(runs)
	if len(sum) != 2 || sum[0].Workload != "B0" || sum[1].Workload != "W6" {
		t.Fatalf("summary = %+v, want B0 then W6", sum)
	}
	if sum[0].JobsPerSec != 2000 || sum[0].Met != nil {
		t.Fatalf("B0 summary = %+v, want 2000 jobs/s and no verdict", sum[0])
	}
	w6 := sum[1]
	if w6.P50ms != 1.45 || w6.P95ms != 2.5 || w6.P99ms != 4.5 || w6.Runs != 3 {
		t.Fatalf("W6 summary percentiles %v / %v / %v over %d runs, want 1.45 / 2.5 / 4.5 over 3", w6.P50ms, w6.P95ms, w6.P99ms, w6.Runs)
	}
	if w6.Met == nil || !*w6.Met || w6.Extra["met_in_runs"] != "2 of 3" || w6.Target != w6Target {
		t.Fatalf("W6 summary verdict %v, met in %v, target %q", w6.Met, w6.Extra["met_in_runs"], w6.Target)
	}
	if w6.Extra["claims"] != 1990 || w6.Extra["note"] != "same" {
		t.Fatalf("W6 summary extras %v: want the numeric median and the shared text kept", w6.Extra)
	}
	if _, ok := w6.Extra["stage"]; ok {
		t.Fatalf("a text figure that differs between runs was kept: %v", w6.Extra["stage"])
	}
	// One more run that misses makes the median miss.
	sum = Summarize(append(runs, []*Result{w6Run(1.8, 3.2, 6, "d")}))
	if w6 := sum[1]; w6.P50ms != (1.45+1.70)/2 || w6.Met == nil || *w6.Met || w6.Extra["met_in_runs"] != "2 of 4" {
		t.Fatalf("four runs: p50 %v, met %v in %v; want %v, missed, 2 of 4", w6.P50ms, w6.Met, w6.Extra["met_in_runs"], (1.45+1.70)/2)
	}
	var buf bytes.Buffer
	if err := JSON(&buf, sum[1:]); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Runs int   `json:"runs"`
		Met  *bool `json:"met"`
	}
	if err := json.Unmarshal(buf.Bytes(), &decoded); err != nil || decoded.Runs != 4 || decoded.Met == nil {
		t.Fatalf("summary JSON %s: %v", buf.String(), err)
	}
}

// A workload judged by something no median keeps (W10's windows) gets no verdict of
// its own, only the count of runs that met it.
func TestSummarizeWithoutARule(t *testing.T) {
	t.Parallel()
	run := func(met bool) []*Result {
		return []*Result{{Workload: "W10", JobsPerSec: 800, Met: boolp(met), Target: "windows"}}
	}
	sum := Summarize([][]*Result{run(true), run(false), run(false)})
	if len(sum) != 1 || sum[0].Met != nil || sum[0].Extra["met_in_runs"] != "1 of 3" {
		t.Fatalf("summary = %+v", sum[0])
	}
}
