package engine

// The claim cursor: each producer resumes its claims where its last claim ended
// instead of at the head of the ready index, so a snapshot held open elsewhere (which
// stops vacuum) does not make every claim walk the entries of every job claimed since
// (store.claimBranch has the mechanism; docs/benchmarks-archive.md, "W10: a pinned xmin
// horizon", the measurements).
//
// The cursor is only a starting point, never a promise that nothing lies behind it.
// Three things bring a producer back:
//   - its head check: every poll interval, a read-only query finds the first due job a
//     claim from the head would take; if that job lies before the cursor's floor, the
//     next claim starts at that job;
//   - its own outcomes that can make an old job ready (a sequence's next job, a flow's
//     parent, a batch callback): the next claim of every producer starts at the head
//     (the outcome does not say where the job it released lies);
//   - a Manual claim or a process start: those claim from the head.
//
// A limited queue's claims use the cursor too, but resume at the first job they left
// waiting rather than after the last one they took (store.LimitedClaim.Next).

import (
	"context"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// claimCursor is a producer's cursor. gen counts rewinds, so a claim that started
// before a rewind cannot move the cursor past what the rewind uncovered.
//
// Two plain claims can be in flight at once (produce, "A second claim"), both
// started from the same cursor; the later one skips the rows the earlier one holds
// and takes the jobs after them. seq orders the claims by when they read the cursor,
// so that the earlier claim, should it come back last, does not move the cursor back
// over the later one's jobs: as with claims in a row, the cursor is where the claim
// that started last ended.
type claimCursor struct {
	mu  sync.Mutex
	at  *store.ClaimCursor
	gen uint64
	// issued counts the reads of the cursor (get); moved is the read whose claim
	// moved the cursor last.
	issued, moved uint64
}

// cursorTicket is what a claim hands back to advance: the generation it read and
// its place among the reads.
type cursorTicket struct{ gen, seq uint64 }

// get returns where the next claim starts (nil: at the head) and the ticket to hand
// back to advance.
func (c *claimCursor) get() (*store.ClaimCursor, cursorTicket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.issued++
	return c.at, cursorTicket{gen: c.gen, seq: c.issued}
}

// advance moves the cursor to the last job a claim took, unless a rewind happened
// since that claim read the cursor, or a claim that read it later moved it already.
func (c *claimCursor) advance(t cursorTicket, at *store.ClaimCursor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == t.gen && t.seq > c.moved {
		c.at, c.moved = at, t.seq
	}
}

// rewind makes the next claim start at the head.
func (c *claimCursor) rewind() { c.rewindTo(nil) }

// rewindTo makes the next claim start at at (nil: the head).
func (c *claimCursor) rewindTo(at *store.ClaimCursor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = at
	c.gen++
}

// rewindAll rewinds and wakes every producer: an outcome may have made a job of any
// queue ready whose run_at lies behind that queue's cursor (and the NOTIFY that
// announced it may have woken a claim that still used the cursor).
func (e *Engine) rewindAll() {
	for _, p := range e.producers {
		p.cursor.rewind()
		signal(p.wake)
	}
}

// headCheckBudget bounds the head check's share of one database backend: it waits at
// least this many times its last duration before the next check. The check is what
// the cursor saves the claims from (a walk over every entry left since vacuum last
// ran), so under a long-held snapshot it grows; the bound keeps it below 5%.
const headCheckBudget = 20

// checkHead runs the producer's head check every poll interval (jittered) while its
// queue claims through a cursor. Finding a due job before the cursor's floor, it moves
// the cursor back to that job and wakes the producer. Not to the head: under a held
// snapshot the claim from the head would walk, in one statement, every entry the check
// just walked. From the job found on, everything is in the claim's ranges
// (store.claimBranch: every branch starts at the floor, the earlier of the cursor and
// now less the lag), and the check finds whatever lies before it next time.
func (e *Engine) checkHead(p *producer) {
	defer e.prodWG.Done()
	timer := time.NewTimer(hostclock.Jitter(e.cfg.PollInterval))
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-e.fetchCtx.Done():
			return
		}
		began := hostclock.Now()
		if behind, err := e.headBehind(p); err != nil {
			if e.fetchCtx.Err() != nil {
				return // stopping: the check was cancelled, nothing failed
			}
			e.cfg.Failures.Warn("claim_head", err, "queue", p.queue)
		} else {
			e.cfg.Failures.OK("claim_head")
			if behind != nil {
				p.cursor.rewindTo(behind)
				signal(p.wake)
			}
		}
		timer.Reset(max(hostclock.Jitter(e.cfg.PollInterval), headCheckBudget*hostclock.Since(began)))
	}
}

// headBehind returns the position of the first due job of the producer's queue when
// it lies before the floor its next claim would use, else nil.
func (e *Engine) headBehind(p *producer) (*store.ClaimCursor, error) {
	at, _ := p.cursor.get()
	if at == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(e.fetchCtx, 30*time.Second)
	defer cancel()
	head, now, err := e.cfg.Store.ClaimHead(ctx, e.cfg.Pool, e.now(), p.queue)
	if err != nil || head == nil {
		return nil, err
	}
	floor := at.RunAt
	if lagged := now.Add(-e.cfg.PollInterval); lagged.Before(floor) {
		floor = lagged
	}
	if !head.RunAt.Before(floor) {
		return nil, nil
	}
	return head, nil
}
