package store

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// BenchmarkFinish completes 1,000 running jobs per operation in one statement (a full
// batch of a busy completer), through the plan guard as the runtime sends it, on a
// table whose statistics are current (fresh) and on one vacuumed while it held almost
// nothing (drained; TestEveryStatementPlansBounded says why that state matters).
func BenchmarkFinish(b *testing.B) {
	for _, drained := range []bool{false, true} {
		name := "fresh"
		if drained {
			name = "drained"
		}
		b.Run(name, func(b *testing.B) { benchmarkFinish(b, drained) })
	}
}

func benchmarkFinish(b *testing.B, drained bool) {
	ctx := context.Background()
	s := newStore(b, pgtest.Schema(b))
	pool := pgtest.Pool(b)
	const n = 1000
	insert := insertJobsSQL(s)
	if drained {
		drainStatistics(b, pool, s.Table("jobs"), insert)
	} else {
		if _, err := pool.Exec(ctx, insert, 20*n); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `ANALYZE `+s.Table("jobs")); err != nil {
			b.Fatal(err)
		}
	}
	outs := make([]Outcome, n)
	for b.Loop() {
		b.StopTimer()
		if _, err := pool.Exec(ctx, insert, n); err != nil {
			b.Fatal(err)
		}
		jobs, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: n, Lease: time.Hour})
		if err != nil || len(jobs) != n {
			b.Fatalf("claimed %d of %d: %v", len(jobs), n, err)
		}
		for i, j := range jobs {
			outs[i] = Outcome{Lease: Lease{ID: j.ID, Token: *j.LeaseToken}, Action: ActionComplete}
		}
		b.StartTimer()
		done, err := s.Finish(ctx, pool, nil, outs)
		if err != nil || len(done) != n {
			b.Fatalf("finished %d of %d: %v", len(done), n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/n, "µs/job")
}
