package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/metrics"
)

// depthHelp and depthUpHelp are the exposition's header lines of the two gauges.
const (
	depthHelp   = "# HELP skiplock_queue_depth Due jobs (pending, run_at passed) of the queue (\"\": all queues), counted up to a cap (skiplock.DepthCap).\n# TYPE skiplock_queue_depth gauge\n"
	depthUpHelp = "# HELP skiplock_queue_depth_up 1 if the last read of every queue's depth succeeded.\n# TYPE skiplock_queue_depth_up gauge\n"
)

// TestDepthCollectorGauges: the depth gauge reports Client.Depth per configured queue
// ("" for all), and keeps its value between reads closer than MinInterval.
func TestDepthCollectorGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, clock := newClient(t, skiplock.Config{})
	for _, e := range []struct {
		queue string
		d     time.Duration
	}{{"mail", -time.Minute}, {"mail", 0}, {"mail", time.Hour}, {"bills", 0}} {
		if _, err := c.EnqueueRawTx(ctx, c.Pool(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: e.queue, RunAt: t0.Add(e.d)}); err != nil {
			t.Fatal(err)
		}
	}
	d := metrics.NewDepthCollector(c, metrics.DepthOptions{Queues: []string{"", "mail", "idle"}, MinInterval: time.Hour})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(d)
	want := `
` + depthHelp + `skiplock_queue_depth{queue=""} 3
skiplock_queue_depth{queue="idle"} 0
skiplock_queue_depth{queue="mail"} 2
` + depthUpHelp + `skiplock_queue_depth_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	// The scheduled job comes due, but the cached value stands until MinInterval.
	clock.Advance(2 * time.Hour)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	fresh := prometheus.NewPedanticRegistry()
	fresh.MustRegister(metrics.NewDepthCollector(c, metrics.DepthOptions{Queues: []string{"mail"}}))
	if err := testutil.GatherAndCompare(fresh, strings.NewReader(`
`+depthHelp+`skiplock_queue_depth{queue="mail"} 3
`), "skiplock_queue_depth"); err != nil {
		t.Errorf("after the clock passed the scheduled job: %v", err)
	}
}

// TestDepthCollectorReportsFailure: a queue whose read fails (here, a name that is not
// a valid queue) has no series and turns skiplock_queue_depth_up to 0.
func TestDepthCollectorReportsFailure(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, skiplock.Config{})
	d := metrics.NewDepthCollector(c, metrics.DepthOptions{Queues: []string{"mail", "not a queue"}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(d)
	want := `
` + depthHelp + `skiplock_queue_depth{queue="mail"} 0
` + depthUpHelp + `skiplock_queue_depth_up 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
