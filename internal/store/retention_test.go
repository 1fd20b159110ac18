package store

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestRetentionDeleteWalksFromItsBound: in every state of the table's statistics, the
// generic plan of a retention batch walks jobs_retention_idx in order from the
// previous batch's bound ($5, an Index Cond) and stops at its LIMIT: no bitmap scan of
// every expired entry and no sort of them. A plan that read all expired rows per
// batch made retention quadratic in its backlog (W14, docs/benchmarks.md, 2026-12-05).
func TestRetentionDeleteWalksFromItsBound(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"new", "small", "finished", "drained"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, pool := storeWithJobs(t, 40)
			switch state {
			case "small":
				if _, err := pool.Exec(ctx, `ANALYZE `+s.Table("jobs")); err != nil {
					t.Fatal(err)
				}
			case "finished": // many finished jobs, all expired, and statistics that know it
				if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, status, attempts, updated_at)
SELECT 'k', '{}', 'succeeded', 1, now() - interval '1 day' + g * interval '1 ms' FROM generate_series(1, 20000) g`); err != nil {
					t.Fatal(err)
				}
				if _, err := pool.Exec(ctx, `ANALYZE `+s.Table("jobs")); err != nil {
					t.Fatal(err)
				}
			case "drained":
				drainStatistics(t, pool, s.Table("jobs"), insertJobsSQL(s))
			}
			conn, err := pgx.Connect(ctx, pgtest.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			st := s.retention.deleteFinished
			plan, err := genericPlan(ctx, conn, "retention", st.guard, st.sql)
			if err != nil {
				t.Fatal(err)
			}
			walk := regexp.MustCompile(`(?m)^\s*(->\s*)?Index Scan using jobs_retention_idx on jobs\b.*\n\s*Index Cond: .*updated_at >= COALESCE\(\$5`)
			if !walk.MatchString(plan) {
				t.Errorf("the batch does not walk jobs_retention_idx from its bound:\n%s", plan)
			}
			for _, node := range []string{"Bitmap Index Scan on jobs_retention_idx", "Sort"} {
				if strings.Contains(plan, node) {
					t.Errorf("the batch's plan has a %s (it would read every expired entry per batch):\n%s", node, plan)
				}
			}
		})
	}
}

// DeleteFinished deletes only jobs at or after its from bound, up to its limit, oldest
// first, and returns the newest updated_at it deleted: the next batch's bound.
func TestDeleteFinishedFromBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := storeWithJobs(t, 0)
	base := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	// Five succeeded jobs a second apart, two of them sharing the third second.
	for _, sec := range []int{0, 1, 2, 2, 3} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, status, attempts, updated_at)
VALUES ('k', '{}', 'succeeded', 1, $1)`, base.Add(time.Duration(sec)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	now := base.Add(time.Hour)
	n, newest, err := s.DeleteFinished(ctx, pool, &now, StatusSucceeded, time.Minute, 2, base.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || !newest.Equal(base.Add(2*time.Second)) {
		t.Fatalf("from the third second, limit 2: deleted %d, newest %v; want the 2 of the third second", n, newest)
	}
	n, newest, err = s.DeleteFinished(ctx, pool, &now, StatusSucceeded, time.Minute, 10, newest)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || !newest.Equal(base.Add(3*time.Second)) {
		t.Fatalf("from there: deleted %d, newest %v; want the one of the fourth second", n, newest)
	}
	n, newest, err = s.DeleteFinished(ctx, pool, &now, StatusSucceeded, time.Minute, 10, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || !newest.Equal(base.Add(time.Second)) {
		t.Fatalf("with no bound: deleted %d, newest %v; want the 2 older jobs the bound had passed", n, newest)
	}
	n, newest, err = s.DeleteFinished(ctx, pool, &now, StatusSucceeded, time.Minute, 10, time.Time{})
	if err != nil || n != 0 || !newest.IsZero() {
		t.Fatalf("nothing left: deleted %d, newest %v, %v; want 0, the zero time", n, newest, err)
	}
}
