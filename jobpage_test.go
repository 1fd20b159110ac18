package skiplock_test

import (
	"errors"
	"testing"

	"github.com/skiplock/skiplock"
)

// TestJobPageWalksForwardAndBack: newest first, pages of 3 over 8 jobs walk forward to
// the end and back to the first page with the same jobs on each, a scan budget
// smaller than the page stops early and says so, and JobCount counts up to its cap.
func TestJobPageWalksForwardAndBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	var ids []string // oldest first
	for range 8 {
		j, err := e.client.Enqueue(e.ctx, emailArgs{To: "a@example.com"}, nil)
		e.must(err)
		ids = append(ids, j.ID)
	}
	page := func(p skiplock.PageParams) *skiplock.JobPage {
		t.Helper()
		p.Limit, p.NewestFirst = 3, true
		pg, err := e.client.JobPage(e.ctx, p)
		e.must(err)
		return pg
	}
	got := func(pg *skiplock.JobPage) (out []string) {
		for _, j := range pg.Jobs {
			out = append(out, j.ID[len(j.ID)-4:])
		}
		return out
	}
	want := func(idx ...int) (out []string) {
		for _, i := range idx {
			out = append(out, ids[i][len(ids[i])-4:])
		}
		return out
	}
	check := func(what string, pg *skiplock.JobPage, w []string, next, prev bool) {
		t.Helper()
		if g := got(pg); len(g) != len(w) || (len(g) > 0 && (g[0] != w[0] || g[len(g)-1] != w[len(w)-1])) {
			t.Fatalf("%s: jobs %v, want %v", what, g, w)
		}
		if (pg.Next != "") != next || (pg.Prev != "") != prev {
			t.Fatalf("%s: next %q prev %q, want next %v prev %v", what, pg.Next, pg.Prev, next, prev)
		}
	}
	p1 := page(skiplock.PageParams{})
	check("first", p1, want(7, 6, 5), true, false)
	p2 := page(skiplock.PageParams{ListParams: skiplock.ListParams{AfterID: p1.Next}})
	check("second", p2, want(4, 3, 2), true, true)
	p3 := page(skiplock.PageParams{ListParams: skiplock.ListParams{AfterID: p2.Next}})
	check("third", p3, want(1, 0), false, true)
	b2 := page(skiplock.PageParams{BeforeID: p3.Prev})
	check("back to the second", b2, want(4, 3, 2), true, true)
	b1 := page(skiplock.PageParams{BeforeID: b2.Prev})
	check("back to the first", b1, want(7, 6, 5), true, false)

	bounded := page(skiplock.PageParams{ListParams: skiplock.ListParams{Kind: "nothing"}, ScanBudget: 4})
	if len(bounded.Jobs) != 0 || !bounded.Bounded || bounded.Next != ids[4] {
		t.Fatalf("bounded: %+v, want no job, bounded, next %s", bounded, ids[4])
	}
	if n, last, err := e.client.JobCount(e.ctx, skiplock.ListParams{Kind: "email"}, 100); err != nil || n != 8 || last != ids[7] {
		t.Fatalf("count: %d up to %q, %v; want 8 up to %s", n, last, err, ids[7])
	}
	if n, last, err := e.client.JobCount(e.ctx, skiplock.ListParams{Kind: "email"}, 5); err != nil || n != 5 || last != "" {
		t.Fatalf("count capped at 5: %d up to %q, %v; want 5 and no bound", n, last, err)
	}
	if _, err := e.client.JobPage(e.ctx, skiplock.PageParams{BeforeID: "nope"}); !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("a bad cursor: %v, want ErrInvalid", err)
	}
}
