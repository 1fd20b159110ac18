package chaos

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The failover scenarios' judgements, on records made up here: a component's resume
// time is measured from its last failed probe, a log line per retry is a violation
// while one per outage is not, and firstChange finds a node's first change of role.
func TestFailoverJudgements(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	f := &failoverRec{start: at(0), promoted: at(3000), healthy: at(5000)}
	w := &haRun{probes: map[string][]probeResult{
		"dashboard": {{at(-100), at(-50), true}, {at(100), at(200), false}, {at(2900), at(3100), false}, {at(3200), at(3300), true}},
		"metrics":   {{at(100), at(150), true}, {at(300), at(350), true}},
		"readyz":    {{at(100), at(150), false}, {at(300), at(350), false}},
		// A read that fails long after the promotion is not the failover's.
		"slow": {{at(100), at(150), false}, {at(3100), at(3200), true}, {at(14000), at(15000), false}, {at(15100), at(15200), true}},
	}}
	f.healthy = at(20000)
	if got := w.componentResume("slow", f); got != "+3.20s (1 failed probes later)" {
		t.Errorf("slow resume %q; want +3.20s with one later failure", got)
	}
	if got := w.componentResume("dashboard", f); got != "+3.30s" {
		t.Errorf("dashboard resume %q; want +3.30s (the first success after its last failure)", got)
	}
	if got := w.componentResume("metrics", f); got != "unaffected" {
		t.Errorf("metrics resume %q; want unaffected", got)
	}
	if got := w.componentResume("readyz", f); got != "never" {
		t.Errorf("readyz resume %q; want never", got)
	}
	if got := resumeAfter([]time.Time{at(1000), at(3500), at(4000)}, f); got != "+3.50s" {
		t.Errorf("resumeAfter %q; want +3.50s (the first at or after the promotion)", got)
	}
	if got := resumeAfter([]time.Time{at(1000)}, f); got != "never" {
		t.Errorf("resumeAfter with nothing after the promotion: %q", got)
	}

	w.changes = []nodeChange{{at(0), "node1", "primary"}, {at(800), "node1", "blocked"}, {at(1200), "node1", "down"},
		{at(2000), "node2", "blocked"}, {at(3000), "node2", "primary"}}
	if got := w.firstChange("node1", "primary", true, at(0)); !got.Equal(at(800)) {
		t.Errorf("node1 first not primary at %v; want +800ms", got.Sub(t0))
	}
	if got := w.firstChange("node2", "primary", false, at(0)); !got.Equal(at(3000)) {
		t.Errorf("node2 first primary at %v; want +3s (blocked is not writable)", got.Sub(t0))
	}

	ps := []pickup{{at(-500), 10 * time.Millisecond}, {at(100), 20 * time.Millisecond}, {at(200), 4 * time.Second}}
	if got := pickupSummary(ps, at(0), at(5000)); got != "2 jobs, p50 4000 ms, p99 4000 ms, max 4000 ms" {
		t.Errorf("pickupSummary %q", got)
	}
	calls := []enqueueCall{{at(-1), time.Second}, {at(0), 5 * time.Millisecond}, {at(1000), 6 * time.Millisecond}, {at(4999), 7 * time.Millisecond}, {at(5000), 9 * time.Second}}
	if got := enqueueSummary(calls, at(0), at(5000)); got != "p50 6 ms, p99 7 ms, max 7 ms" {
		t.Errorf("enqueueSummary %q; want the calls begun in [from, to)", got)
	}
	if got := enqueueSummary(calls, at(6000), at(7000)); got != "no calls" {
		t.Errorf("enqueueSummary of an empty window %q", got)
	}

	dir := t.TempDir()
	line := func(msg string) string { return `time=x level=WARN msg="` + msg + `" child=w` + "\n" }
	once := line("notify: listener connection lost; reconnecting") + line("notify: listener reconnected")
	if err := os.WriteFile(filepath.Join(dir, "w-once.log"), []byte(once), 0o644); err != nil {
		t.Fatal(err)
	}
	perRetry := strings.Repeat(line("notify: listener connection lost; reconnecting"), 5)
	if err := os.WriteFile(filepath.Join(dir, "w-retry.log"), []byte(perRetry), 0o644); err != nil {
		t.Fatal(err)
	}
	relapsed := func(n int) string {
		return `time=x level=WARN msg="skiplock: claim recovered" child=w operation=claim failing_for=2s relapses=` + strconv.Itoa(n) + "\n"
	}
	// One CI run's failover-kill: a claim failed once and recovered three times (the
	// outage relapsed twice within internal/failures.RelapseWindow).
	perJob := strings.Repeat(line("skiplock: lease lost; outcome discarded"), 5) + line("skiplock: claim failed") + line("skiplock: claim recovered") +
		relapsed(1) + relapsed(2)
	if err := os.WriteFile(filepath.Join(dir, "w-jobs.log"), []byte(perJob), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &round{h: &harness{logDir: dir}, workers: []*proc{{name: "w-once"}, {name: "w-jobs"}}}
	row := &Row{}
	r.checkLogsOnce(row, 1)
	if len(row.Violations) != 0 {
		t.Errorf("an outage logged once (lost, reconnected), and per-job warnings: %q", row.Violations)
	}
	r.workers = append(r.workers, &proc{name: "w-retry"})
	r.checkLogsOnce(row, 1)
	if len(row.Violations) != 1 || !strings.Contains(row.Violations[0], "w-retry") {
		t.Errorf("five lines for one failover: violations %q; want one naming w-retry", row.Violations)
	}
	// One CI run's failover: a heartbeat timed out before, during and after the
	// failover, each recovered at its retry: three outages, each logged once.
	var transient strings.Builder
	for range 3 {
		transient.WriteString(line("skiplock: heartbeat failed") + line("skiplock: heartbeat recovered"))
	}
	if err := os.WriteFile(filepath.Join(dir, "w-transient.log"), []byte(transient.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r.workers, row = []*proc{{name: "w-transient"}}, &Row{}
	r.checkLogsOnce(row, 1)
	if len(row.Violations) != 0 {
		t.Errorf("three outages logged once each in one failover: %q", row.Violations)
	}
	if err := os.WriteFile(filepath.Join(dir, "w-reretry.log"), []byte(line("skiplock: heartbeat failed")+line("skiplock: heartbeat failed")+line("skiplock: heartbeat recovered")), 0o644); err != nil {
		t.Fatal(err)
	}
	r.workers, row = []*proc{{name: "w-reretry"}}, &Row{}
	r.checkLogsOnce(row, 1)
	if len(row.Violations) != 1 || !strings.Contains(row.Violations[0], "heartbeat failed") {
		t.Errorf("a loss logged twice before its recovery: violations %q; want one", row.Violations)
	}
	var flaps strings.Builder
	for i := range maxRelapseLines + 1 {
		flaps.WriteString(relapsed(i + 1))
	}
	if err := os.WriteFile(filepath.Join(dir, "w-flaps.log"), []byte(line("skiplock: claim failed")+line("skiplock: claim recovered")+flaps.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r.workers, row = []*proc{{name: "w-flaps"}}, &Row{}
	r.checkLogsOnce(row, 1)
	if len(row.Violations) != 1 || !strings.Contains(row.Violations[0], "after relapses") {
		t.Errorf("%d recoveries after relapses in one failover: violations %q; want one", maxRelapseLines+1, row.Violations)
	}
}

// A split brain is judged by when the old primary's writable checks began: one begun
// before the promotion may return after it; one begun after it may not. And the
// window without a writable primary is empty when the new primary was writable
// before the old one was seen failing — /readyz is not judged over a span in which
// the old primary still answered (one CI run counted 51 correct "ready" answers as
// violations that way).
func TestSplitBrainAndOutageWindow(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	checks := []time.Time{at(100), at(2900), at(3000), at(3050), at(4000), at(9000)}
	n, first, last := writableAfter(checks, at(3000), at(5000))
	if n != 2 || !first.Equal(at(3050)) || !last.Equal(at(4000)) {
		t.Errorf("writableAfter the promotion at +3s: %d from %v to %v; want 2, +3.05s to +4s", n, first.Sub(t0), last.Sub(t0))
	}
	if n, _, _ := writableAfter(checks[:3], at(3000), at(5000)); n != 0 {
		t.Errorf("checks begun at or before the promotion counted: %d", n)
	}

	f := &failoverRec{start: at(0), oldLost: at(800), promoted: at(3000)}
	if got := f.noPrimarySince(); !got.Equal(at(800)) {
		t.Errorf("window from %v; want the old primary's first failure, +800ms", got.Sub(t0))
	}
	f.oldLost = at(5000) // still writable after the promotion
	if got := f.noPrimarySince(); !got.Equal(f.promoted) {
		t.Errorf("window from %v; want none (from the promotion)", got.Sub(t0))
	}
	f.oldLost = time.Time{}
	if got := f.noPrimarySince(); !got.Equal(f.promoted) {
		t.Errorf("never seen failing: window from %v; want none", got.Sub(t0))
	}
}

// make chaos runs every failover scenario but the one that only measures: the
// PgBouncer round is back in it (#48).
func TestShortProfileScenarios(t *testing.T) {
	all, err := selectScenarios(nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range shortProfile(all) {
		got[s.name] = true
	}
	for _, want := range []string{"failover", "failover-kill", "failover-pgbouncer"} {
		if !got[want] {
			t.Errorf("short profile lacks %s", want)
		}
	}
	if got["failover-async"] {
		t.Error("short profile runs failover-async, which only measures")
	}
	if len(got) != len(all)-1 {
		t.Errorf("short profile runs %d of %d scenarios; want all but failover-async", len(got), len(all))
	}
}
