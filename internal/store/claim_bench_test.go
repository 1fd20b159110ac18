package store

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// BenchmarkClaim times the plain claim of 1,000 jobs from the head of a queue of
// 50,000 (B1's claim, without the completion), in a transaction rolled back after
// each claim so that every claim meets the same table.
func BenchmarkClaim(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, pgtest.Schema(b))
	pool := pgtest.Pool(b)
	if _, err := pool.Exec(ctx, insertJobsSQL(s), 50000); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+s.Table("jobs")); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		jobs, err := s.Claim(ctx, tx, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 1000, Lease: time.Minute})
		_ = tx.Rollback(ctx)
		if err != nil || len(jobs) != 1000 {
			b.Fatalf("claimed %d: %v", len(jobs), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "µs/job")
}
