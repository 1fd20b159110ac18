package engine

import (
	"slices"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// Handoff of limit slots (internal/store/limits.go, limitedClaimSQL). While a limit
// binds, every slot it frees would otherwise travel through the database: the
// outcome commits, a claim notices, the next job starts. Instead a throttled
// producer offers its running jobs as predecessors, the claim takes a waiting job of
// the same buckets as each one's successor, and the successor starts on its
// predecessor's executor the moment the predecessor's handler returns.
//
// A predecessor's side of it is its handoff state (flight.go): open, taken (a
// successor waits), refused (its successor was given back), closed or handed on
// (its executor moved on, without or with a successor).

// predecessors lists the producer's jobs that could hand their slots on: running
// (started, not returned, lease not lost) and open for a successor, those started
// first first (they are likely to finish first, so they get the first jobs).
func (e *Engine) predecessors(p *producer) []store.Lease {
	e.mu.Lock()
	fs := make([]*flight, 0, len(e.inflight))
	for _, f := range e.inflight {
		if f.p == p && f.slot == slotOpen && f.state() == running {
			fs = append(fs, f)
		}
	}
	e.mu.Unlock()
	slices.SortFunc(fs, func(a, b *flight) int { return a.started.Compare(b.started) })
	out := make([]store.Lease, len(fs))
	for i, f := range fs {
		out[i] = f.lease()
	}
	return out
}

// succession is what hold does with a claimed job (successorOf).
type succession int

const (
	startNow succession = iota // no predecessor, or its executor has moved on
	attached                   // waits for its predecessor's handler
	giveUp                     // its predecessor already had a successor: back to pending
)

// successorOf attaches f, a job claimed as the successor of another (its slotOf),
// to that predecessor. A predecessor whose executor moved on, or that this process no
// longer runs under the recorded lease, shares no slot with f any more, so f may
// start at once. Called with e.mu held.
func (e *Engine) successorOf(f *flight) succession {
	if f.slotOf.ID == "" {
		return startNow
	}
	pred := e.inflight[f.slotOf.ID]
	if pred == nil || pred.lease().Token != f.slotOf.Token {
		return startNow
	}
	switch pred.slot {
	case slotClosed, slotHandedOn:
		return startNow
	case slotTaken, slotRefused:
		return giveUp
	}
	if pred.p != f.p { // not offered (predecessors)
		return giveUp
	}
	pred.slot, pred.next = slotTaken, f
	wait := max(4*f.p.cap.avgRun(), minSuccessorWait)
	f.giveBack = time.AfterFunc(wait, func() { e.returnSuccessor(pred, f) })
	return attached
}

// minSuccessorWait is the least time a successor waits for its predecessor's handler
// before it goes back to pending; otherwise four times the queue's mean handler time.
// A predecessor that hangs thus delays its successor by a bounded time, after which
// the job competes for any slot again.
const minSuccessorWait = 250 * time.Millisecond

// successor closes f's handoff (no successor can be attached any more) and returns
// the successor to run next on f's executor, if any.
func (e *Engine) successor(f *flight) *flight {
	e.mu.Lock()
	next := f.next
	f.next = nil
	if next != nil {
		f.slot = slotHandedOn
	} else {
		f.slot = slotClosed
	}
	e.mu.Unlock()
	if next != nil {
		next.giveBack.Stop()
		f.p.cap.occupy() // it now runs: the executor's loop vacates its place again
	}
	return next
}

// returnSuccessor gives f back to pending if it still waits for pred.
func (e *Engine) returnSuccessor(pred, f *flight) {
	e.mu.Lock()
	waiting := pred.next == f && pred.slot == slotTaken
	if waiting {
		pred.next, pred.slot = nil, slotRefused
	}
	e.mu.Unlock()
	if waiting {
		e.cfg.Counters.HandoffsReturned.Add(1)
		e.handBack(f, false)
	}
}

// returnSuccessors gives every waiting successor back to pending (at Stop: they were
// claimed but not started).
func (e *Engine) returnSuccessors() {
	type pair struct{ pred, f *flight }
	var waiting []pair
	e.mu.Lock()
	for _, f := range e.inflight {
		if f.slot == slotTaken {
			waiting = append(waiting, pair{f, f.next})
		}
	}
	e.mu.Unlock()
	for _, w := range waiting {
		w.f.giveBack.Stop()
		e.returnSuccessor(w.pred, w.f)
	}
}
