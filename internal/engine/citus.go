package engine

// Claims on the Citus layout (docs/citus.md, "Workers on Citus"): every claim statement
// names one concurrency key, the distribution column, so that it runs on the node of
// the key as a router query. The producer's claim walks its queue's keys with pending
// jobs from where its last claim stopped (store.ClaimCitus, with the producer's own
// cursor), sharing each claim among up to store.CitusKeysPerClaim of them.

import (
	"context"

	"github.com/skiplock/skiplock/internal/store"
)

// claimCitus is the producer's claim on the Citus layout, for up to n jobs of which the
// last waiting in claim order wait for an executor.
func (e *Engine) claimCitus(ctx context.Context, p *producer, n, waiting int) ([]*store.Job, claimResult, error) {
	rows, all, err := e.cfg.Store.ClaimCitus(ctx, e.cfg.Pool, e.now(), store.ClaimParams{
		Queue: p.queue, WorkerID: e.cfg.WorkerID, Limit: n, Waiting: waiting, Lease: e.cfg.LeaseDuration,
	}, &p.citus, func(key string, err error) {
		if ctx.Err() == nil {
			e.cfg.Log.Debug("skiplock: removing an idle key from the Citus key table failed", "queue", p.queue, "key", key, "error", err)
		}
	})
	if err != nil {
		return rows, claimResult{}, err
	}
	// Short only when the claim went round every key: keys it did not reach may have
	// due jobs.
	return rows, claimResult{short: len(rows) < n && all}, nil
}
