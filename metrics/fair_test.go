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

// TestFairCollectorBoundsKeys: a fair queue's keys are reported top first, the rest
// summed under the key "*", so the series stay at Top + 1 per queue whatever the
// number of keys; a queue that is not fair is not reported.
func TestFairCollectorBoundsKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, clock := newClient(t, skiplock.Config{})
	for key, n := range map[string]int{"a": 3, "b": 2, "c": 1, "d": 1} {
		for range n {
			if _, err := c.EnqueueRawTx(ctx, c.Pool(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail", ConcurrencyKey: key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := c.EnqueueRawTx(ctx, c.Pool(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "plain", ConcurrencyKey: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := c.QueueSetFair(ctx, "mail", nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewFairCollector(c, metrics.FairOptions{Top: 2}))
	want := `
# HELP skiplock_fair_key_due Due jobs of a key of a fair queue, counted up to 10,000 (key "*": the keys beyond the top ones, summed).
# TYPE skiplock_fair_key_due gauge
skiplock_fair_key_due{key="*",queue="mail"} 2
skiplock_fair_key_due{key="a",queue="mail"} 3
skiplock_fair_key_due{key="b",queue="mail"} 2
# HELP skiplock_fair_key_oldest_due_seconds Age of the oldest due job of a key of a fair queue (key "*": of the keys beyond the top ones); 0 when none is due.
# TYPE skiplock_fair_key_oldest_due_seconds gauge
skiplock_fair_key_oldest_due_seconds{key="*",queue="mail"} 60
skiplock_fair_key_oldest_due_seconds{key="a",queue="mail"} 60
skiplock_fair_key_oldest_due_seconds{key="b",queue="mail"} 60
# HELP skiplock_fair_keys Keys of a fair queue that have pending jobs (read up to 100,000).
# TYPE skiplock_fair_keys gauge
skiplock_fair_keys{queue="mail"} 4
# HELP skiplock_fair_up 1 if the last read of every fair queue's keys succeeded.
# TYPE skiplock_fair_up gauge
skiplock_fair_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
