package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The workloads run end to end at a tiny scale and verify their own results; the
// figures themselves are not asserted (speed targets live in `skiplock bench`).
func TestWorkloadsRunAndVerify(t *testing.T) {
	ws, err := Select("W1,W3,W4,W5,W6,W8,W9,W11,W12,F1,G1")
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Pool: pgtest.Pool(t), URL: pgtest.URL(t), Settings: "test", Scale: 0.02}
	for _, w := range ws {
		r, err := w.Run(context.Background(), env)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		if r.JobsPerSec <= 0 || r.N <= 0 && w.Name != "B0" && w.Name != "B2" {
			t.Fatalf("%s: empty result %+v", w.Name, r)
		}
		if (strings.HasPrefix(w.Name, "W") && w.Name != "W8" || w.Name == "G1") && !strings.HasPrefix(r.Verified, "ok") {
			t.Fatalf("%s: not verified: %q", w.Name, r.Verified)
		}
		// W6's stages hear the notifications at the working client's own listener.
		if n, _ := r.Extra["notifications"].(string); w.Name == "W6" && (n == "" || strings.HasPrefix(n, "0 ")) {
			t.Fatalf("W6 heard no notification: %q", n)
		}
	}
	if _, err := Select("W99"); err == nil {
		t.Fatal("unknown workload accepted")
	}
	all, err := Select("all")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range all {
		if w.Long {
			t.Fatalf(`"all" includes the thirteen-minute %s`, w.Name)
		}
	}
	for _, name := range []string{"W10", "W10C", "W10L"} {
		if ws, err := Select(strings.ToLower(name)); err != nil || len(ws) != 1 || ws[0].Name != name {
			t.Fatalf("Select(%s) = %v, %v", name, ws, err)
		}
	}
}

// A workload's pool is fully connected when the workload gets it, so no timed run
// waits for the opening of the application's own connections (pgxpool opens its
// MinConns in the background); a pool that cannot connect is an error, not a
// workload that starts anyway.
func TestPoolIsConnectedBeforeTheClock(t *testing.T) {
	t.Parallel()
	env := &Env{Pool: pgtest.Pool(t), URL: pgtest.URL(t)}
	pool, err := env.pool(context.Background(), 6)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if st := pool.Stat(); st.TotalConns() != 6 || st.IdleConns() != 6 {
		t.Fatalf("pool has %d connections (%d idle) on return, want 6 open and idle", st.TotalConns(), st.IdleConns())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bad := &Env{URL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	if p, err := bad.pool(ctx, 2); err == nil {
		p.Close()
		t.Fatal("a pool that cannot connect was returned without an error")
	}
}

// D1 runs end to end at a small scale: the table is filled, and every page answers
// with its expected status (a page that fails is an error); the timings are not
// asserted.
func TestD1RunsAtSmallScale(t *testing.T) {
	t.Parallel()
	ws, err := Select("d1")
	if err != nil || len(ws) != 1 {
		t.Fatalf("Select(d1) = %v, %v", ws, err)
	}
	env := &Env{Pool: pgtest.Pool(t), URL: pgtest.URL(t), Settings: "test", Scale: 0.005}
	r, err := ws[0].Run(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if r.N != 5000 || !strings.HasPrefix(r.Verified, "ok") || r.Extra["page 01"] == nil || r.P95ms <= 0 {
		t.Fatalf("D1: %+v", r)
	}
}

// W5PY runs the Python client against a tiny backlog and verifies it; without
// Python's psycopg it skips, unless CI=true or SKIPLOCK_REQUIRE_PYTHON=1.
func TestW5PYRunsAtSmallScale(t *testing.T) {
	t.Parallel()
	if _, _, err := PythonClient("W5PY"); err != nil {
		if os.Getenv("CI") == "true" || os.Getenv("SKIPLOCK_REQUIRE_PYTHON") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	env := &Env{Pool: pgtest.Pool(t), URL: pgtest.URL(t), Settings: "test", Scale: 0.01}
	r, err := isolated(runW5PY)(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if r.N != 500 || r.JobsPerSec <= 0 || !strings.HasPrefix(r.Verified, "ok") {
		t.Fatalf("W5PY: %+v", r)
	}
}
