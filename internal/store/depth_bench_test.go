package store

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// BenchmarkQueueDepth times one call of queue_depth (Store.QueueDepth, the statement
// Client.Depth and an autoscaler run) on a table of SKIPLOCK_DEPTH_ROWS jobs (default
// 100,000, so that `go test -bench .` stays quick; docs/operations.md quotes 10,000,000):
// 60% succeeded, 30% due in eight queues of three priorities each, and 10% scheduled
// an hour ahead in the queue "later", which has only 50 due jobs. It reports the
// median and the 99th percentile of the calls. Run it as docs/operations.md says:
//
//	SKIPLOCK_DEPTH_ROWS=10000000 go test -run '^$' -bench BenchmarkQueueDepth -benchtime 2000x -timeout 60m ./internal/store
func BenchmarkQueueDepth(b *testing.B) {
	ctx := context.Background()
	rows := 100000
	if v := os.Getenv("SKIPLOCK_DEPTH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("SKIPLOCK_DEPTH_ROWS=%q: want a number of at least 1000", v)
		}
		rows = n
	}
	s := newStore(b, pgtest.Schema(b))
	pool := pgtest.Pool(b)
	start := time.Now()
	// Explicit random ids: the PL/pgSQL uuid_v7 default would double the fill's time.
	fill := `INSERT INTO ` + s.Table("jobs") + ` (id, kind, payload, queue, priority, status, run_at, updated_at)
SELECT gen_random_uuid(), 'k', '{}',
       CASE WHEN g % 10 = 9 THEN 'later' ELSE 'q' || (g % 8) END, (g / 8) % 3,
       (CASE WHEN g % 10 < 6 THEN 'succeeded' ELSE 'pending' END)::text::` + s.q + `.job_status,
       now() + CASE WHEN g % 10 = 9 THEN interval '1 hour' ELSE interval '-1 minute' END, now()
FROM generate_series(1, $1) g`
	if _, err := pool.Exec(ctx, fill, rows); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, queue, run_at)
SELECT 'k', '{}', 'later', now() - interval '1 minute' FROM generate_series(1, 50)`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+s.Table("jobs")); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d jobs in %s", rows+50, time.Since(start).Round(time.Second))
	for _, c := range []struct{ name, queue string }{
		{"one_queue_over_cap", "q3"},
		{"few_due_behind_scheduled", "later"},
		{"all_queues_over_cap", ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			var took []time.Duration
			var n int64
			for b.Loop() {
				t := time.Now()
				var err error
				n, err = s.QueueDepth(ctx, pool, c.queue, DefaultDepthCap, nil)
				took = append(took, time.Since(t))
				if err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(took)
			at := func(p float64) float64 { return float64(took[int(p*float64(len(took)-1))].Microseconds()) / 1000 }
			b.ReportMetric(at(0.5), "p50-ms")
			b.ReportMetric(at(0.99), "p99-ms")
			b.ReportMetric(float64(n), "depth")
		})
	}
}
