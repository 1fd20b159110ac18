package chaos

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(ChildMain())
	}
	pgtest.Main(m) // TestCancelOnTimeoutKeepsTheSession's server; the scenarios start their own
}

// TestShortProfile runs three scenarios briefly with this test binary as the worker
// and relay processes, so `go test ./...` covers the harness end to end.
func TestShortProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and child processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	rep, err := Run(ctx, Config{
		Scenarios:  []string{"worker-sigkill", "zombie-sigstop", "relay-kill"},
		Seed:       7,
		FaultPhase: 4 * time.Second,
		Rate:       20,
		Workers:    2,
		ChildCommand: func() *exec.Cmd {
			return exec.Command(os.Args[0], "-test.run=^$")
		},
		Progress: &progress,
	})
	var table strings.Builder
	if rep != nil {
		rep.WriteTable(&table)
	}
	t.Logf("%s\n%s", progress.String(), table.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.Jobs == 0 || r.Faults == 0 {
			t.Errorf("%s: %d jobs, %d faults: the scenario did not run", r.Scenario, r.Jobs, r.Faults)
		}
	}
	if !rep.OK() {
		t.Fatal("invariants violated (table above)")
	}
}

func TestUnknownScenario(t *testing.T) {
	if _, err := Run(context.Background(), Config{Scenarios: []string{"no-such"}}); err == nil || !strings.Contains(err.Error(), "unknown scenario") {
		t.Fatalf("got %v, want an unknown scenario error", err)
	}
}

// TestLangSigkill runs the lang-sigkill scenario briefly: Python and Node worker
// processes SIGKILLed mid-job and one frozen past its lease, with every invariant held.
// Without Python (psycopg) or Node it skips, or fails under CI=true or
// SKIPLOCK_REQUIRE_PYTHON / SKIPLOCK_REQUIRE_NODE.
func TestLangSigkill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and child processes")
	}
	if why := langsMissing(); why != "" && !langsRequired() {
		t.Skip(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Scenarios: []string{"lang-sigkill"}, Seed: 11, FaultPhase: 4 * time.Second, Rate: 20, Workers: 2})
	var table strings.Builder
	if rep != nil {
		rep.WriteTable(&table)
	}
	t.Log(table.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Jobs == 0 || rep.Rows[0].Faults < 4 || rep.Rows[0].Skipped != "" {
		t.Fatalf("the scenario did not run: %+v", rep.Rows)
	}
	if !rep.OK() {
		t.Fatal("invariants violated (table above)")
	}
}
