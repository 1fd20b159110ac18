package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

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
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload) SELECT 'k', '{}' FROM generate_series(1, 40)`); err != nil {
		t.Fatal(err)
	}
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
