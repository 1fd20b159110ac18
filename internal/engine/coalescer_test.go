package engine

import (
	"testing"
	"time"
)

// The trailing NOTIFY of a coalescing window waits for every insert that skipped its
// own: sent at the window's end, it would wake the producers before those inserts
// committed, and their claims would miss the jobs until the next poll (a test whose
// workers poll once a minute timed out this way under CI load). Inserts in the
// caller's transaction cannot be waited for.
func TestTrailingNotifyWaitsForTheInsertsThatSkippedTheirs(t *testing.T) {
	t.Parallel()
	c := NewCoalescer(time.Hour, "ch", nil, nil, nil)
	sent := make(chan string, 4)
	c.sendNotify = func(q string) { sent <- q }
	nothingSent := func(when string) {
		t.Helper()
		select {
		case q := <-sent:
			t.Fatalf("%s: a trailing NOTIFY for %s was sent", when, q)
		default:
		}
	}
	oneSent := func(when string) {
		t.Helper()
		select {
		case q := <-sent:
			if q != "q" {
				t.Fatalf("%s: trailing NOTIFY for %s, want q", when, q)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no trailing NOTIFY", when)
		}
	}

	n, done1 := c.Queues([]string{"q"}, true)
	if n == nil || len(n.Queues) != 1 || n.Queues[0] != "q" {
		t.Fatalf("the window's first insert carries no NOTIFY: %+v", n)
	}
	n, done2 := c.Queues([]string{"q"}, true) // overlaps the first
	_, done3 := c.Queues([]string{"q"}, true)
	if n != nil {
		t.Fatalf("a second insert within the window carries a NOTIFY of its own: %+v", n)
	}
	done1()
	c.trailingDue("q") // the window ends while both inserts still run
	nothingSent("at the window's end, two inserts still running")
	done2()
	c.notifyMu.Lock()
	waiting, due := c.skipped["q"], c.due["q"]
	c.notifyMu.Unlock()
	if waiting != 1 || !due {
		t.Fatalf("after one of two inserts returned: %d waiting, due %v; want 1 and true", waiting, due)
	}
	nothingSent("one insert still running")
	done3()
	oneSent("after the last insert returned")

	// In the caller's transaction: coalesced, and not waited for (its commit is the
	// caller's).
	if n, done := c.Queues([]string{"q"}, false); n != nil {
		t.Fatalf("an insert in the caller's transaction within the window carries a NOTIFY: %+v", n)
	} else {
		done()
	}
	c.trailingDue("q")
	oneSent("at the end of a window of an insert in the caller's transaction")
	// A window that ends with nothing in flight sends at once.
	_, done4 := c.Queues([]string{"q"}, false)
	done4()
	c.trailingDue("q")
	oneSent("at the end of a window with nothing in flight")
}

// One own insert at a time is never coalesced: each carries its NOTIFY inside its
// transaction and none waits for, or schedules, a trailing one (skipping it would buy
// nothing but that trailing transaction). The window it opens still coalesces the
// inserts that overlap it.
func TestSequentialInsertsCarryTheirOwnNotify(t *testing.T) {
	t.Parallel()
	c := NewCoalescer(time.Hour, "ch", nil, nil, nil)
	c.sendNotify = func(q string) { t.Errorf("a trailing NOTIFY for %s was sent", q) }
	for i := range 3 {
		n, done := c.Queues([]string{"q", "r"}, true)
		if n == nil || len(n.Queues) != 2 || n.AfterCommit {
			t.Fatalf("sequential insert %d: %+v; want both queues announced inside its transaction", i, n)
		}
		done()
	}
	c.notifyMu.Lock()
	scheduled := c.trailing["q"] || c.trailing["r"]
	c.notifyMu.Unlock()
	if scheduled {
		t.Fatal("sequential inserts scheduled a trailing NOTIFY")
	}
	first, done1 := c.Queues([]string{"q"}, true)
	overlap, done2 := c.Queues([]string{"q"}, true)
	if first == nil || overlap != nil {
		t.Fatalf("overlapping inserts: first %+v, second %+v; want the first to announce and the second coalesced", first, overlap)
	}
	c.notifyMu.Lock()
	scheduled, flight := c.trailing["q"], c.ownFlight
	c.notifyMu.Unlock()
	if !scheduled || flight != 2 {
		t.Fatalf("after an overlap: trailing scheduled %v, %d in flight; want true and 2", scheduled, flight)
	}
	c.sendNotify = func(string) {}
	done2()
	done1()
	if c.ownFlight != 0 {
		t.Fatalf("%d own inserts still counted in flight after all returned", c.ownFlight)
	}
}

// An own insert carries its NOTIFY inside its transaction only while no other own
// insert doing so is in flight; otherwise it announces after its commit, so that its
// commit does not wait on NOTIFY's lock through the other's disk sync. Inserts in the
// caller's transaction always carry theirs.
func TestNotifyAfterCommitWhileAnotherNotifies(t *testing.T) {
	t.Parallel()
	c := NewCoalescer(-1, "ch", nil, nil, nil)
	first, done1 := c.Queues([]string{"q"}, true)
	if first == nil || first.AfterCommit {
		t.Fatalf("alone in flight: %+v; want the NOTIFY inside the transaction", first)
	}
	second, done2 := c.Queues([]string{"q"}, true)
	if second == nil || !second.AfterCommit {
		t.Fatalf("while another notifies: %+v; want it after the commit", second)
	}
	if tx, _ := c.Queues([]string{"q"}, false); tx == nil || tx.AfterCommit {
		t.Fatalf("in the caller's transaction: %+v; want the NOTIFY inside it", tx)
	}
	done2()
	if n, done := c.Queues([]string{"q"}, true); n == nil || !n.AfterCommit {
		t.Fatalf("the first still in flight: %+v; want it after the commit", n)
	} else {
		done()
	}
	done1()
	if n, done := c.Queues([]string{"q"}, true); n == nil || n.AfterCommit {
		t.Fatalf("nothing in flight again: %+v; want the NOTIFY inside the transaction", n)
	} else {
		done()
	}
}
