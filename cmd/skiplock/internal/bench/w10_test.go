package bench

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// W10 runs end to end at a small scale (windows of 200 ms, 14 s in all): the windows
// cover the three phases, every job ran exactly once, and the pin left dead tuples
// the statistics show. The verdict itself is not asserted: at this scale it is noise.
// Its control, W10C, runs beside it: the same windows with a control phase in the
// pin's place, no pin held, and a verdict that is a reading, not a target. W10L runs
// the limited claim.
func TestW10QuickScale(t *testing.T) {
	t.Run("W10", func(t *testing.T) { t.Parallel(); testW10QuickScale(t, w10Variant{name: "W10"}) })
	t.Run("W10C", func(t *testing.T) { t.Parallel(); testW10QuickScale(t, w10Variant{name: "W10C", control: true}) })
	t.Run("W10L", func(t *testing.T) { t.Parallel(); testW10QuickScale(t, w10Variant{name: "W10L", limited: true}) })
}

func testW10QuickScale(t *testing.T, v w10Variant) {
	env := &Env{Pool: pgtest.Pool(t), URL: pgtest.URL(t), Settings: "test", Scale: 0.02}
	// An ANALYZE of the jobs table while W10 runs must show in a window's passes. The
	// schema a run before this one left is dropped first, so the table analyzed is
	// this run's.
	schema := v.schema()
	if _, err := env.Pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
		t.Fatal(err)
	}
	analyzed := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { analyzed <- analyzeOnceFilled(ctx, env.Pool, schema+".jobs") }()
	r, err := runW10Plan(context.Background(), env, v)
	cancel()
	if aerr := <-analyzed; aerr != nil {
		t.Errorf("analyzing the jobs table during the run: %v", aerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	control := v.control
	if !strings.HasPrefix(r.Verified, "ok") || r.N <= 0 || (r.Met == nil) != control {
		t.Fatalf("result %+v", r)
	}
	if limited := strings.Contains(r.Settings, "every claim is the limited one"); limited != v.limited {
		t.Errorf("settings %q", r.Settings)
	}
	middle, name := W10Pin, v.name
	if control {
		middle = W10Control
		verdict, _ := r.Extra["verdict"].(string)
		if !strings.HasPrefix(verdict, "CONTROL, no pin held: W10's rule applied to the same timeline would be ") ||
			!strings.Contains(verdict, "control p99 max") || r.Extra["pin"] != "none held (control); the pin_ figures are the control phase's" {
			t.Errorf("control's verdict %q, pin %q", verdict, r.Extra["pin"])
		}
	}
	if r.Workload != name {
		t.Errorf("workload %q, want %q", r.Workload, name)
	}
	ws, ok := r.Extra["windows"].(w10Windows)
	if !ok {
		t.Fatalf("windows: %T", r.Extra["windows"])
	}
	// A window of 200 ms can be empty when the machine holds the generator back (as on
	// a loaded CI run, where a pin window saw no enqueue begin); the verdict must then
	// say so. Most windows of each phase must have their jobs and a p99.
	behind := map[string]bool{}
	for _, at := range judgeW10(newW10Plan(env.Scale), ws).behind {
		behind[at] = true
	}
	phases, filled := map[string]int{}, map[string]int{}
	var pinDead, walSyncs, passes int64
	var walBytes float64
	for k, w := range ws {
		phases[w.Phase]++
		passes += w.Passes
		walBytes, walSyncs = max(walBytes, w.WALBytesPerJob), walSyncs+w.WALSyncs
		switch {
		case w.Offered > 0 && w.P99ms > 0:
			filled[w.Phase]++
		case w.Offered > 0:
			t.Errorf("window %d has jobs and no p99: %+v", k, w)
		case w.Phase != W10Warmup && !behind[w.at()]:
			t.Errorf("empty window %d not reported as the generator's: %+v", k, w)
		}
		if w.Phase == W10Pin {
			pinDead = max(pinDead, w.DeadTuples)
		}
	}
	if phases[W10Warmup] != w10WarmWindows || phases[W10Baseline] != w10BaseWindows || phases[middle] != w10PinWindows || phases[W10Recovery] != w10RecWindows {
		t.Errorf("phases %v", phases)
	}
	// Held-back windows may empty one of a phase of three (the baseline's, a CI run)
	// and two of nine (the recovery's, another); each empty one was checked above to
	// be the generator's. A phase must still have jobs in most of its windows.
	for ph, n := range phases {
		if filled[ph]*2 <= n {
			t.Errorf("%s: %d of %d windows have jobs", ph, filled[ph], n)
		}
	}
	if pinDead == 0 && !control {
		t.Error("no dead tuples seen during the pin")
	}
	if passes == 0 {
		t.Error("the ANALYZE run during the windows is in no window's passes")
	}
	// Every job writes WAL and, with fsync on, every durable commit syncs it: a server
	// of 14 or later (the tests' own is 15, fsync off) counts both in pg_stat_wal.
	var version int
	var fsync bool
	if err := env.Pool.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int,
  current_setting('fsync')::bool`).Scan(&version, &fsync); err != nil {
		t.Fatal(err)
	}
	if version >= 140000 && (walBytes <= 0 || fsync && walSyncs <= 0) {
		t.Errorf("no WAL counted: %.0f bytes a job at most, %d syncs", walBytes, walSyncs)
	}
	var table strings.Builder
	Table(&table, []*Result{r})
	if !strings.Contains(table.String(), "completed/s") || !strings.Contains(table.String(), "verdict: ") {
		t.Errorf("table output:\n%s", table.String())
	}
	var js strings.Builder
	if err := JSON(&js, []*Result{r}); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Extra struct {
			Windows []W10Window `json:"windows"`
		} `json:"extra"`
	}
	if err := json.Unmarshal([]byte(js.String()), &back); err != nil || len(back.Extra.Windows) != len(ws) {
		t.Fatalf("JSON windows: %v, %d of %d", err, len(back.Extra.Windows), len(ws))
	}
}

func TestJudgeW10(t *testing.T) {
	t.Parallel()
	plan := w10Plan{warm: 1, base: 3, pin: 4, rec: 2, windows: 10}
	flat := func() []W10Window {
		ws := make([]W10Window, plan.windows)
		for k := range ws {
			ws[k] = W10Window{Phase: plan.phase(k), StartS: float64(10 * k), OfferedPerSec: w10Rate, CompletedPerSec: w10Rate, P50ms: 3, P99ms: 6}
		}
		ws[2].P99ms = 5                               // baseline p99s 6, 5, 6: the median is 6
		ws[0].P99ms, ws[0].CompletedPerSec = 500, 100 // the warm-up is judged by nothing
		return ws
	}
	if v := judgeW10(plan, flat()); !v.met() || v.baseP99 != 6 || v.ratio != 1 {
		t.Errorf("flat: %+v %s", v, v)
	}
	ws := flat()
	ws[4].P99ms, ws[7].P99ms = 12, 12.5 // exactly 2× is within; above is not
	if v := judgeW10(plan, ws); v.met() || v.over != 1 || v.pinP99Max != 12.5 || v.overInEnqueue != 0 {
		t.Errorf("grown: %+v %s", v, v)
	}
	ws[7].EnqueueP99ms = 12.2 // the application's own commit was that slow
	ws[7].CheckpointBuffers = 900
	if v := judgeW10(plan, ws); v.met() || v.overInEnqueue != 1 || v.overInCheckpoint != 1 ||
		!strings.Contains(v.String(), "in 1 of those the Enqueue calls alone") || !strings.Contains(v.String(), "in 1 the checkpointer was writing") {
		t.Errorf("grown in the enqueue: %+v %s", v, v)
	}
	ws = flat()
	for k := range ws {
		ws[k].QueueP99ms = 2 // baseline queue p99s 2, 2, 2
	}
	ws[5].QueueP99ms, ws[6].QueueP99ms = 4, 4.1 // exactly 2× is within; above is not
	if v := judgeW10(plan, ws); !v.met() || v.baseQueueP99 != 2 || v.queueOver != 1 ||
		!strings.Contains(v.String(), "1 pin windows above 2× its baseline p99 of 2.00 ms") {
		t.Errorf("the queue's own part: %+v %s", v, v)
	}
	ws = flat()
	ws[9].CompletedPerSec = 0.9 * w10Rate
	if v := judgeW10(plan, ws); v.met() || len(v.slow) != 1 || !strings.Contains(v.String(), "recovery @90s") {
		t.Errorf("slow: %+v %s", v, v)
	}
	// A baseline slower than the median pin window was disturbed by something else:
	// the rule holds against it, but the run is inconclusive, neither met nor missed.
	ws = flat()
	ws[1].P99ms, ws[2].P99ms, ws[3].P99ms = 40, 45, 50
	ws[5].P99ms = 80
	if v := judgeW10(plan, ws); v.met() || !v.inconclusive() || w10Met(v) != nil || v.pinP99Median != 6 ||
		!strings.HasPrefix(v.String(), "INCONCLUSIVE: the baseline's p99 (45.00 ms) is above the median pin window's (6.00 ms)") {
		t.Errorf("disturbed baseline: %+v %s", v, v)
	}
	ws[6].P99ms = 95 // and a window over the bound is still a miss
	if v := judgeW10(plan, ws); v.met() || v.inconclusive() || w10Met(v) == nil || *w10Met(v) || !strings.HasPrefix(v.String(), "missed") {
		t.Errorf("disturbed baseline, one window over: %+v %s", v, v)
	}
	// The control judges its control phase by the same rule and says it held no pin.
	cplan := plan
	cplan.control = true
	ws = make([]W10Window, cplan.windows)
	for k := range ws {
		ws[k] = W10Window{Phase: cplan.phase(k), OfferedPerSec: w10Rate, CompletedPerSec: w10Rate, P99ms: 6}
	}
	if ws[0].Phase != W10Warmup || ws[1].Phase != W10Baseline || ws[4].Phase != W10Control || ws[7].Phase != W10Control || ws[8].Phase != W10Recovery {
		t.Fatalf("control phases: %+v", ws)
	}
	ws[5].P99ms = 13
	if v := judgeW10(cplan, ws); v.met() || v.over != 1 ||
		!strings.HasPrefix(v.String(), "CONTROL, no pin held: W10's rule applied to the same timeline would be missed; control p99 max 13.00 ms = 2.17×") {
		t.Errorf("control: %+v %s", v, v)
	}
	ws[5].P99ms = 6
	if v := judgeW10(cplan, ws); !v.met() || !strings.HasPrefix(v.String(), "CONTROL, no pin held: W10's rule applied to the same timeline would be MET; ") {
		t.Errorf("control, flat: %+v %s", v, v)
	}
	ws = flat()
	ws[6].OfferedPerSec, ws[6].CompletedPerSec = 500, 500
	if v := judgeW10(plan, ws); v.met() || len(v.behind) != 1 {
		t.Errorf("behind: %+v %s", v, v)
	}
}

// analyzeOnceFilled waits until a thousand rows were inserted into table, then
// analyzes it once. The bench creates the table when its run begins, so the wait is a
// poll; a thousand is past the warm-up's inserts (one per enqueuing connection, before
// the windows begin) and about a second into the windows.
func analyzeOnceFilled(ctx context.Context, pool *pgxpool.Pool, table string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var filled bool
		err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND EXISTS (SELECT 1 FROM pg_stat_user_tables s
  WHERE s.relid = to_regclass($1) AND s.n_tup_ins >= 1000)`, table).Scan(&filled)
		if err != nil {
			return err
		}
		if filled {
			_, err := pool.Exec(ctx, `ANALYZE `+table)
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
