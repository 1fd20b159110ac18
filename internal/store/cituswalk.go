package store

// The claim over keys on the Citus layout (docs/citus.md, "Workers on Citus"): every
// claim statement names one concurrency key, so a claim of a queue walks the queue's
// keys with pending jobs (CitusKeys, a read of the small key table) in key order from
// where the claimer's last claim stopped, wrapping round, and shares the claim among up
// to CitusKeysPerClaim of them: a key with a million jobs takes its share of a claim
// and no more, and every other key with work is reached within a few claims. A
// worker's producer keeps a cursor of its own (internal/engine/citus.go); manual claims
// (Client.Manual) share one per queue and store (CitusCursorOf).

import (
	"context"
	"sync/atomic"
	"time"
)

// CitusDB runs the walk's statements, and the transactions of CitusKeyIdle: a pool.
type CitusDB interface {
	DBTX
	Beginner
}

// CitusCursor is the key a claimer's last claim on the Citus layout stopped at. Its
// zero value starts at the first key; it is safe for concurrent use.
type CitusCursor struct{ after atomic.Pointer[string] }

// CitusCursorOf returns the store's cursor of queue, shared by its manual claims.
func (s *Store) CitusCursorOf(queue string) *CitusCursor {
	c, _ := s.citusCursors.LoadOrStore(queue, &CitusCursor{})
	return c.(*CitusCursor)
}

// ClaimCitus is the claim of up to p.Limit jobs of p.Queue on the Citus layout, of
// which the last p.Waiting in claim order are written claimed, not started. It
// returns the jobs and whether it went round every key of the queue with pending jobs
// (so fewer than p.Limit means the queue had no more due jobs). A key whose claim finds
// nothing leaves the key table when it has no pending job left (CitusKeyIdle); a failure
// of that is reported to idle, if set, and costs only a later claim that finds nothing
// again.
func (s *Store) ClaimCitus(ctx context.Context, db CitusDB, now *time.Time, p ClaimParams, cur *CitusCursor,
	idle func(key string, err error)) ([]*Job, bool, error) {
	n := p.Limit
	if n <= 0 {
		return nil, true, nil
	}
	keys, all, err := s.citusWalk(ctx, db, now, p.Queue, cur, min(n, CitusKeysPerClaim))
	if err != nil || len(keys) == 0 {
		return nil, all, err
	}
	var rows []*Job
	ready := p.ready()
	take := func(key string, limit int) (int, error) {
		start := min(max(ready-len(rows), 0), limit)
		q := p
		q.Limit, q.Waiting = limit, limit-start
		got, err := s.ClaimKey(ctx, db, now, q, key)
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
			return rows, false, err
		}
		key := k
		cur.after.Store(&key)
		switch {
		case got == limit:
			full = append(full, k)
		case got == 0:
			if _, err := s.CitusKeyIdle(ctx, db, now, p.Queue, k); err != nil && idle != nil {
				idle(k, err)
			}
		}
	}
	for _, k := range full {
		if len(rows) >= n {
			break
		}
		if _, err := take(k, n-len(rows)); err != nil {
			return rows, false, err
		}
	}
	// Went round only when the claim reached every key: keys it did not reach may
	// have due jobs.
	return rows, all, nil
}

// citusWalk returns up to m keys of queue with pending jobs that may be due at now,
// the first after cur,
// wrapping round to the first key; all reports that they are all the queue's keys
// from there round to where it stopped.
func (s *Store) citusWalk(ctx context.Context, db DBTX, now *time.Time, queue string, cur *CitusCursor, m int) (keys []string, all bool, err error) {
	after := cur.after.Load()
	keys, err = s.CitusKeys(ctx, db, now, queue, after, m)
	if err != nil || len(keys) == m {
		return keys, false, err
	}
	if after == nil {
		return keys, true, nil
	}
	more, err := s.CitusKeys(ctx, db, now, queue, nil, m-len(keys))
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
