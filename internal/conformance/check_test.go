package conformance_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/conformance"
)

// TestCheckFindsEveryDifference: each expectation of a scenario catches the row that
// breaks it, so a runner that writes a stale outcome, skips the business row or
// retries at once fails the suite.
func TestCheckFindsEveryDifference(t *testing.T) {
	t.Parallel()
	suite, err := conformance.Load()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]conformance.Expect{}
	for _, sc := range suite.Scenarios {
		byName[sc.Name] = sc.Expect[0]
	}
	now := time.Now()
	str := func(s string) *string { return &s }
	hist := func(outcomes ...string) []conformance.HistoryEntry {
		var h []conformance.HistoryEntry
		for _, o := range outcomes {
			h = append(h, conformance.HistoryEntry{Outcome: o, FinishedAt: now})
		}
		return h
	}
	cases := []struct {
		scenario string
		row      conformance.Row
		want     string // "" conforms; else a part of the difference reported
	}{
		{"lease_lost_stale_completion", conformance.Row{Status: "pending", Attempts: 1, LastError: str("lease expired on worker w (attempt 1)"), History: hist("lease_expired")}, ""},
		{"lease_lost_stale_completion", conformance.Row{Status: "succeeded", Attempts: 1, Output: json.RawMessage(`{"late":true}`), LastError: str("lease expired on worker w (attempt 1)"), History: hist("lease_expired")}, "status succeeded, want pending"},
		{"complete_tx_lease_lost", conformance.Row{Status: "pending", Attempts: 1, LastError: str("lease expired on worker w"), History: hist("lease_expired"), Effects: 1}, "1 business rows, want 0"},
		{"retry_backoff", conformance.Row{Status: "succeeded", Attempts: 2, Output: json.RawMessage(`{"ok":true}`), LastError: str("boom"), History: hist("retried"), RunAt: now.Add(1050 * time.Millisecond)}, ""},
		{"retry_backoff", conformance.Row{Status: "succeeded", Attempts: 2, Output: json.RawMessage(`{"ok":true}`), LastError: str("boom"), History: hist("retried"), RunAt: now}, "retried 0 ms after the failure"},
		{"claim_complete", conformance.Row{Status: "succeeded", Attempts: 1, Output: json.RawMessage(`{"n":1,"s":"unicode"}`)}, "output"},
		{"claim_complete", conformance.Row{Status: "succeeded", Attempts: 1, Output: json.RawMessage(`{"s":"ünïcode","n":1}`), LastError: str("x")}, "last_error"},
		{"permanent_failure", conformance.Row{Status: "failed", Attempts: 1, LastError: str("bad input"), History: hist("failed")}, ""},
		{"permanent_failure", conformance.Row{Status: "failed", Attempts: 1, LastError: str("permanent: bad input"), History: hist("failed")}, "last_error"},
		{"permanent_failure", conformance.Row{Status: "failed", Attempts: 1, LastError: str("bad"), History: hist("failed")}, "last_error"},
		{"snooze", conformance.Row{Status: "pending", Attempts: 1, History: hist("snoozed"), RunAt: now.Add(time.Hour), Now: now}, "attempts 1, want 0"},
		{"snooze", conformance.Row{Status: "pending", History: hist("snoozed"), RunAt: now, Now: now}, "run_at in 0 ms"},
		{"sigkill_reclaim", conformance.Row{Status: "succeeded", Attempts: 2, Output: json.RawMessage(`{"ok":true}`), LastError: str("lease expired on worker w"), History: hist("retried")}, "history outcomes"},
	}
	for _, c := range cases {
		diffs := byName[c.scenario].Check(c.row)
		got := strings.Join(diffs, "; ")
		switch {
		case c.want == "" && len(diffs) > 0:
			t.Errorf("%s: %+v: unexpected differences: %s", c.scenario, c.row, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s: %+v: differences %q, want one containing %q", c.scenario, c.row, got, c.want)
		}
	}
}
