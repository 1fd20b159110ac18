package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/metrics"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
	"github.com/skiplock/skiplock/skiplocktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

func newClient(t *testing.T, cfg skiplock.Config) (*skiplock.Client, *skiplocktest.FakeClock) {
	t.Helper()
	clock := skiplocktest.NewFakeClock(t0)
	cfg.Schema = pgtest.Schema(t)
	cfg.Clock = clock
	c, err := skiplock.NewClient(pgtest.Pool(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, clock
}

func TestCollectorGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, clock := newClient(t, skiplock.Config{})
	for _, d := range []time.Duration{-2 * time.Minute, 0, time.Hour} {
		if _, err := c.EnqueueRawTx(ctx, c.Pool(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail", RunAt: t0.Add(d)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Manual().Claim(ctx, "mail", 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Second)
	m := metrics.New(c, metrics.Options{MinInterval: time.Hour})
	defer m.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	want := `
# HELP skiplock_jobs_due Pending jobs whose run_at has come.
# TYPE skiplock_jobs_due gauge
skiplock_jobs_due{queue="mail"} 1
# HELP skiplock_oldest_due_age_seconds Age of the oldest due pending job: the queue's health signal.
# TYPE skiplock_oldest_due_age_seconds gauge
skiplock_oldest_due_age_seconds{queue="mail"} 30
# HELP skiplock_inserted_total Jobs inserted by this process.
# TYPE skiplock_inserted_total counter
skiplock_inserted_total 3
# HELP skiplock_stats_up 1 if the last database read for these metrics succeeded.
# TYPE skiplock_stats_up gauge
skiplock_stats_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "skiplock_jobs_due", "skiplock_oldest_due_age_seconds",
		"skiplock_inserted_total", "skiplock_stats_up"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m, "skiplock_jobs"); n != 6 {
		t.Fatalf("skiplock_jobs has %d series, want one per state (6)", n)
	}
	// Within MinInterval a scrape reuses the snapshot: the database is not read again.
	if _, err := c.EnqueueRawTx(ctx, c.Pool(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail", RunAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP skiplock_jobs_due Pending jobs whose run_at has come.
# TYPE skiplock_jobs_due gauge
skiplock_jobs_due{queue="mail"} 1
`), "skiplock_jobs_due"); err != nil {
		t.Fatalf("cached scrape: %v", err)
	}
}

func TestCollectorHistogramsFromEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("k", func(ctx context.Context, j *skiplock.Job) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	c, _ := newClient(t, skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"mail": {MaxWorkers: 2}},
		PollInterval: 10 * time.Millisecond})
	m := metrics.New(c, metrics.Options{})
	defer m.Close()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	for range 3 {
		if _, err := c.EnqueueRawTx(ctx, c.Pool(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var runs, waits uint64
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				switch mf.GetName() {
				case "skiplock_job_run_duration_seconds":
					runs += mt.GetHistogram().GetSampleCount()
				case "skiplock_job_queue_wait_seconds":
					waits += mt.GetHistogram().GetSampleCount()
				}
			}
		}
		if runs == 3 && waits == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("histograms saw %d runs and %d waits, want 3 each", runs, waits)
		}
		<-time.After(10 * time.Millisecond) // the condition's polling interval
	}
}

// The limit gauges report every bucket cluster-wide, and the throttled counter counts
// the jobs this process's claims held back.
func TestCollectorLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	started, release := make(chan struct{}, 10), make(chan struct{})
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("k", func(ctx context.Context, j *skiplock.Job) error {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	c, _ := newClient(t, skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"lq": {MaxWorkers: 4}},
		PollInterval: 10 * time.Millisecond, Limits: []skiplock.Limit{
			{Queue: "lq", MaxRunning: 1},
			{Queue: "lq", Key: skiplock.EachKey, MaxRunning: 3},
			{Kind: "k", Rate: 100, Per: time.Minute},
		}})
	m := metrics.New(c, metrics.Options{MinInterval: time.Hour})
	defer m.Close()
	for range 3 {
		if _, err := c.EnqueueRaw(ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "lq", ConcurrencyKey: "t1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	defer close(release)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no job started")
	}
	for deadline := time.Now().Add(20 * time.Second); c.Counters().Throttled == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no claim was throttled")
		}
		<-time.After(10 * time.Millisecond) // the condition's polling interval
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	want := `
# HELP skiplock_limit_max_running The most jobs a limit's bucket may run at once.
# TYPE skiplock_limit_max_running gauge
skiplock_limit_max_running{key="",scope="queue",target="lq"} 1
skiplock_limit_max_running{key="t1",scope="queue",target="lq"} 3
# HELP skiplock_limit_rate The most starts a limit's bucket may make per window (skiplock_limit_window_seconds).
# TYPE skiplock_limit_rate gauge
skiplock_limit_rate{key="",scope="kind",target="k"} 100
# HELP skiplock_limit_holding Jobs of every process holding a slot of a limit's bucket: claimed or running under a valid lease (key: the concurrency key, "" for a limit on all jobs).
# TYPE skiplock_limit_holding gauge
skiplock_limit_holding{key="",scope="kind",target="k"} 1
skiplock_limit_holding{key="",scope="queue",target="lq"} 1
skiplock_limit_holding{key="t1",scope="queue",target="lq"} 1
# HELP skiplock_limit_started Jobs of every process started in a limit's bucket within its rate window.
# TYPE skiplock_limit_started gauge
skiplock_limit_started{key="",scope="kind",target="k"} 1
# HELP skiplock_limit_window_seconds The window of a limit's rate.
# TYPE skiplock_limit_window_seconds gauge
skiplock_limit_window_seconds{key="",scope="kind",target="k"} 60
# HELP skiplock_stats_up 1 if the last database read for these metrics succeeded.
# TYPE skiplock_stats_up gauge
skiplock_stats_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "skiplock_limit_max_running", "skiplock_limit_rate",
		"skiplock_limit_holding", "skiplock_limit_started", "skiplock_limit_window_seconds", "skiplock_stats_up"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "skiplock_jobs_throttled_total" {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v < 1 {
				t.Fatalf("skiplock_jobs_throttled_total = %v, want at least 1", v)
			}
			return
		}
	}
	t.Fatal("no skiplock_jobs_throttled_total")
}

// A relay added with AddRelay exports its failing operations under its name.
func TestCollectorRelayOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := newClient(t, skiplock.Config{})
	ob, err := outbox.New(c, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pub := memorypub.New()
	pub.SetFailure(func(outbox.Message) error { return errors.New("broker unreachable") })
	r, err := ob.NewRelay(pub, outbox.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Write(ctx, c.Pool(), outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "paid", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, failed, err := r.RunOnce(ctx); err != nil || failed != 1 {
		t.Fatalf("RunOnce: failed %d, %v", failed, err)
	}
	m := metrics.New(c, metrics.Options{MinInterval: time.Hour})
	defer m.Close()
	m.AddRelay("kafka", r)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP skiplock_outbox_operation_failing 1 while the relay operation's latest attempt failed.
# TYPE skiplock_outbox_operation_failing gauge
skiplock_outbox_operation_failing{operation="relay:publish",relay="kafka"} 1
# HELP skiplock_outbox_operation_failures_total Failed attempts of a relay's repeating operations (relay:claim, relay:publish, relay:mark).
# TYPE skiplock_outbox_operation_failures_total counter
skiplock_outbox_operation_failures_total{operation="relay:publish",relay="kafka"} 1
`), "skiplock_outbox_operation_failing", "skiplock_outbox_operation_failures_total"); err != nil {
		t.Fatal(err)
	}
}
