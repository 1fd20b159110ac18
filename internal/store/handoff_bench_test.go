package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// BenchmarkClaimSuccessors times a claim of successors (and a limited claim, which
// takes successors too) offering every running job of a queue whose limit binds as a
// predecessor: its cost must grow with the number of
// predecessors, not with their square (the predecessors' lookups once joined every
// running job of the queue to every offered one).
func BenchmarkClaimSuccessors(b *testing.B) {
	for _, bc := range []struct {
		limited bool
		running int
	}{{false, 50}, {false, 400}, {true, 50}, {true, 400}} {
		limited, running := bc.limited, bc.running
		name := "successors"
		if limited {
			name = "limited"
		}
		b.Run(fmt.Sprintf("%s/running=%d", name, running), func(b *testing.B) {
			ctx := context.Background()
			s, err := New(pgtest.Schema(b))
			if err != nil {
				b.Fatal(err)
			}
			pool := pgtest.Pool(b)
			if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "default", MaxRunning: running}, "c"); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload) SELECT 'k', '{}' FROM generate_series(1, $1)`, 20000+running); err != nil {
				b.Fatal(err)
			}
			// A table the size of a real backlog, analyzed, so the generic plans are the
			// ones a busy queue gets (on a tiny table they scan it).
			if _, err := pool.Exec(ctx, `ANALYZE `+s.Table("jobs")); err != nil {
				b.Fatal(err)
			}
			res, err := s.ClaimLimited(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: running, Lease: time.Hour})
			if err != nil || len(res.Jobs) != running {
				b.Fatalf("claimed %d of %d: %v", len(res.Jobs), running, err)
			}
			preds := make([]Lease, running)
			for i, j := range res.Jobs {
				preds[i] = Lease{ID: j.ID, Token: *j.LeaseToken}
			}
			for b.Loop() {
				// Each claim of successors runs in a transaction that is rolled back,
				// so every iteration offers the same predecessors and finds them
				// without successors.
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				params := ClaimParams{Queue: "default", WorkerID: "w", Limit: 0, Lease: time.Hour, Preds: preds}
				var jobs []*Job
				if limited {
					// Asking for as many jobs as run makes the head window hold a
					// successor for each (the limit binds, so none takes a free slot).
					params.Limit = running
					var res LimitedClaim
					res, err = s.ClaimLimited(ctx, tx, nil, params)
					jobs = res.Jobs
				} else {
					jobs, err = s.ClaimSuccessors(ctx, tx, nil, params)
				}
				_ = tx.Rollback(ctx)
				if err != nil || len(jobs) != running {
					b.Fatalf("took %d successors for %d predecessors: %v", len(jobs), running, err)
				}
			}
		})
	}
}
