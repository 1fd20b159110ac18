package store

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// BenchmarkHeartbeat renews the leases of 1,000 running jobs per operation (one
// heartbeat of a busy process), through the plan guard as the runtime sends it.
func BenchmarkHeartbeat(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, pgtest.Schema(b))
	pool := pgtest.Pool(b)
	const n = 1000
	if _, err := pool.Exec(ctx, insertJobsSQL(s), n); err != nil {
		b.Fatal(err)
	}
	jobs, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: n, Lease: time.Hour})
	if err != nil || len(jobs) != n {
		b.Fatalf("claimed %d of %d: %v", len(jobs), n, err)
	}
	leases := make([]Lease, n)
	for i, j := range jobs {
		leases[i] = Lease{ID: j.ID, Token: *j.LeaseToken}
	}
	for b.Loop() {
		renewed, err := s.Heartbeat(ctx, pool, nil, leases, time.Hour, nil)
		if err != nil || len(renewed) != n {
			b.Fatalf("renewed %d of %d: %v", len(renewed), n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/n, "µs/lease")
}
