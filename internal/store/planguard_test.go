package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestPlanGuardKeepsIndexPlans: the generic plans of the hot statements that find
// jobs (or outbox events) by id read only the rows they name, whatever the tables'
// statistics said when the plan was made — a plan a connection may keep while the table
// grows without bound. Two states of the tables are planned:
//
//   - new: small and never vacuumed. Unguarded, the claim's generic plan reads jobs with
//     a sequential scan (the control, so the test shows what the guard is for).
//   - drained: vacuumed while it held almost nothing live, over pages it once filled (a
//     queue worked down to empty, a bulk enqueue rolled back, a relay that caught up).
//     The statistics then say a row or two, and a join by id was planned with the whole
//     primary key as its outer side: guarded as it was, the completion of one job read
//     every entry of the index, for as long as the connection kept the plan (18 s per
//     completion, a minute of a stalled queue, in a W10 run after a rolled-back insert
//     of 800,000 jobs; docs/benchmarks.md).
func TestPlanGuardKeepsIndexPlans(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"new", "drained"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			planGuardKeepsIndexPlans(t, state == "drained")
		})
	}
}

func planGuardKeepsIndexPlans(t *testing.T, drained bool) {
	ctx := context.Background()
	s, pool := storeWithJobs(t, 40)
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("outbox")+` (aggregate_type, aggregate_id, event_type, payload)
SELECT 'a', g::text, 'e', '{}' FROM generate_series(1, 40) g`); err != nil {
		t.Fatal(err)
	}
	if drained {
		drainStatistics(t, pool, s.Table("jobs"), insertJobsSQL(s))
		drainStatistics(t, pool, s.Table("outbox"), `INSERT INTO `+s.Table("outbox")+` (aggregate_type, aggregate_id, event_type, payload)
SELECT 'a', g::text, 'e', '{}' FROM generate_series(1, $1) g`)
	}
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	statements := []struct {
		name  string
		guard string // as the store sends it ("": unguarded)
		sql   string
		args  string // EXPLAIN EXECUTE takes literals
	}{
		{"claim", planGuardOn, s.lease.claim.sql, "(NULL, 'default', 'w', 1000000, 10, 0, now(), 1000000)"},
		{"finish", planGuardByID, s.finish.finish.sql, "(NULL, '{}', '{}', '{}', '{}', '{}', '{}')"},
		{"finish_delete", planGuardByID, s.finish.finishDelete.sql, "(NULL, '{}', '{}', '{}', '{}', '{}', '{}')"},
		{"heartbeat", planGuardByID, s.lease.heartbeat.sql, "(NULL, '{}', '{}', 1000000, 100000)"},
		{"reclaim", planGuardByID, s.reclaim.reclaim.sql, "(NULL, '{}', '{}', '{}')"},
		{"outbox_claim", planGuardOn, s.outbox.claim.sql, "(NULL, 10, 1000000)"},
		{"outbox_claim_ordered", planGuardOn, s.outbox.claimOrdered.sql, "(NULL, 10, 1000000)"},
		{"limit_claim", "", s.limits.claim.sql, "(NULL, 'default', 'w', 1000000, 10, 26, '{}', '{}')"},
		{"limit_successors", "", s.limits.succ.sql, "(NULL, 'default', 'w', 1000000, 10, 26, '{}', '{}')"},
		{"outbox_finish", planGuardByID, s.outbox.finish.sql, "(NULL, '{}', '{}', '{}', '{}', '{}')"},
	}
	plan := func(guard string, i int, sql, args string) string {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		if guard != "" {
			if _, err := tx.Exec(ctx, guard); err != nil {
				t.Fatal(err)
			}
		}
		name := fmt.Sprintf("g%d_%v", i, guard != "")
		if _, err := tx.Prepare(ctx, name, sql); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN EXECUTE "+name+args)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	for i, st := range statements {
		if p := plan(st.guard, i, st.sql, st.args); unboundedScan(p) != "" {
			t.Errorf("%s: generic plan reads all of a table (%s):\n%s", st.name, unboundedScan(p), p)
		}
	}
	if !drained {
		if p := plan("", 0, statements[0].sql, statements[0].args); unboundedScan(p) == "" {
			t.Errorf("claim, unguarded: expected the sequential scan the guard prevents (has the planner changed?):\n%s", p)
		}
	}
}

// drainStatistics leaves table (whose rows insert, with its count as $1, adds) in the
// state a queue worked down to nothing leaves it: pages filled by a transaction that
// rolled back, the rows before them deleted, one live row after them (so vacuum
// cannot truncate the table), then a vacuum. relpages stays; reltuples falls to 1.
func drainStatistics(tb testing.TB, pool *pgxpool.Pool, table, insert string) {
	tb.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := tx.Exec(ctx, insert, 5000); err != nil {
		tb.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		tb.Fatal(err)
	}
	for _, sql := range []string{`DELETE FROM ` + table, insert, `VACUUM ` + table} {
		args := []any{}
		if sql == insert {
			args = append(args, 1)
		}
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			tb.Fatal(err)
		}
	}
	var pages, tuples float64
	if err := pool.QueryRow(ctx, `SELECT relpages, reltuples FROM pg_class WHERE oid = $1::regclass`, table).Scan(&pages, &tuples); err != nil {
		tb.Fatal(err)
	}
	if pages < 10 || tuples > 1 {
		tb.Fatalf("%s after the drain: relpages %v, reltuples %v; want many pages and a row", table, pages, tuples)
	}
}

// unboundedScan names the first node of a text EXPLAIN that reads jobs or outbox
// whole: a sequential scan, or a scan of its primary key with no Index Cond (every
// entry, in id order). "" when none does. A hash join is not flagged on its own: it
// reads a table whole only through one of those. A partial index read in order with no condition is the claims' own scan (the
// head of the pending or unpublished rows, as far as the LIMIT needs): not flagged.
func unboundedScan(plan string) string {
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		node := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "->"))
		switch {
		case strings.HasPrefix(node, "Seq Scan on jobs"), strings.HasPrefix(node, "Seq Scan on outbox"):
			return node
		case strings.HasPrefix(node, "Index Scan") || strings.HasPrefix(node, "Index Only Scan"):
			if !strings.Contains(node, " using jobs_pkey ") && !strings.Contains(node, " using outbox_pkey ") {
				continue
			}
			// The node's own properties are the indented lines up to its first child.
			cond := false
			for _, p := range lines[i+1:] {
				q := strings.TrimSpace(p)
				if strings.HasPrefix(q, "->") || q == "" {
					break
				}
				if strings.HasPrefix(q, "Index Cond:") {
					cond = true
				}
			}
			if !cond {
				return node
			}
		}
	}
	return ""
}

// TestPlanGuardLeavesSettings: the guard's settings end with the statement. On the
// pool (no restore statement) the pipeline's implicit transaction ends them; in a
// transaction the caller owns, the restore puts back the caller's own values.
func TestPlanGuardLeavesSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.NewPool(t, 1) // the statement after the guarded one runs on the same connection
	settings := func(db DBTX) string {
		var v string
		if err := db.QueryRow(ctx, `SELECT current_setting('enable_seqscan') || current_setting('enable_hashjoin') || current_setting('enable_mergejoin')
  || current_setting('plan_cache_mode') || current_setting('enable_nestloop') || current_setting('jit')`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	lease := []Lease{{ID: "00000000-0000-0000-0000-000000000001", Token: "00000000-0000-0000-0000-000000000002"}}
	before := settings(pool) // the server's own values (onononautoonon by default)
	if _, err := s.Heartbeat(ctx, pool, nil, lease, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := settings(pool); got != before {
		t.Errorf("on the pool after a guarded statement: enable_seqscan, hashjoin, mergejoin, plan_cache_mode = %q, want %q as before", got, before)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = on; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = on;
SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL enable_nestloop = on; SET LOCAL jit = on`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, tx, nil, lease, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := settings(tx); got != "onoffonforce_custom_planonon" {
		t.Errorf("in the caller's transaction after a guarded statement: %q, want the caller's onoffonforce_custom_planonon", got)
	}
}

// TestPlanGuardPlansOnce: a completion of one outcome at a time, the steady low-rate
// case, is planned once per connection, not at every run (left to choose, PostgreSQL
// kept a custom plan for it: planning cost twice the execution).
func TestPlanGuardPlansOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 140000 {
		t.Skip("pg_prepared_statements counts plans from PostgreSQL 14 on")
	}
	for i := range 12 {
		out := []Outcome{{Lease: Lease{ID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i+1), Token: "00000000-0000-0000-0000-000000000001"}, Action: ActionComplete}}
		if _, err := s.Finish(ctx, conn, nil, out); err != nil {
			t.Fatal(err)
		}
	}
	var generic, custom int64
	if err := conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, s.finish.finish.sql).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if custom != 0 || generic != 12 {
		t.Errorf("the completion ran 12 times with %d generic and %d custom plans; want 12 and 0", generic, custom)
	}
}
