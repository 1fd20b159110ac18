package store

// The limited claim's Go side: ClaimLimited sends the pipeline of limits.go (lock,
// claim, status) and reads what it returns.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LimitedClaim is the outcome of ClaimLimited.
type LimitedClaim struct {
	Jobs []*Job
	// Waiting is how many due jobs of the queue remain unclaimed (at most the claim's
	// Limit): when the claim was short, they were held back by a limit.
	Waiting int
	// RetryIn, when set, is how soon a full rate window frees a start.
	RetryIn *time.Duration
	// Next is the first of the waiting jobs in claim order: where the queue's next
	// limited claim resumes (nil when none waits). Unlike the plain claim's cursor, the
	// last job taken, it never passes a job a limit held back, which must stay in
	// reach of the next claim.
	Next *ClaimCursor
}

// ClaimLimited is Claim for a queue some limit governs: see limitedClaimSQL. The head
// window is the limit and half as many again, at least 16 and at most 128 more: room
// for the jobs a limit rejects (successors come from those), while the cost of the
// statement grows with the window.
func (s *Store) ClaimLimited(ctx context.Context, db Batcher, now *time.Time, p ClaimParams) (LimitedClaim, error) {
	var out LimitedClaim
	pl := newPipeline(db, s.limits.claim)
	pl.add(s.limits.lock)
	s.queueLimitedClaim(pl, s.limits.claim, now, p, p.Limit+max(16, min(p.Limit/2, 128)))
	prio, after, lag := p.cursorArgs()
	pl.add(s.limits.status, Now(now), p.Queue, p.Limit, prio, after, lag)
	br, err := pl.send(ctx)
	if err != nil {
		return out, err
	}
	defer br.Close()
	jobs, err := limitedClaimed(br)
	if err != nil {
		return out, err
	}
	out.Jobs = jobs
	var retryUS *int64
	var nextPrio *int
	var nextAt *time.Time
	if err := br.QueryRow().Scan(&out.Waiting, &nextPrio, &nextAt, &retryUS); err != nil {
		return out, fmt.Errorf("limit status: %w", err)
	}
	if nextPrio != nil && nextAt != nil {
		out.Next = &ClaimCursor{Priority: *nextPrio, RunAt: *nextAt}
	}
	if retryUS != nil {
		d := time.Duration(*retryUS) * time.Microsecond
		out.RetryIn = &d
	}
	// Jobs read before a failed commit were never claimed: none are returned with
	// the error (pipeline.end).
	if err := pl.end(br); err != nil {
		return LimitedClaim{}, err
	}
	return out, nil
}

// queueLimitedClaim queues claim (limitedClaimSQL or successorClaimSQL) with its
// parameters, its head window and its cursor.
func (s *Store) queueLimitedClaim(pl *pipeline, claim stmt, now *time.Time, p ClaimParams, window int) {
	// In the caller's order (the earliest started first: succ pairs successors with
	// predecessors by it); the claim reads the predecessors without locking them.
	ids, tokens := splitLeases(p.Preds)
	prio, after, lag := p.cursorArgs()
	pl.add(claim, Now(now), p.Queue, p.WorkerID, micros(p.Lease), p.Limit, window, uuidArg(ids), uuidArg(tokens),
		prio, after, lag, p.ready())
}

// limitedClaimed reads the lock's result and the claimed jobs of a limited claim's
// batch, in claim order.
func limitedClaimed(br pgx.BatchResults) ([]*Job, error) {
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("limit lock: %w", err)
	}
	rows, err := br.Query()
	jobs, err := collectJobRows(rows, err, func(d []any, j *Job) []any {
		return append(d, &j.Unblocks, &j.SlotOf, &j.SlotToken, &j.Rated)
	})
	if err != nil {
		return nil, err
	}
	SortClaimOrder(jobs)
	return jobs, nil
}
