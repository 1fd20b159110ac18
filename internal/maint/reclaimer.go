package maint

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/store"
)

// Reclaimer returns jobs whose lease expired (their worker died, hung or lost the
// database) to pending after their kind's retry delay, or fails them when their
// attempts are exhausted. Each update is fenced by the lease token and by the lease
// still being expired, so running it from several processes at once is safe; the
// advisory lock only saves the duplicate work.
type Reclaimer struct {
	Store *store.Store
	// Every is the interval between runs.
	Every time.Duration
	// Clock supplies statement time; nil means the database's now().
	Clock interface{ Now() time.Time }
	// Delay returns the retry delay of a job of kind after attempts; it must not
	// panic and should return 0..max schedule (the root package clamps it).
	Delay func(kind string, attempts int) time.Duration
	// Reclaimed, when set, hears how many jobs each batch reclaimed.
	Reclaimed func(n int)

	// The floor: where the next pass's scan of expired leases starts. A pass reads
	// the leases index in expiry order from its start up to the pass's time, and
	// every running version left since vacuum last removed one has an entry there.
	// While a snapshot held open elsewhere (a forgotten BEGIN, a long report, a
	// replication slot) stops vacuum, that is an entry for every job that ran since
	// it began, each costing the pass a buffer read, every ReclaimInterval, growing
	// for as long as the snapshot is held (docs/benchmarks-archive.md has the
	// measurements). So a pass that found every expired lease it could see
	// (it listed fewer than a batch) leaves the floor at its own time less
	// reclaimFloorMargin, and the next pass starts there.
	//
	// The floor is a starting point, never a promise: a lease that ends before it
	// can still appear, when the transaction that wrote it began before that pass
	// and committed after it (a Manual claim inside a long caller transaction), or
	// when another client's injected clock runs behind this one's. Every
	// reclaimFullEvery-th pass, the first of each reclaimer, and any pass whose
	// time is behind the previous one's, scan from the head, so such a lease waits
	// at most reclaimFullEvery intervals longer than others.
	mu       sync.Mutex
	floor    *time.Time // nil: the next pass scans from the head
	lastPass time.Time  // the time of the last exhaustive pass
	passes   int        // exhaustive passes since the last one from the head
}

// reclaimFloorMargin is how far before an exhaustive pass's time the next pass
// starts. A lease counts from its statement's transaction start, and the runtime's
// claims and heartbeats commit within milliseconds of it: a lease written by one
// still in flight across the pass ends after the pass's time less its own length,
// so it is above the floor unless its transaction was open for longer than the
// margin and the lease together. What a pass from the floor still reads is bounded
// by the interval, not by how long vacuum has been held off: the entries of the jobs
// whose leases ended since the last pass (about ReclaimInterval + margin of claims).
const reclaimFloorMargin = 5 * time.Second

// reclaimFullEvery paces the passes from the index's head (every tenth pass: 2.5
// minutes at the default 15 s interval).
const reclaimFullEvery = 10

// ReclaimResult reports one reclaimer run.
type ReclaimResult struct {
	Requeued int // back to pending after the retry delay
	Failed   int // attempts exhausted
}

// LogAttrs implements Result.
func (r ReclaimResult) LogAttrs() []any { return []any{"requeued", r.Requeued, "failed", r.Failed} }

// Name implements Service.
func (r *Reclaimer) Name() string { return "reclaimer" }

// Interval implements Service.
func (r *Reclaimer) Interval() time.Duration { return r.Every }

// RunOnce implements Service: it reclaims inside the lock's transaction.
func (r *Reclaimer) RunOnce(ctx context.Context, tx pgx.Tx) (Result, error) {
	return r.Reclaim(ctx, tx)
}

// Reclaim reclaims every expired lease, in batches of 1,000, through db. One time,
// the clock's or the database's when the pass begins, serves the whole pass.
func (r *Reclaimer) Reclaim(ctx context.Context, db store.DBTX) (ReclaimResult, error) {
	const batch = 1000
	var res ReclaimResult
	now := store.NowParam(r.Clock)
	if now == nil {
		t, err := r.Store.DBClock(ctx, db)
		if err != nil {
			return res, fmt.Errorf("reading the database clock: %w", err)
		}
		now = &t
	}
	floor := r.startAt(*now)
	for {
		expired, err := r.Store.ListExpired(ctx, db, now, floor, batch)
		if err != nil {
			return res, fmt.Errorf("listing expired leases: %w", err)
		}
		if len(expired) == 0 {
			r.passed(*now, floor == nil)
			return res, nil
		}
		leases := make([]store.Lease, len(expired))
		delays := make([]time.Duration, len(expired))
		for i, e := range expired {
			leases[i] = e.Lease
			delays[i] = r.Delay(e.Kind, e.Attempts)
		}
		changed, err := r.Store.Reclaim(ctx, db, now, leases, delays)
		if err != nil {
			return res, fmt.Errorf("reclaiming %d expired lease(s): %w", len(leases), err)
		}
		for _, st := range changed {
			if st == store.StatusFailed {
				res.Failed++
			} else {
				res.Requeued++
			}
		}
		if r.Reclaimed != nil {
			r.Reclaimed(len(changed))
		}
		if len(expired) < batch {
			r.passed(*now, floor == nil)
			return res, nil
		}
		if len(changed) == 0 {
			// A full batch of leases all locked elsewhere (store.Reclaim skips those):
			// listing again would return the same ones. A later pass retries them.
			return res, nil
		}
	}
}

// startAt returns where a pass at now starts its scan: nil for the index's head.
func (r *Reclaimer) startAt(now time.Time) *time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.floor == nil || r.passes >= reclaimFullEvery || now.Before(r.lastPass) {
		return nil
	}
	f := *r.floor
	return &f
}

// passed records an exhaustive pass at now (fromHead: its scan started at the head).
func (r *Reclaimer) passed(now time.Time, fromHead bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fromHead {
		r.passes = 0
	}
	r.passes++
	f := now.Add(-reclaimFloorMargin)
	r.floor, r.lastPass = &f, now
}
