package engine

import (
	"strings"
	"sync"
	"testing"

	"github.com/skiplock/skiplock/internal/store"
)

func localFlight(key, id string) *flight {
	return &flight{row: &store.Job{ID: id, ConcurrencyKey: key}}
}

// drain pops n jobs and returns their ids, space-separated.
func drain(t *testing.T, q *localQueue, n int) string {
	t.Helper()
	var ids []string
	for range n {
		f, ok := q.pop()
		if !ok {
			t.Fatalf("pop: queue closed after %v", ids)
		}
		ids = append(ids, f.row.ID)
	}
	return strings.Join(ids, " ")
}

// TestLocalQueueTakesKeysInTurns: jobs that wait by key are taken one turn per key,
// a key of weight w taking w jobs per turn, after the front line; a key claimed after
// another's backlog waits for one turn, not for the backlog.
func TestLocalQueueTakesKeysInTurns(t *testing.T) {
	t.Parallel()
	q := newLocalQueue(100)
	for _, id := range []string{"a1", "a2", "a3", "a4", "a5"} {
		q.push(localFlight("a", id), 1)
	}
	if got := drain(t, q, 1); got != "a1" {
		t.Fatalf("got %s, want a1", got)
	}
	// A later claim brings b (weight 2), c, and a job that bypasses the rotation.
	q.push(localFlight("b", "b1"), 2)
	q.push(localFlight("b", "b2"), 2)
	q.push(localFlight("b", "b3"), 2)
	q.push(localFlight("c", "c1"), 1)
	q.push(localFlight("a", "x1"), 0)
	if n := q.len(); n != 9 {
		t.Fatalf("len %d, want 9", n)
	}
	if got, want := drain(t, q, 9), "x1 a2 b1 b2 c1 a3 b3 a4 a5"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
	if n := q.len(); n != 0 {
		t.Fatalf("len %d, want 0", n)
	}
	// A key that emptied and comes back joins the end of the turns.
	q.push(localFlight("a", "a6"), 1)
	q.push(localFlight("d", "d1"), 1)
	q.push(localFlight("a", "a7"), 1)
	if got, want := drain(t, q, 3), "a6 d1 a7"; got != want {
		t.Fatalf("order %q, want %q", got, want)
	}
}

// TestLocalQueueLimitAndClose: a full or closed queue refuses a job; a closed queue
// still gives what it holds (the executors hand it back), then reports closed, also
// to a pop that began before close.
func TestLocalQueueLimitAndClose(t *testing.T) {
	t.Parallel()
	q := newLocalQueue(2)
	if !q.push(localFlight("a", "a1"), 1) || !q.push(localFlight("", "p1"), 0) {
		t.Fatal("refused a job below the limit")
	}
	if q.push(localFlight("a", "a2"), 1) {
		t.Fatal("took a job beyond the limit")
	}
	q.close()
	if q.push(localFlight("", "p2"), 0) {
		t.Fatal("took a job after close")
	}
	if got := drain(t, q, 2); got != "p1 a1" {
		t.Fatalf("got %q, want p1 a1", got)
	}
	if _, ok := q.pop(); ok {
		t.Fatal("pop after close and drain: want closed")
	}

	w := newLocalQueue(4)
	var wg sync.WaitGroup
	got := make(chan bool, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, ok := w.pop()
		got <- ok
	}()
	w.close()
	wg.Wait()
	if <-got {
		t.Fatal("a waiting pop returned a job from an empty closed queue")
	}
}
