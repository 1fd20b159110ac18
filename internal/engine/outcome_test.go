package engine

import (
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// After an ambiguous completion write, a job's row is recognised as this worker's own
// outcome only when it is exactly what that outcome writes.
func TestOwnOutcomeRecognition(t *testing.T) {
	t.Parallel()
	retry := store.Outcome{Action: store.ActionRetry, Error: "boom"}
	claimed := time.Date(2026, 11, 30, 12, 0, 0, 123456000, time.UTC)
	reclaimed := claimed.Add(40 * time.Millisecond)
	cases := []struct {
		name    string
		o       store.Outcome
		row     store.FinishedRow
		found   bool
		deleted bool
		want    string
		ok      bool
	}{
		{"our completion", store.Outcome{Action: store.ActionComplete}, store.FinishedRow{Status: "succeeded", Attempts: 2}, true, false, "succeeded", true},
		{"completed by a later claim", store.Outcome{Action: store.ActionComplete}, store.FinishedRow{Status: "succeeded", Attempts: 3}, true, false, "", false},
		{"reclaimed, not ours", store.Outcome{Action: store.ActionComplete}, store.FinishedRow{Status: "pending", Attempts: 2, LastError: "lease expired on worker w"}, true, false, "", false},
		{"still running under another lease", store.Outcome{Action: store.ActionComplete}, store.FinishedRow{Status: "running", Attempts: 3, Running: true}, true, false, "", false},
		{"our retry", retry, store.FinishedRow{Status: "pending", Attempts: 2, LastError: "boom"}, true, false, "pending", true},
		{"our retry, attempts exhausted", retry, store.FinishedRow{Status: "failed", Attempts: 2, LastError: "boom"}, true, false, "failed", true},
		{"a reclaim's retry is not ours", retry, store.FinishedRow{Status: "pending", Attempts: 2, LastError: "lease expired on worker w"}, true, false, "", false},
		{"our snooze gave the attempt back", store.Outcome{Action: store.ActionSnooze}, store.FinishedRow{Status: "pending", Attempts: 1}, true, false, "pending", true},
		{"our fail", store.Outcome{Action: store.ActionFail, Error: "bad"}, store.FinishedRow{Status: "failed", Attempts: 2, LastError: "bad"}, true, false, "failed", true},
		{"deleted on success", store.Outcome{Action: store.ActionComplete}, store.FinishedRow{}, false, true, "succeeded", true},
		{"our completion, same claim time", store.Outcome{Action: store.ActionComplete}, store.FinishedRow{Status: "succeeded", Attempts: 2, AttemptedAt: &claimed}, true, false, "succeeded", true},
		// Our claim's commit was lost in a server crash; the job was claimed again,
		// counting the same attempt, and completed under that claim.
		{"completed by a claim of the same attempt", store.Outcome{Action: store.ActionComplete}, store.FinishedRow{Status: "succeeded", Attempts: 2, AttemptedAt: &reclaimed}, true, false, "", false},
		{"a retry by a claim of the same attempt", retry, store.FinishedRow{Status: "pending", Attempts: 2, LastError: "boom", AttemptedAt: &reclaimed}, true, false, "", false},
		{"gone without DeleteOnSuccess", store.Outcome{Action: store.ActionComplete}, store.FinishedRow{}, false, false, "", false},
	}
	for _, tc := range cases {
		st, ok := ownOutcome(tc.o, 2, claimed, tc.row, tc.found, tc.deleted)
		if ok != tc.ok || (ok && st != tc.want) {
			t.Errorf("%s: got (%q, %v), want (%q, %v)", tc.name, st, ok, tc.want, tc.ok)
		}
	}
}
