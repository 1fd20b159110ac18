package store

// A fair queue's settings (docs/fairness.md): which queues are fair, their keys'
// weights, and the keys' backlog (FairKeys).

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// FairQueue is a fair queue's setting: its name and bypass priority (nil: none).
type FairQueue struct {
	Name           string
	BypassPriority *int
}

// FairSet turns fairness on or off for queue, with its bypass priority, and
// announces the change on channel.
//
// The queues table's triggers (migration 0024) rewrite job_fair, the function the
// inserts mark their jobs with (fair_indexed: whether a job enters jobs_fair_idx, the
// only index the fair claim reads), and mark the jobs already there; they refuse a
// transaction above READ COMMITTED, so on a pool or a connection the statement runs in
// a READ COMMITTED transaction of its own, and LanesSettle follows its commit when the
// queue became fair: a job inserted racing the change, under job_fair's previous
// body, is marked before FairSet returns. In a caller's transaction (a pgx.Tx) the
// caller runs LanesSettle after committing; until then (or the lane settler's next
// run: LanesHeal) such a job is not claimed.
func (s *Store) FairSet(ctx context.Context, db DBTX, now *time.Time, queue string, fair bool, bypass *int, channel string) (time.Time, error) {
	var at time.Time
	var notified bool
	// A queue made plain again marks no job (job_fair only narrows): nothing to settle.
	err := s.changeLanes(ctx, db, fair, func(db DBTX) error {
		return db.QueryRow(ctx, s.fair.set.sql, Now(now), queue, fair, bypass, channel).Scan(&at, &notified)
	})
	return at, err
}

// FairQueues lists the fair queues.
func (s *Store) FairQueues(ctx context.Context, db DBTX) ([]FairQueue, error) {
	rows, err := db.Query(ctx, s.fair.scopes.sql)
	return collectValues(rows, err, func(r pgx.Row) (FairQueue, error) {
		var q FairQueue
		err := r.Scan(&q.Name, &q.BypassPriority)
		return q, err
	})
}

// FairWeight is a key's weight in a fair queue.
type FairWeight struct {
	Queue, Key string
	Weight     int
	UpdatedAt  time.Time
}

// FairWeightSet sets key's weight in queue (1 to 1000).
func (s *Store) FairWeightSet(ctx context.Context, db DBTX, now *time.Time, queue, key string, weight int) error {
	var at time.Time
	return db.QueryRow(ctx, s.fair.weight.sql, Now(now), queue, key, weight).Scan(&at)
}

// FairWeightDelete removes key's weight in queue (it weighs 1 again) and reports
// whether it had one.
func (s *Store) FairWeightDelete(ctx context.Context, db DBTX, queue, key string) (bool, error) {
	tag, err := db.Exec(ctx, s.fair.unweight.sql, queue, key)
	return tag.RowsAffected() > 0, err
}

// FairWeights lists the weights of queue's keys (every queue's when queue is nil).
func (s *Store) FairWeights(ctx context.Context, db DBTX, queue *string) ([]FairWeight, error) {
	rows, err := db.Query(ctx, s.fair.weights.sql, queue)
	return collectValues(rows, err, func(r pgx.Row) (FairWeight, error) {
		var w FairWeight
		err := r.Scan(&w.Queue, &w.Key, &w.Weight, &w.UpdatedAt)
		return w, err
	})
}

// FairKey is one row of FairKeys: a key of a fair queue, or (Key nil) the keys
// beyond the top ones, summed.
type FairKey struct {
	Key *string
	// Keys is how many keys the row stands for (1 for a key's own row).
	Keys int64
	// Due counts the due jobs, each key's counted up to the cap.
	Due int64
	// Oldest is the run_at of the oldest due job counted (nil: none due).
	Oldest *time.Time
	// Now is the database time the figures were taken at.
	Now time.Time
}

// FairKeysParams bound FairKeys: the due jobs counted per key (Cap), the keys read
// (MaxKeys), and the keys reported one by one (Top).
type FairKeysParams struct {
	Queue             string
	Cap, MaxKeys, Top int
}

// FairKeys returns the top keys of a fair queue by due jobs, and the rest summed.
func (s *Store) FairKeys(ctx context.Context, db DBTX, now *time.Time, p FairKeysParams) ([]FairKey, error) {
	return guarded(ctx, db, s.fair.keys, func(rows pgx.Rows, err error) ([]FairKey, error) {
		return collectValues(rows, err, func(r pgx.Row) (FairKey, error) {
			var k FairKey
			var other bool
			err := r.Scan(&k.Key, &k.Keys, &k.Due, &k.Oldest, &k.Now, &other)
			return k, err
		})
	}, Now(now), p.Queue, p.Cap, p.MaxKeys, p.Top)
}
