package bench

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// W14 runs end to end at the smallest scale (windows of 200 ms, 6 s a run): both runs'
// windows cover the four phases, every job ran once, the disturbed run held a
// snapshot (its xid is reported) and ran its analytic reads, and the verdict names
// each of its parts. The verdict itself is not asserted: at this scale it is noise.
func TestW14QuickScale(t *testing.T) {
	t.Parallel()
	env := &Env{Pool: pgtest.Pool(t), URL: pgtest.URL(t), Settings: "test", Scale: 0.001, w5: 1000}
	r, err := isolated(runW14)(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if r.Workload != "W14" || r.Met == nil || !strings.HasPrefix(r.Verified, "ok") || r.N != 6*700 {
		t.Fatalf("result %+v", r)
	}
	plan := newW14Plan(env.Scale)
	for _, side := range []string{"control", "disturbed"} {
		ws, ok := r.Extra[side].(w14Windows)
		if !ok || len(ws) != plan.total {
			t.Fatalf("%s windows: %T %d", side, r.Extra[side], len(ws))
		}
		phases := map[string]int{}
		var offered float64
		var snaps, reads int
		for _, w := range ws {
			phases[w.Phase]++
			offered += w.OfferedPerSec * plan.window.Seconds()
			if w.Snapshot {
				snaps++
			}
			if w.Read {
				reads++
				if w.ReadS <= 0 {
					t.Errorf("%s window @%.1fs: a read without its time", side, w.StartS)
				}
			}
			if w.TableMB <= 0 {
				t.Errorf("%s window @%.1fs: no table size", side, w.StartS)
			}
		}
		if phases[W14Warmup] != plan.warm || phases[W14Before] != plan.before || phases[W14Middle] != plan.middle || phases[W14After] != plan.after {
			t.Errorf("%s phases %v", side, phases)
		}
		if math.Round(offered) != float64(r.N) {
			t.Errorf("%s: %v jobs counted in the windows, %d offered", side, offered, r.N)
		}
		wantSnaps, wantReads := 0, 0
		if side == "disturbed" {
			wantSnaps, wantReads = plan.middle, 9
		}
		if snaps != wantSnaps || reads != wantReads {
			t.Errorf("%s: %d windows with the snapshot, %d with a read; want %d, %d", side, snaps, reads, wantSnaps, wantReads)
		}
	}
	if s, _ := r.Extra["snapshot"].(string); !strings.HasPrefix(s, "xid ") || strings.HasPrefix(s, "xid 0 ") {
		t.Errorf("snapshot %q", s)
	}
	v, _ := r.Extra["verdict"].(string)
	for _, part := range []string{"disturbed windows' median p99", "drift", "windows after the release", "control: ", "disturbed: "} {
		if !strings.Contains(v, part) {
			t.Errorf("verdict lacks %q: %s", part, v)
		}
	}
}

func TestW14NeedsW5(t *testing.T) {
	t.Parallel()
	if _, err := runW14(context.Background(), &Env{}); err == nil || !strings.Contains(err.Error(), "W5") {
		t.Fatalf("err %v", err)
	}
	ws, err := Select("W14")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	if got := strings.Join(names, ","); got != "B1,W5,W14" {
		t.Errorf("Select(W14) = %s", got)
	}
	all, _ := Select("all")
	for _, w := range all {
		if w.Name == "W14" {
			t.Error("W14 runs with all")
		}
	}
}

func TestW14Payload(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		i    int
		t    int64
		good bool
	}{
		{`{"i":12,"t":1700000000000000}`, 12, 1700000000000000, true},
		{`{"i":0,"t":5}`, 0, 5, true},
		{`{"i": 7, "t": 9}`, 7, 9, true},
		{`{"i": 7, "t": 9, "x": 1}`, 0, 0, false},
		{`{"i":12}`, 0, 0, false},
		{`{"i":x,"t":5}`, 0, 0, false},
		{`{"t":5,"i":1}`, 0, 0, false},
		{``, 0, 0, false},
	} {
		i, ts, ok := w14Payload([]byte(c.in))
		if ok != c.good || (ok && (i != c.i || ts != c.t)) {
			t.Errorf("w14Payload(%q) = %d, %d, %v", c.in, i, ts, ok)
		}
	}
}

func TestLogHistQuantile(t *testing.T) {
	t.Parallel()
	var h logHist
	if h.quantile(0.99) != 0 {
		t.Fatal("empty histogram has a quantile")
	}
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 500}, {0.99, 990}, {1, 1000}} {
		if got := h.quantile(c.q); got < c.want || got > c.want*histGrowth*histGrowth {
			t.Errorf("quantile(%v) = %v ms, want within 2%% above %v", c.q, got, c.want)
		}
	}
	h.add(0)
	if h.count() != 1001 {
		t.Errorf("count %d", h.count())
	}
}

// judgeW14 fails each of its rules on windows built to break it, and meets on
// windows that hold.
func TestJudgeW14(t *testing.T) {
	t.Parallel()
	plan := newW14Plan(1)
	const rate = 1000
	build := func(disturbed bool, edit func(k int, w *W14Window)) []W14Window {
		ws := make([]W14Window, plan.total)
		for k := range ws {
			ws[k] = W14Window{Phase: plan.phase(k), StartS: float64(k * 60), Snapshot: disturbed && plan.phase(k) == W14Middle,
				Read: disturbed && plan.readAt(k), OfferedPerSec: rate, CompletedPerSec: rate, P99ms: 10, TableMB: 100, IndexMB: 50, DeadTuples: 5000}
			if edit != nil {
				edit(k, &ws[k])
			}
		}
		return ws
	}
	control := build(false, nil)
	if v := judgeW14(plan, rate, control, build(true, nil)); !v.met() {
		t.Fatalf("steady windows missed: %s", v)
	}
	for _, c := range []struct {
		name string
		edit func(k int, w *W14Window)
		want func(w14Verdict) bool
	}{
		{"p99 under the snapshot", func(k int, w *W14Window) {
			if w.Snapshot || w.Read {
				w.P99ms = 16
			}
		}, func(v w14Verdict) bool { return v.ratio > 1.59 && v.ratio < 1.61 && v.trendOK() }},
		{"drift", func(k int, w *W14Window) {
			if k >= plan.total-w14RecoverWindows {
				w.P99ms = 13
			}
		}, func(v w14Verdict) bool { return !v.trendOK() && v.ratio <= w14P99Factor }},
		{"size kept", func(k int, w *W14Window) {
			if k >= plan.warm+plan.before {
				w.TableMB = 200
			}
		}, func(v w14Verdict) bool { return !v.sizeRecovered && v.deadRecovered }},
		{"dead tuples kept", func(k int, w *W14Window) {
			if k >= plan.warm+plan.before {
				w.DeadTuples = 500000
			}
		}, func(v w14Verdict) bool { return v.sizeRecovered && !v.deadRecovered }},
		{"slow", func(k int, w *W14Window) {
			if k == 20 {
				w.CompletedPerSec = rate / 3
			}
			if k == 21 {
				w.CompletedPerSec = rate * 5 / 3
			}
		}, func(v w14Verdict) bool {
			return len(v.disturbed.slow) == 1 && strings.Contains(v.String(), "fell behind")
		}},
	} {
		v := judgeW14(plan, rate, control, build(true, c.edit))
		if v.met() || !c.want(v) {
			t.Errorf("%s: met %v, verdict %s", c.name, v.met(), v)
		}
	}
	behind := build(false, func(k int, w *W14Window) { w.OfferedPerSec = rate / 2; w.CompletedPerSec = rate / 2 })
	if v := judgeW14(plan, rate, behind, build(true, nil)); !strings.Contains(v.String(), "the control itself did not keep up") {
		t.Errorf("a control behind the rate is not named: %s", v)
	}
}

// A run whose jobs do not all start within the drain reports how many did, as a
// w14Undrained (runW14 then reports the run as fallen behind rather than failing);
// a handler run with a bad payload still ends the wait at once with an error of its own.
func TestW14WaitUndrained(t *testing.T) {
	t.Parallel()
	rec := newW14Recorder(newW14Plan(0.001), 3)
	rec.start = time.Now()
	if err := rec.handle(context.Background(), &skiplock.Job{Payload: []byte(`{"i":1,"t":0}`)}); err != nil {
		t.Fatal(err)
	}
	var u *w14Undrained
	if err := rec.wait(context.Background(), 20*time.Millisecond); !errors.As(err, &u) || u.started != 1 || u.total != 3 {
		t.Fatalf("wait: %v, want 1 of 3 started", err)
	}
	for _, i := range []int{0, 2} {
		if err := rec.handle(context.Background(), &skiplock.Job{Payload: []byte(`{"i":` + strconv.Itoa(i) + `,"t":0}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.wait(context.Background(), time.Second); err != nil {
		t.Fatalf("wait with every job started: %v", err)
	}
	rec2 := newW14Recorder(newW14Plan(0.001), 1)
	rec2.bad.Add(1)
	if err := rec2.wait(context.Background(), time.Second); err == nil || errors.As(err, &u) {
		t.Fatalf("wait with a bad payload: %v, want its own error", err)
	}
}

// SKIPLOCK_W14_RATE fixes the offered rate; a value that is not a positive number is
// refused with the variable's name.
func TestW14FixedRate(t *testing.T) {
	for _, c := range []struct {
		v    string
		want float64
		ok   bool
	}{{"", 0, true}, {"4000", 4000, true}, {"0", 0, false}, {"-1", 0, false}, {"fast", 0, false}, {"NaN", 0, false}} {
		t.Setenv(EnvW14Rate, c.v)
		got, err := w14FixedRate()
		if got != c.want || (err == nil) != c.ok || err != nil && !strings.Contains(err.Error(), EnvW14Rate) {
			t.Errorf("%s=%q: %v, %v", EnvW14Rate, c.v, got, err)
		}
	}
}

// TestSelectRefusesABadW14Rate: naming W14 with a wrong SKIPLOCK_W14_RATE fails at
// once, before any workload runs.
func TestSelectRefusesABadW14Rate(t *testing.T) {
	t.Setenv(EnvW14Rate, "abc")
	if _, err := Select("W14"); err == nil || !strings.Contains(err.Error(), EnvW14Rate) {
		t.Fatalf("Select(W14) with %s=abc: %v; want an error naming it", EnvW14Rate, err)
	}
	if _, err := Select("W5"); err != nil {
		t.Fatalf("Select(W5) with %s=abc: %v; the variable is W14's only", EnvW14Rate, err)
	}
}
