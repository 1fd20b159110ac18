package engine

import (
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

func drained(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A claim reserves places; what it did not take comes back; a job keeps its active
// place until it stops running and its held place until its outcome is durable.
func TestCapacityAccounting(t *testing.T) {
	t.Parallel()
	c := newCapacity(Queue{MaxWorkers: 4, MaxPrefetch: -1})
	if n, ok := c.claimSize(2, 100, false); !ok || n != 4 {
		t.Fatalf("empty: claim %d, %v; want 4", n, ok)
	}
	c.reserve(4)
	if _, ok := c.claimSize(2, 100, false); ok {
		t.Fatal("all four places reserved, yet a claim is allowed")
	}
	c.settle(4, 3) // the claim took 3 of 4
	if !drained(c.slot) {
		t.Fatal("settle freed a place without a signal")
	}
	if a, h := c.active.Load(), c.held.Load(); a != 3 || h != 3 {
		t.Fatalf("after settling 3 of 4: active %d held %d, want 3 3", a, h)
	}
	c.vacate() // one handler returned; its outcome is being written
	if n, ok := c.claimSize(2, 100, false); !ok || n != 2 {
		t.Fatalf("2 running, 1 completing: claim %d, %v; want 2", n, ok)
	}
	c.vacate()
	c.vacate()
	// Three outcomes being written and a batch of 2: held bounds the claim to 4+2-3.
	if n, ok := c.claimSize(2, 100, false); !ok || n != 3 {
		t.Fatalf("3 completing: claim %d, %v; want 3", n, ok)
	}
	drained(c.freed)
	c.durable(false)
	if !drained(c.freed) {
		t.Fatal("a durable outcome did not signal its freed limit slot")
	}
	c.durable(true)
	if drained(c.freed) {
		t.Fatal("an outcome whose slot went to its successor signalled a freed limit slot")
	}
	c.durable(false)
	if a, h := c.active.Load(), c.held.Load(); a != 0 || h != 0 {
		t.Fatalf("all done: active %d held %d, want 0 0", a, h)
	}
}

// A successor takes a held place at its claim and an active place when it runs.
func TestCapacitySuccessor(t *testing.T) {
	t.Parallel()
	c := newCapacity(Queue{MaxWorkers: 1, MaxPrefetch: -1})
	c.reserve(1)
	c.settle(1, 1)
	c.holdExtra()
	if a, h := c.active.Load(), c.held.Load(); a != 1 || h != 2 {
		t.Fatalf("a successor waiting: active %d held %d, want 1 2", a, h)
	}
	c.vacate() // the predecessor's handler returned
	c.occupy() // its successor runs on its executor
	if a := c.active.Load(); a != 1 {
		t.Fatalf("successor running: active %d, want 1", a)
	}
}

// While jobs wait locally a claim waits for a quarter of the limit; the prefetch
// grows with fast handlers up to MaxPrefetch.
func TestCapacityPrefetchAndBatching(t *testing.T) {
	t.Parallel()
	c := newCapacity(Queue{MaxWorkers: 8, MaxPrefetch: 100, PrefetchWindow: 50 * time.Millisecond})
	if got := c.limit(); got != 8 {
		t.Fatalf("no run observed: limit %d, want the workers 8", got)
	}
	c.observe(time.Millisecond)
	if got := c.limit(); got != 58 {
		t.Fatalf("1 ms handlers, 50 ms window: limit %d, want 8+50", got)
	}
	c.reserve(50)
	if _, ok := c.claimSize(10, 1000, true); ok {
		t.Fatal("8 of 58 free with jobs queued locally: claimed before a quarter was free")
	}
	if n, ok := c.claimSize(10, 1000, false); !ok || n != 8 {
		t.Fatalf("8 free, nothing queued: claim %d, %v; want 8", n, ok)
	}
	if n, ok := c.claimSize(10, 3, false); !ok || n != 3 {
		t.Fatalf("fetch limit 3: claim %d, %v", n, ok)
	}
	z := newCapacity(Queue{MaxWorkers: 1, MaxPrefetch: 10, PrefetchWindow: time.Millisecond})
	z.observe(0) // counts as 1 ns: the average never becomes 0, "unknown"
	if z.avgRun() != 1 || z.limit() != 11 {
		t.Fatalf("a 0 ns run: average %v, limit %d; want 1ns, 11", z.avgRun(), z.limit())
	}
	if c.size() != 108 {
		t.Fatalf("size %d, want 108", c.size())
	}
}

// A fair queue's unprompted claims stay at the workers' number while new jobs are
// announced, then double with each claim made in silence.
func TestFairBound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ workers, unheard, want int }{
		{100, 0, 100}, {100, 1, 100}, {100, 2, 200}, {100, 3, 400}, {100, 5, 1600}, {0, 0, 1}, {0, 3, 4},
	} {
		if got := fairBound(c.workers, c.unheard); got != c.want {
			t.Errorf("fairBound(%d, %d) = %d, want %d", c.workers, c.unheard, got, c.want)
		}
	}
	if got := fairBound(100, 1000); got <= 0 {
		t.Errorf("fairBound after a long silence = %d: overflowed", got)
	}
}

// A claim goes beside the one in flight only beside a single claim, never on the
// Citus layout, and only for a fair queue told of a new job or a plain queue whose
// last claim came back full: an idle queue (its claims short) never overlaps them.
func TestBeside(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		inflight                     int
		citus, urgent, backlog, want bool
	}{
		{1, false, false, true, true},   // a plain backlog
		{1, false, true, false, true},   // a fair queue's new job
		{1, false, false, false, false}, // idle, or the last claim was short
		{2, false, false, true, false},  // two in flight already
		{2, false, true, true, false},
		{0, false, false, true, false}, // nothing in flight: an ordinary claim
		{1, true, false, true, false},  // Citus
		{1, true, true, false, false},
	} {
		if got := beside(c.inflight, c.citus, c.urgent, c.backlog); got != c.want {
			t.Errorf("beside(%d, citus %v, urgent %v, backlog %v) = %v, want %v", c.inflight, c.citus, c.urgent, c.backlog, got, c.want)
		}
	}
}

// Two plain claims read the cursor at once: the one that read it first does not move
// it back over the later one's jobs when it comes back last, and a rewind still wins
// over both.
func TestCursorKeepsTheLaterClaimsEnd(t *testing.T) {
	t.Parallel()
	var c claimCursor
	at := func(s int) *store.ClaimCursor { return &store.ClaimCursor{RunAt: time.Unix(int64(s), 0)} }
	_, first := c.get()
	_, second := c.get()
	c.advance(second, at(20))
	c.advance(first, at(10)) // came back last: stays at the second's end
	if got, _ := c.get(); got == nil || !got.RunAt.Equal(at(20).RunAt) {
		t.Fatalf("cursor %v, want the later claim's end %v", got, at(20))
	}
	_, third := c.get()
	c.rewind()
	c.advance(third, at(30)) // read before the rewind
	if got, _ := c.get(); got != nil {
		t.Fatalf("cursor %v after a rewind, want the head", got)
	}
	_, fourth := c.get()
	c.advance(fourth, at(5))
	if got, _ := c.get(); got == nil || !got.RunAt.Equal(at(5).RunAt) {
		t.Fatalf("cursor %v, want %v: a claim after the rewind moves it", got, at(5))
	}
}

// A claim beside the one in flight takes half the places or more (or a full claim
// when claims are smaller).
func TestBesideRoom(t *testing.T) {
	t.Parallel()
	c := newCapacity(Queue{MaxWorkers: 100, MaxPrefetch: 1000, PrefetchWindow: time.Hour})
	c.observe(time.Microsecond) // limit 1,100
	for _, x := range []struct {
		n, fetch int
		want     bool
	}{
		{549, 1000, false}, {550, 1000, true}, {1000, 1000, true}, {4, 4, true}, {3, 4, false}, {300, 300, true},
	} {
		if got := c.besideRoom(x.n, x.fetch); got != x.want {
			t.Errorf("besideRoom(%d, fetch %d) = %v, want %v", x.n, x.fetch, got, x.want)
		}
	}
}
