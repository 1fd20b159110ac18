package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestPlanGuardKeepsIndexPlans: on a new, small jobs table the generic plans of the
// claim and of the completion (and the outbox relay's) read their table with a sequential scan unless guarded (the
// control, so the test shows what it guards against), and by primary key when guarded
// — a plan a connection may keep while the table grows without bound.
func TestPlanGuardKeepsIndexPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := storeWithJobs(t, 40)
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("outbox")+` (aggregate_type, aggregate_id, event_type, payload)
SELECT 'a', g::text, 'e', '{}' FROM generate_series(1, 40) g`); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	statements := []struct {
		name string
		sql  string
		args string // EXPLAIN EXECUTE takes literals
	}{
		{"claim", s.lease.claim.sql, "(NULL, 'default', 'w', 1000000, 10, 0, now(), 1000000)"},
		{"finish", s.finish.finish.sql, "(NULL, '{}', '{}', '{}', '{}', '{}', '{}')"},
		{"finish_delete", s.finish.finishDelete.sql, "(NULL, '{}', '{}', '{}', '{}', '{}', '{}')"},
		{"heartbeat", s.lease.heartbeat.sql, "(NULL, '{}', '{}', 1000000, 100000)"},
		{"reclaim", s.reclaim.reclaim.sql, "(NULL, '{}', '{}', '{}')"},
		{"outbox_claim", s.outbox.claim.sql, "(NULL, 10, 1000000)"},
		{"outbox_claim_ordered", s.outbox.claimOrdered.sql, "(NULL, 10, 1000000)"},
		{"outbox_finish", s.outbox.finish.sql, "(NULL, '{}', '{}', '{}', '{}', '{}')"},
	}
	plan := func(guard bool, i int, sql, args string) string {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		if guard {
			if _, err := tx.Exec(ctx, planGuardOn); err != nil {
				t.Fatal(err)
			}
		}
		name := fmt.Sprintf("g%d_%v", i, guard)
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
	bad := func(p string) bool {
		return strings.Contains(p, "Seq Scan on jobs") || strings.Contains(p, "Seq Scan on outbox") || strings.Contains(p, "Hash Join")
	}
	for i, st := range statements {
		if p := plan(true, i, st.sql, st.args); bad(p) {
			t.Errorf("%s, guarded: generic plan scans jobs:\n%s", st.name, p)
		}
	}
	if p := plan(false, 0, statements[0].sql, statements[0].args); !bad(p) {
		t.Errorf("claim, unguarded: expected the sequential scan the guard prevents (has the planner changed?):\n%s", p)
	}
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
  || current_setting('plan_cache_mode')`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	lease := []Lease{{ID: "00000000-0000-0000-0000-000000000001", Token: "00000000-0000-0000-0000-000000000002"}}
	before := settings(pool) // the server's own values (onononauto by default)
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
SET LOCAL plan_cache_mode = force_custom_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, tx, nil, lease, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := settings(tx); got != "onoffonforce_custom_plan" {
		t.Errorf("in the caller's transaction after a guarded statement: %q, want the caller's onoffonforce_custom_plan", got)
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
