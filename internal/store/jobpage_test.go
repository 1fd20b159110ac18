package store

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestListPageReadsAtMostItsBudget: a text search for a state that matches nothing,
// on a table of 40,000 jobs, reads about its scan budget's rows and says where it
// stopped; the single listing (the control) reads the whole table for it.
func TestListPageReadsAtMostItsBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := storeWith(t,
		`INSERT INTO {{jobs}} (kind, payload, status, last_error) SELECT 'k', jsonb_build_object('n', g), 'failed', 'boom' FROM generate_series(1, 40000) g`,
		`ANALYZE {{jobs}}`)
	jobs := s.Table("jobs")
	pages := relPages(t, pool, jobs)
	const budget = 1000
	rows, err := s.ListPage(ctx, pool, ListParams{Statuses: []string{StatusFailed}, Search: "no such text", Limit: 51}, true, budget)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Hit || !rows[0].Last {
		t.Fatalf("rows %+v: want the budget's last row alone, not a hit", rows)
	}

	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	read := buffersRead(t, conn)
	args := []string{`'{failed}'`, "NULL", "NULL", "NULL", "51", "NULL", `'no such text'`, "NULL", strconv.Itoa(budget), "NULL"}
	for _, st := range []stmt{s.pages.asc, s.pages.desc} {
		if n, plan := read(st.name, st.guard, st.sql, args...); n*5 > pages {
			t.Errorf("%s read %d buffers of a table of %d pages:\n%s", st.name, n, pages, plan)
		}
	}
	if n, plan := read("control", s.jobs.list.guard, s.jobs.list.sql, append(args[:8:8], "NULL")...); n < pages/2 {
		t.Errorf("control: the single listing read only %d buffers of %d pages:\n%s", n, pages, plan)
	}
}

// TestListPagePagesBothWays: pages newest first and oldest first, continue after a
// cursor, skip what the filters reject, and return the budget's last row when the
// scan stopped before the page filled.
func TestListPagePagesBothWays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := storeWith(t, `INSERT INTO {{jobs}} (kind, payload)
SELECT CASE WHEN g % 3 = 0 THEN 'three' ELSE 'other' END, jsonb_build_object('n', g) FROM generate_series(1, 30) g`)
	all, err := s.List(ctx, pool, ListParams{Kind: "three", Limit: 100})
	if err != nil || len(all) != 10 {
		t.Fatalf("%d jobs of kind three, %v", len(all), err)
	}
	if n, last, err := s.CountCapped(ctx, pool, ListParams{Kind: "three"}, 100); err != nil || n != 10 || last != all[9].ID {
		t.Fatalf("count: %d, %q, %v; want 10 up to %s", n, last, err, all[9].ID)
	}
	if n, _, err := s.CountCapped(ctx, pool, ListParams{Kind: "three"}, 4); err != nil || n != 4 {
		t.Fatalf("count capped at 4: %d, %v", n, err)
	}
	ids := func(rows []PageRow) (out []string) {
		for _, r := range rows {
			if r.Hit {
				out = append(out, r.Job.ID)
			}
		}
		return out
	}
	// Newest first, a page of 4 from the start, then after its last.
	rows, err := s.ListPage(ctx, pool, ListParams{Kind: "three", Limit: 4}, true, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(rows); len(got) != 4 || got[0] != all[9].ID || got[3] != all[6].ID {
		t.Fatalf("newest first: %v", got)
	}
	rows, err = s.ListPage(ctx, pool, ListParams{Kind: "three", Limit: 4, AfterID: all[6].ID}, true, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(rows); len(got) != 4 || got[0] != all[5].ID {
		t.Fatalf("newest first, second page: %v", got)
	}
	// Oldest first after a cursor.
	rows, err = s.ListPage(ctx, pool, ListParams{Kind: "three", Limit: 3, AfterID: all[1].ID}, false, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(rows); len(got) != 3 || got[0] != all[2].ID || got[2] != all[4].ID {
		t.Fatalf("oldest first after the second: %v", got)
	}
	// A budget of 7 rows holds two jobs of kind three (the 3rd and 6th) and stops at the 7th.
	rows, err = s.ListPage(ctx, pool, ListParams{Kind: "three", Limit: 5}, false, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(rows); len(got) != 2 || got[0] != all[0].ID || got[1] != all[1].ID {
		t.Fatalf("within the budget: %v", got)
	}
	if last := rows[len(rows)-1]; last.Hit || !last.Last || last.Job.Kind != "other" {
		t.Fatalf("the budget's last row: %+v", last)
	}
	// A text search whose budget ends on a job with no last error (the text not in its
	// payload either): that row is returned, not a hit.
	rows, err = s.ListPage(ctx, pool, ListParams{Search: "no such text", Limit: 5}, true, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Hit || !rows[0].Last || rows[0].Job.LastError != nil {
		t.Fatalf("a search ending on a job without an error: %+v", rows)
	}
}

// TestStateEstimates: after ANALYZE the planner's estimates name the states it saw.
func TestStateEstimates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := storeWithJobs(t, 500)
	est, err := s.StateEstimates(ctx, pool)
	if err != nil || len(est) != 0 {
		t.Fatalf("before ANALYZE: %v, %v", est, err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+s.Table("jobs")); err != nil {
		t.Fatal(err)
	}
	est, err = s.StateEstimates(ctx, pool)
	if err != nil || est[StatusPending] != 500 {
		t.Fatalf("after ANALYZE: %v, %v; want 500 pending", est, err)
	}
}
