package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The workloads run end to end at a tiny scale and verify their own results; the
// figures themselves are not asserted (speed targets live in `skiplock bench`).
func TestWorkloadsRunAndVerify(t *testing.T) {
	ws, err := Select("W1,W3,W4,W5,W6,W8,W9,F1")
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Pool: pgtest.Pool(t), URL: pgtest.URL(t), Settings: "test", Scale: 0.02}
	for _, w := range ws {
		r, err := w.Run(context.Background(), env)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		if r.JobsPerSec <= 0 || r.N <= 0 && w.Name != "B0" {
			t.Fatalf("%s: empty result %+v", w.Name, r)
		}
		if strings.HasPrefix(w.Name, "W") && w.Name != "W8" && !strings.HasPrefix(r.Verified, "ok") {
			t.Fatalf("%s: not verified: %q", w.Name, r.Verified)
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
		if w.Name == "W10" {
			t.Fatal(`"all" includes the twelve-minute W10`)
		}
	}
	if ws, err := Select("W10"); err != nil || len(ws) != 1 || ws[0].Name != "W10" {
		t.Fatalf("Select(W10) = %v, %v", ws, err)
	}
}
