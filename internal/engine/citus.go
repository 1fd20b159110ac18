package engine

// Claims on the Citus layout (docs/citus.md, "Workers on Citus"): every claim statement
// names one concurrency key, the distribution column, so that it runs on the node of
// the key as a router query. A producer walks its queue's keys that have pending jobs
// (store.CitusKeys, a read of the small key table the layout keeps) in key order from
// where its last claim stopped, wrapping round, and shares each claim among up to
// store.CitusKeysPerClaim of them: a key with a million jobs takes its share of a claim and
// no more, and every other key with work is reached within a few claims.

import (
	"context"

	"github.com/skiplock/skiplock/internal/store"
)

// claimCitus is the producer's claim on the Citus layout, for up to n jobs of which the
// last waiting in claim order wait for an executor.
func (e *Engine) claimCitus(ctx context.Context, p *producer, n, waiting int) ([]*store.Job, claimResult, error) {
	if n <= 0 {
		return nil, claimResult{short: true}, nil
	}
	keys, all, err := e.citusKeys(ctx, p, min(n, store.CitusKeysPerClaim))
	if err != nil || len(keys) == 0 {
		return nil, claimResult{short: true}, err
	}
	var rows []*store.Job
	ready := n - waiting
	take := func(key string, limit int) (int, error) {
		start := min(max(ready-len(rows), 0), limit)
		got, err := e.cfg.Store.ClaimKey(ctx, e.cfg.Pool, e.now(), store.ClaimParams{
			Queue: p.queue, WorkerID: e.cfg.WorkerID, Limit: limit, Waiting: limit - start, Lease: e.cfg.LeaseDuration,
		}, key)
		rows = append(rows, got...)
		return len(got), err
	}
	// A first round gives each key its share; a second gives what keys with fewer due
	// jobs left to those that filled theirs, in the same order.
	share := (n + len(keys) - 1) / len(keys)
	var full []string
	for _, k := range keys {
		if len(rows) >= n {
			break
		}
		limit := min(share, n-len(rows))
		got, err := take(k, limit)
		if err != nil {
			return rows, claimResult{}, err
		}
		s := k
		p.citusAfter = &s
		switch {
		case got == limit:
			full = append(full, k)
		case got == 0:
			e.citusKeyIdle(ctx, p.queue, k)
		}
	}
	for _, k := range full {
		if len(rows) >= n {
			break
		}
		if _, err := take(k, n-len(rows)); err != nil {
			return rows, claimResult{}, err
		}
	}
	// Short only when the claim went round every key: keys it did not reach may have
	// due jobs.
	return rows, claimResult{short: len(rows) < n && all}, nil
}

// citusKeys returns up to m keys of the producer's queue with pending jobs, the first
// after where its last claim stopped, wrapping round to the first key; all reports
// that they are all the queue's keys from there round to where it stopped.
func (e *Engine) citusKeys(ctx context.Context, p *producer, m int) (keys []string, all bool, err error) {
	after := p.citusAfter
	keys, err = e.cfg.Store.CitusKeys(ctx, e.cfg.Pool, p.queue, after, m)
	if err != nil || len(keys) == m {
		return keys, false, err
	}
	if after == nil {
		return keys, true, nil
	}
	more, err := e.cfg.Store.CitusKeys(ctx, e.cfg.Pool, p.queue, nil, m-len(keys))
	if err != nil {
		return nil, false, err
	}
	full := len(more) == m-len(keys)
	for _, k := range more {
		if k > *after {
			full = false
			break
		}
		keys = append(keys, k)
	}
	return keys, !full, nil
}

// citusKeyIdle removes a key whose claim found nothing from the queue's keys with
// pending jobs when it has none left (store.CitusKeyIdle). A failure costs only a
// later claim that finds nothing again.
func (e *Engine) citusKeyIdle(ctx context.Context, queue, key string) {
	if _, err := e.cfg.Store.CitusKeyIdle(ctx, e.cfg.Pool, queue, key); err != nil && ctx.Err() == nil {
		e.cfg.Log.Debug("skiplock: removing an idle key from the Citus key table failed", "queue", queue, "error", err)
	}
}
