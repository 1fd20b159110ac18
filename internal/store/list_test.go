package store

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestListFindsFewJobsByIndex: the operator's listing of a rare state (the failed
// jobs among many succeeded ones, the dashboard's usual question) or of a tag reads
// those rows by index, not the table page by page; planned generically, as it was,
// the same statement walks the primary key and filters every row (the control).
func TestListFindsFewJobsByIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := storeWith(t,
		`INSERT INTO {{jobs}} (kind, payload, status) SELECT 'k', '{}', 'succeeded' FROM generate_series(1, 20000)`,
		`INSERT INTO {{jobs}} (kind, payload, status, tags) SELECT 'k', '{}', 'failed', ARRAY['rare'] FROM generate_series(1, 3)`,
		`INSERT INTO {{jobs}} (kind, payload, status) SELECT 'k', '{}', 'succeeded' FROM generate_series(1, 20000)`,
		`ANALYZE {{jobs}}`)
	jobs := s.Table("jobs")
	for _, p := range []ListParams{{Statuses: []string{StatusFailed}, Limit: 100}, {Tag: "rare", Limit: 100},
		{Statuses: []string{StatusFailed, StatusCancelled}, Queue: "default", Limit: 2}} {
		got, err := s.List(ctx, pool, p)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		want := min(3, p.Limit)
		if len(got) != want {
			t.Fatalf("%+v: %d jobs, want %d", p, len(got), want)
		}
		for i, j := range got {
			if j.Status != StatusFailed || i > 0 && j.ID <= got[i-1].ID {
				t.Errorf("%+v: job %d %s %s, want failed jobs in id order", p, i, j.ID, j.Status)
			}
		}
	}

	pages := relPages(t, pool, jobs)
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	read := buffersRead(t, conn)
	list := func(name, guard string, args ...string) (int, string) {
		return read(name, guard, s.jobs.list.sql, args...)
	}
	failed := []string{`'{failed}'`, "NULL", "NULL", "NULL", "100", "NULL", "NULL", "NULL", "NULL"}
	tagged := []string{"NULL", "NULL", "NULL", "NULL", "100", `'rare'`, "NULL", "NULL", "NULL"}
	for name, args := range map[string][]string{"failed": failed, "tagged": tagged} {
		if n, plan := list(name, s.jobs.list.guard, args...); n*10 > pages {
			t.Errorf("listing the %s jobs read %d buffers of a table of %d pages:\n%s", name, n, pages, plan)
		}
	}
	if n, plan := list("control", "", failed...); n < pages/2 {
		t.Errorf("control: the generic plan read only %d buffers of %d pages (has the planner changed?):\n%s", n, pages, plan)
	}
}

// storeWith returns a store on a fresh schema, and its pool, after running each of
// sqls on it with {{jobs}} standing for the quoted jobs table.
func storeWith(t *testing.T, sqls ...string) (*Store, *pgxpool.Pool) {
	t.Helper()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	for _, sql := range sqls {
		if _, err := pool.Exec(context.Background(), strings.ReplaceAll(sql, "{{jobs}}", s.Table("jobs"))); err != nil {
			t.Fatal(err)
		}
	}
	return s, pool
}

// relPages returns the pages of table (quoted) as the last ANALYZE counted them.
func relPages(t *testing.T, pool DBTX, table string) int {
	t.Helper()
	var pages int
	if err := pool.QueryRow(context.Background(), `SELECT relpages FROM pg_class WHERE oid = $1::regclass`, table).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	return pages
}

// buffersRead returns a function that runs a statement (prepared as name, under
// guard, with the SQL literals args) under EXPLAIN (ANALYZE, BUFFERS) on conn, and
// returns the shared buffers the whole statement touched (hits and reads) and the plan.
func buffersRead(t *testing.T, conn *pgx.Conn) func(name, guard, sql string, args ...string) (int, string) {
	return func(name, guard, sql string, args ...string) (int, string) {
		t.Helper()
		plan, err := explainExecute(context.Background(), conn, name, guard, sql, "ANALYZE, BUFFERS, TIMING OFF", args)
		if err != nil {
			t.Fatal(err)
		}
		m := buffersRE.FindStringSubmatch(plan) // the top node's: the whole statement's
		if m == nil || m[1] == "" && m[2] == "" {
			t.Fatalf("no buffers in:\n%s", plan)
		}
		hit, _ := strconv.Atoi(m[1]) // "" when none was a hit (or a read): 0
		rd, _ := strconv.Atoi(m[2])
		return hit + rd, plan
	}
}

var buffersRE = regexp.MustCompile(`Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?`)
