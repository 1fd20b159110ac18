package maint

import (
	"context"
	"fmt"
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
}

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

// Reclaim reclaims every expired lease, in batches of 1,000, through db.
func (r *Reclaimer) Reclaim(ctx context.Context, db store.DBTX) (ReclaimResult, error) {
	const batch = 1000
	var res ReclaimResult
	for {
		now := store.NowParam(r.Clock)
		expired, err := r.Store.ListExpired(ctx, db, now, batch)
		if err != nil {
			return res, fmt.Errorf("listing expired leases: %w", err)
		}
		if len(expired) == 0 {
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
			return res, nil
		}
	}
}
