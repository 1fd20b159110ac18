package skiplock

import (
	"strings"
	"testing"
	"time"
)

// The predecessors a producer offers: its running jobs without a successor, earliest
// started first, then the successors waiting for one of those — one level ahead only,
// so a successor of a waiting successor is not offered, nor is a job with a successor,
// nor one whose handler returned, nor another producer's.
func TestPredecessorsOfferWaitingSuccessorsOneLevelDeep(t *testing.T) {
	t.Parallel()
	p, other := &producer{queue: "q"}, &producer{queue: "o"}
	r := &runtime{inflight: map[string]*inflight{}}
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	add := func(id string, p *producer, started time.Time) *inflight {
		f := &inflight{job: &Job{ID: id, LeaseToken: "t-" + id}, p: p, started: started}
		if !started.IsZero() {
			f.begun.Store(true)
		}
		r.inflight[id] = f
		return f
	}
	attach := func(pred, f *inflight) { pred.next, f.waitsFor = f, pred }

	a := add("a", p, t0.Add(2*time.Millisecond)) // running, its successor b waits
	b := add("b", p, time.Time{})
	attach(a, b)
	i := add("i", p, t0) // running; j waits for it, and k for j
	j := add("j", p, time.Time{})
	attach(i, j)
	k := add("k", p, time.Time{}) // waits for j, which waits itself: not offered
	attach(j, k)
	add("d", p, t0.Add(time.Millisecond)) // running, started before a
	e := add("e", p, t0)                  // returned
	e.returned.Store(true)
	add("f", other, t0) // another producer's
	g := add("g", p, t0.Add(3*time.Millisecond))
	h := add("h", p, time.Time{}) // waits for g, whose handler has returned
	attach(g, h)
	g.returned.Store(true)

	var got []string
	for _, l := range r.predecessors(p) {
		got = append(got, l.ID+"/"+l.Token)
	}
	if want := "d/t-d b/t-b"; strings.Join(got, " ") != want {
		t.Fatalf("offered %v, want [%s]", got, want)
	}
}
