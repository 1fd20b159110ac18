package otelmetrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/metrics/otelmetrics"
	"github.com/skiplock/skiplock/skiplocktest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestBridgeReportsOldestDueAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := skiplocktest.NewFakeClock(t0)
	c, err := skiplock.NewClient(pgtest.Pool(t), skiplock.Config{Schema: pgtest.Schema(t), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.EnqueueRawTx(ctx, c.Pool(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(42 * time.Second)
	rm := collect(t, c)
	found := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if q, _ := p.Attributes.Value("queue"); q.AsString() == "mail" {
						found[m.Name] += p.Value
					}
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if o, _ := p.Attributes.Value("outcome"); o.AsString() == "inserted" {
						found[m.Name] = float64(p.Value)
					}
				}
			}
		}
	}
	if found["skiplock.oldest_due_age"] != 42 || found["skiplock.jobs_due"] != 1 || found["skiplock.jobs.outcomes"] != 1 {
		t.Fatalf("instruments: %v", found)
	}
}

func TestBridgeReportsLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	c, err := skiplock.NewClient(pgtest.Pool(t), skiplock.Config{Schema: pgtest.Schema(t), Clock: skiplocktest.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, l := range []skiplock.Limit{{Queue: "mail", Key: skiplock.EachKey, MaxRunning: 2}, {Kind: "k", Rate: 50, Per: time.Second}} {
		if err := c.LimitSet(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"acme", "acme", "acme", "bob"} {
		if _, err := c.EnqueueRaw(ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail", ConcurrencyKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	if jobs, err := c.Manual().Claim(ctx, "mail", 10); err != nil || len(jobs) != 3 {
		t.Fatalf("claimed %d jobs (%v), want 3: two of acme and bob's", len(jobs), err)
	}
	rm := collect(t, c)
	found := map[string]float64{}
	throttled := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					scope, _ := p.Attributes.Value("scope")
					target, _ := p.Attributes.Value("target")
					key, _ := p.Attributes.Value("key")
					if scope.AsString() != "" {
						found[m.Name+" "+scope.AsString()+"/"+target.AsString()+"/"+key.AsString()] = p.Value
					}
				}
			case metricdata.Sum[int64]:
				throttled = throttled || m.Name == "skiplock.jobs.throttled"
			}
		}
	}
	want := map[string]float64{
		"skiplock.limit.holding queue/mail/acme": 2, "skiplock.limit.max_running queue/mail/acme": 2,
		"skiplock.limit.holding queue/mail/bob": 1, "skiplock.limit.max_running queue/mail/bob": 2,
		"skiplock.limit.holding kind/k/": 3, "skiplock.limit.started kind/k/": 3,
		"skiplock.limit.rate kind/k/": 50, "skiplock.limit.window kind/k/": 1,
	}
	for k, v := range want {
		if found[k] != v {
			t.Errorf("%s = %v, want %v", k, found[k], v)
		}
	}
	if len(found) != len(want) || !throttled {
		t.Fatalf("instruments: %v (skiplock.jobs.throttled observed: %v)", found, throttled)
	}
}

// collect registers the bridge for c on a manual reader and collects once.
func collect(t *testing.T, c *skiplock.Client) metricdata.ResourceMetrics {
	t.Helper()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(ctx) })
	b, err := otelmetrics.Register(provider.Meter("skiplock"), c, otelmetrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}
