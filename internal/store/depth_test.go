package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// depthAt is the fixed "now" of the depth tests: jobs are due relative to it.
var depthAt = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// insertDepthJobs inserts n jobs of queue with priority, status and run_at.
func insertDepthJobs(t *testing.T, pool *pgxpool.Pool, s *Store, n int, queue string, priority int, status string, runAt time.Time) {
	t.Helper()
	lease := "NULL::timestamptz, NULL::uuid"
	if status == StatusRunning {
		lease = "now() + interval '1 hour', gen_random_uuid()"
	}
	_, err := pool.Exec(context.Background(), `INSERT INTO `+s.Table("jobs")+` (kind, payload, queue, priority, status, run_at, lease_until, lease_token)
SELECT 'k', '{}', $2, $3, $4::text::`+s.q+`.job_status, $5, `+lease+` FROM generate_series(1, $1)`, n, queue, priority, status, runAt)
	if err != nil {
		t.Fatal(err)
	}
}

// TestQueueDepthCountsDueJobsUpToTheCap: queue_depth counts pending jobs whose run_at
// has come, of one queue or of all, and stops at the cap; scheduled, running and
// finished jobs are not counted.
func TestQueueDepthCountsDueJobsUpToTheCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t, pgtest.Schema(t)), pgtest.Pool(t)
	past, future := depthAt.Add(-time.Minute), depthAt.Add(time.Hour)
	insertDepthJobs(t, pool, s, 5, "mail", 0, StatusPending, past)
	insertDepthJobs(t, pool, s, 3, "mail", 5, StatusPending, depthAt) // run_at = now is due
	insertDepthJobs(t, pool, s, 4, "mail", 0, StatusPending, future)
	insertDepthJobs(t, pool, s, 2, "mail", 0, StatusRunning, past)
	insertDepthJobs(t, pool, s, 6, "mail", 0, StatusSucceeded, past)
	insertDepthJobs(t, pool, s, 2, "bills", -3, StatusPending, past)
	insertDepthJobs(t, pool, s, 1, "zebra", 1, StatusFailed, past)
	now := depthAt
	later := depthAt.Add(2 * time.Hour)
	for _, c := range []struct {
		queue string
		limit int64
		now   *time.Time
		want  int64
	}{
		{"mail", DefaultDepthCap, &now, 8},
		{"bills", DefaultDepthCap, &now, 2},
		{"", DefaultDepthCap, &now, 10},
		{"", 7, &now, 7},
		{"mail", 3, &now, 3},
		{"mail", 8, &now, 8},
		{"mail", DefaultDepthCap, &later, 12},
		{"zebra", DefaultDepthCap, &now, 0},
		{"nosuch", DefaultDepthCap, &now, 0},
		{"", 0, &now, 0},
	} {
		got, err := s.QueueDepth(ctx, pool, c.queue, c.limit, c.now)
		if err != nil || got != c.want {
			t.Errorf("QueueDepth(%q, cap %d, %s) = %d, %v; want %d", c.queue, c.limit, c.now.Format(time.RFC3339), got, err, c.want)
		}
	}
	// Without a time, the database's now(): every job above lies in its future.
	if got, err := s.QueueDepth(ctx, pool, "", DefaultDepthCap, nil); err != nil || got != 0 {
		t.Errorf("QueueDepth at the database's now() = %d, %v; want 0 (every job is scheduled after it)", got, err)
	}
}

// depthParams types the body's parameters as the function's signature does, so that
// the body prepares as a statement of its own whatever it infers.
var depthParams = strings.NewReplacer("$1", "$1::text", "$2", "$2::bigint", "$3", "$3::timestamptz")

// depthFunction returns the body (its parameters typed) and the settings (SET
// clauses) of s's queue_depth.
func depthFunction(t *testing.T, pool *pgxpool.Pool, s *Store) (body string, settings []string) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT prosrc, coalesce(proconfig, '{}') FROM pg_proc
WHERE oid = $1::regprocedure`, s.Table("queue_depth")+"(text, bigint, timestamptz)").Scan(&body, &settings)
	if err != nil {
		t.Fatal(err)
	}
	return depthParams.Replace(body), settings
}

// depthGuard is the SQL that applies settings (name=value, as proconfig holds them)
// for the rest of a transaction, as calling the function does.
func depthGuard(settings []string) string {
	var sets []string
	for _, kv := range settings {
		k, v, _ := strings.Cut(kv, "=")
		sets = append(sets, fmt.Sprintf("set_config('%s', '%s', true)", k, v))
	}
	return "SELECT " + strings.Join(sets, ", ")
}

// readyIndexes returns jobs_ready_idx and, in the partitioned layout, its partitions'.
func readyIndexes(t *testing.T, pool *pgxpool.Pool, s *Store) map[string]bool {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT c.relname FROM pg_partition_tree($1::regclass) p
JOIN pg_class c ON c.oid = p.relid UNION SELECT 'jobs_ready_idx'`, s.Table("jobs_ready_idx"))
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// TestQueueDepthPlanIsBounded plans queue_depth's body as the function runs it (its
// own settings, the generic plan and the plans for one queue and for all) in the
// states the store's plan tests use, and asserts that it reads jobs only through
// jobs_ready_idx (or its partitions), each scan with an Index Cond, never by a
// sequential scan. Then it runs it on a table of scheduled jobs and many due ones and
// asserts that it reads no more index entries than the cap and the (queue, priority)
// pairs account for.
func TestQueueDepthPlanIsBounded(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"new", "small", "drained", "partitioned"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, pool := storeWithJobs(t, 40)
			jobs := s.Table("jobs")
			switch state {
			case "small":
				if _, err := pool.Exec(ctx, "ANALYZE "+jobs); err != nil {
					t.Fatal(err)
				}
			case "drained":
				drainStatistics(t, pool, jobs, insertJobsSQL(s))
			case "partitioned":
				partition(t, s)
			}
			body, settings := depthFunction(t, pool, s)
			ready := readyIndexes(t, pool, s)
			conn, err := pgx.Connect(ctx, pgtest.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			for i, args := range [][]string{nil, {"'default'", "10000", "NULL"}, {"NULL", "10000", "NULL"}} {
				p, err := explainExecute(ctx, conn, fmt.Sprintf("d%d", i), depthGuard(settings), body, "", args)
				if err != nil {
					t.Fatalf("%v:\n%s", err, body)
				}
				if bad := depthScanProblem(p, ready); bad != "" {
					t.Errorf("args %v: %s:\n%s", args, bad, p)
				}
			}
		})
	}
	t.Run("reads", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s, pool := newStore(t, pgtest.Schema(t)), pgtest.Pool(t)
		past, future := depthAt.Add(-time.Minute), depthAt.Add(time.Hour)
		// Many scheduled jobs ahead of the due ones in index order would be read
		// by a scan that filters run_at instead of ranging over it.
		insertDepthJobs(t, pool, s, 20000, "mail", 0, StatusPending, future)
		for p := range 5 {
			insertDepthJobs(t, pool, s, 20, "mail", p, StatusPending, past)
		}
		insertDepthJobs(t, pool, s, 5000, "zeta", 0, StatusPending, past)
		insertDepthJobs(t, pool, s, 20000, "zeta", 0, StatusSucceeded, past)
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+s.Table("jobs")); err != nil {
			t.Fatal(err)
		}
		body, settings := depthFunction(t, pool, s)
		conn, err := pgx.Connect(ctx, pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		at := "'" + depthAt.Format(time.RFC3339) + "'"
		const pairs = 6 // mail 0..4, zeta 0
		for i, c := range []struct {
			args      []string
			want, max int64
		}{
			{[]string{"'mail'", "10000", at}, 100, 100 + 2*pairs},
			{[]string{"NULL", "50", at}, 50, 50 + 2*pairs},
			{[]string{"NULL", "10000", at}, 5100, 5100 + 2*pairs},
			{[]string{"'zeta'", "10", at}, 10, 10 + 2*pairs},
		} {
			var got int64
			if err := pool.QueryRow(ctx, "SELECT "+s.Table("queue_depth")+"("+strings.Join(c.args, ", ")+")").Scan(&got); err != nil || got != c.want {
				t.Errorf("queue_depth(%s) = %d, %v; want %d", strings.Join(c.args, ", "), got, err, c.want)
			}
			p, err := explainExecute(ctx, conn, fmt.Sprintf("r%d", i), depthGuard(settings), body, "ANALYZE, FORMAT JSON", c.args)
			if err != nil {
				t.Fatal(err)
			}
			if read := entriesRead(t, p); read > c.max {
				t.Errorf("queue_depth(%s) read %d rows of jobs; want at most %d (the cap and two per (queue, priority) pair):\n%s",
					strings.Join(c.args, ", "), read, c.max, p)
			}
		}
	})
}

// depthScanProblem says what is wrong with a text plan of queue_depth's body: a
// sequential scan of jobs, a scan of another index of jobs, or a scan with no Index
// Cond. "" when nothing is.
func depthScanProblem(plan string, ready map[string]bool) string {
	lines := strings.Split(plan, "\n")
	scans := 0
	for i, l := range lines {
		node := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "->"))
		if m := seqScanRE.FindStringSubmatch(node); m != nil && growing(m[1]) {
			return "a sequential scan: " + node
		}
		m := indexScanRE.FindStringSubmatch(node)
		if m == nil || !growing(m[2]) {
			continue
		}
		scans++
		if !ready[m[1]] {
			return "a scan of another index than jobs_ready_idx: " + node
		}
		cond := false
		for _, p := range lines[i+1:] {
			q := strings.TrimSpace(p)
			if strings.HasPrefix(q, "->") || q == "" {
				break
			}
			cond = cond || strings.HasPrefix(q, "Index Cond:")
		}
		if !cond {
			return "an index scan without an Index Cond: " + node
		}
	}
	if scans == 0 {
		return "no scan of jobs_ready_idx"
	}
	return ""
}

// entriesRead sums, over the nodes of a JSON EXPLAIN ANALYZE that read jobs, the rows
// they returned and the rows their filters removed.
func entriesRead(t *testing.T, plan string) int64 {
	t.Helper()
	var doc []struct{ Plan map[string]any }
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) != 1 {
		t.Fatalf("EXPLAIN JSON: %v\n%s", err, plan)
	}
	var walk func(n map[string]any) int64
	walk = func(n map[string]any) int64 {
		var sum int64
		if rel, _ := n["Relation Name"].(string); growing(rel) {
			num := func(k string) int64 { f, _ := n[k].(float64); return int64(f) }
			loops := num("Actual Loops")
			sum += num("Actual Rows")*loops + num("Rows Removed by Filter") + num("Rows Removed by Index Recheck")
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				sum += walk(m)
			}
		}
		return sum
	}
	return walk(doc[0].Plan)
}
