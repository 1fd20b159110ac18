package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// bindingQueue makes a queue whose limit of running jobs binds, on a table the size of
// a real backlog (20,000 more jobs wait), analyzed so that generic plans are the ones a
// busy queue gets (on a tiny table they scan it), and returns the running jobs' leases
// in claim order.
func bindingQueue(tb testing.TB, running int) (*Store, *pgxpool.Pool, []Lease) {
	tb.Helper()
	ctx := context.Background()
	s := newStore(tb, pgtest.Schema(tb))
	pool := pgtest.Pool(tb)
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "default", MaxRunning: running}, "c"); err != nil {
		tb.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insertJobsSQL(s), 20000+running); err != nil {
		tb.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+s.Table("jobs")); err != nil {
		tb.Fatal(err)
	}
	res, err := s.ClaimLimited(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: running, Lease: time.Hour})
	if err != nil || len(res.Jobs) != running {
		tb.Fatalf("claimed %d of %d: %v", len(res.Jobs), running, err)
	}
	preds := make([]Lease, running)
	for i, j := range res.Jobs {
		preds[i] = Lease{ID: j.ID, Token: *j.LeaseToken}
	}
	return s, pool, preds
}

// TestClaimOfSuccessorsComparesLinearly reads the plan of a claim of successors for 200
// running jobs, as the statement runs it (its generic plan), and counts the row pairs
// its joins compared and discarded. Joining one CTE to another row by row, as the
// statement once did, compares the square of the predecessors (40,000 pairs here);
// each step now reads its rows once.
func TestClaimOfSuccessorsComparesLinearly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const running = 200
	s, pool, preds := bindingQueue(t, running)
	ids, tokens := splitLeases(preds)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, s.limits.lock.sql); err != nil { // also forces the generic plan
		t.Fatal(err)
	}
	if _, err := tx.Prepare(ctx, "succ", s.limits.succ.sql); err != nil {
		t.Fatal(err)
	}
	array := func(us []string) string { return "'{" + strings.Join(us, ",") + "}'" }
	var out string
	if err := tx.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE succ(NULL, 'default', 'w', 3600000000, 0, %d, %s, %s, NULL, NULL, 1000000, 0)`,
		running+16, array(ids), array(tokens))).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan) != 1 {
		t.Fatalf("reading the plan: %v", err)
	}
	var discarded, taken float64
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if v, ok := n["Rows Removed by Join Filter"].(float64); ok {
			discarded += v
		}
		if sub, ok := n["Plans"].([]any); ok {
			for _, c := range sub {
				walk(c.(map[string]any))
			}
		}
	}
	walk(plan[0].Plan)
	taken, _ = plan[0].Plan["Actual Rows"].(float64)
	if taken != running {
		t.Fatalf("the claim took %v successors for %d predecessors", taken, running)
	}
	t.Logf("%v row pairs discarded by joins for %d predecessors", discarded, running)
	if discarded > 10*running {
		t.Fatalf("the claim's joins discarded %v row pairs for %d predecessors: a join compares every row of one side with every row of the other", discarded, running)
	}
}

// BenchmarkClaimSuccessors times a claim of successors (and a limited claim, which
// takes successors too) offering every running job of a queue whose limit binds as a
// predecessor: its cost must grow with the number of predecessors, not with their
// square (see TestClaimOfSuccessorsComparesLinearly).
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
			s, pool, preds := bindingQueue(b, running)
			for b.Loop() {
				// Each claim runs in a transaction that is rolled back, so every
				// iteration offers the same predecessors and finds them without
				// successors.
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

// BenchmarkLimitedClaimManyKeys times a limited claim in W9's shape (docs/benchmarks.md):
// a queue limit that does not bind and a limit of 5 running jobs per concurrency key,
// 20,000 jobs over 1,000 keys, 100 of them running and offered as predecessors, and a
// claim of 700.
func BenchmarkLimitedClaimManyKeys(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, pgtest.Schema(b))
	pool := pgtest.Pool(b)
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "default", MaxRunning: 5000}, "c"); err != nil {
		b.Fatal(err)
	}
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "default", Key: "*", MaxRunning: 5}, "c"); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, concurrency_key) SELECT 'k', '{}', 'tenant-' || (g % 1000) FROM generate_series(1, 20000) g`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+s.Table("jobs")); err != nil {
		b.Fatal(err)
	}
	res, err := s.ClaimLimited(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 100, Lease: time.Hour})
	if err != nil || len(res.Jobs) != 100 {
		b.Fatalf("claimed %d: %v", len(res.Jobs), err)
	}
	preds := make([]Lease, len(res.Jobs))
	for i, j := range res.Jobs {
		preds[i] = Lease{ID: j.ID, Token: *j.LeaseToken}
	}
	var got int
	for b.Loop() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		r, err := s.ClaimLimited(ctx, tx, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 700, Lease: time.Hour, Preds: preds})
		_ = tx.Rollback(ctx)
		if err != nil {
			b.Fatal(err)
		}
		got = len(r.Jobs)
	}
	b.ReportMetric(float64(got), "jobs")
}
