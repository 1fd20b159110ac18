package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// stats names the session that holds the vacuum horizon, in text and in JSON. The
// database is the test's own: the horizon is the database's.
func TestStatsShowsTheVacuumHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Database(t)
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := execute(ctx, &out, &errb, append([]string{"--database-url", url}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errb.String())
		}
		return out.String()
	}
	run("migrate", "up")
	if out := run("stats"); !strings.Contains(out, "vacuum horizon: no other transaction open; jobs: 0 dead tuples") {
		t.Fatalf("stats with nothing open:\n%s", out)
	}

	pid, _ := pgtest.HoldHorizon(t, url)
	if out := run("stats"); !strings.Contains(out, fmt.Sprintf("vacuum horizon: session %d (idle in transaction), open ", pid)) {
		t.Fatalf("stats with session %d pinning the horizon:\n%s", pid, out)
	}
	var st statsJSON
	if err := json.Unmarshal([]byte(run("stats", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if h := st.VacuumHorizon; h.Holder != "session" || h.PID != pid || h.State != "idle in transaction" || h.HeldForSeconds == nil {
		t.Fatalf("stats -o json: vacuum_horizon %+v; want session %d, idle in transaction, held_for_seconds set", h, pid)
	}
}
