package store

// The limits table's API: setting, deleting and listing limits, which queues need
// the limited claim, each bucket's usage, and the sweep of idle rate windows. The
// statements are in newLimitStatements (limits.go).

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// LimitRow is a row of the limits table. MaxRunning and Rate are 0 when unset.
type LimitRow struct {
	Scope, Target, Key string
	MaxRunning         int
	Rate               int
	Per                time.Duration
	UpdatedAt          time.Time
}

// LimitSet inserts or replaces a limit and notifies channel.
//
// The limits table's trigger (migration 0022) rewrites job_grouped, the function the
// inserts mark their jobs with, and marks the jobs already there; it refuses a
// transaction above READ COMMITTED, so on a pool or a connection the statement runs
// in a READ COMMITTED transaction of its own, and LanesSettle follows its commit. In
// a caller's transaction (a pgx.Tx) the caller runs LanesSettle after committing.
func (s *Store) LimitSet(ctx context.Context, db DBTX, now *time.Time, r LimitRow, channel string) (time.Time, error) {
	var at time.Time
	var notified bool
	err := s.changeLanes(ctx, db, true, func(db DBTX) error {
		return db.QueryRow(ctx, s.limits.set.sql, Now(now), r.Scope, r.Target, r.Key,
			positiveOrNil(r.MaxRunning), positiveOrNil(r.Rate), perOrNil(r), channel).Scan(&at, &notified)
	})
	return at, err
}

// txStarter is what changeLanes needs to run a statement in a transaction of its
// own: *pgxpool.Pool and *pgx.Conn (a pgx.Tx begins savepoints, which would not
// commit the change).
type txStarter interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// changeLanes runs change, a write to the limits table or to a queue's fairness, in a
// READ COMMITTED transaction of its own when db can start one (see LimitSet, FairSet),
// then, when settle and the change rewrote job_grouped or job_fair, LanesSettle. In a
// caller's transaction it runs change alone.
func (s *Store) changeLanes(ctx context.Context, db DBTX, settle bool, change func(DBTX) error) error {
	b, ok := db.(txStarter)
	if _, tx := db.(pgx.Tx); !ok || tx {
		return change(db)
	}
	var changed bool
	err := pgx.BeginTxFunc(ctx, b, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if err := change(tx); err != nil || !settle {
			return err
		}
		// Whether a trigger rewrote job_grouped or job_fair (lanes_refresh,
		// fair_lanes_refresh): a limit's new figures for a queue that was limited
		// already, or a fair queue's new bypass priority, change nothing to settle.
		return tx.QueryRow(ctx, s.limits.changed.sql).Scan(&changed)
	})
	if err != nil || !changed {
		return err
	}
	_, err = s.LanesSettle(ctx, db)
	return err
}

// LanesSettle completes a change of the limits table or of a queue's fairness after it
// committed: it waits for every transaction holding ROW EXCLUSIVE on jobs (an insert
// that marked its job with the previous body of job_grouped or job_fair holds it since
// before the change), then marks the jobs of the queues now limited that such inserts
// left out of jobs_group_ready_idx, and those of the queues now fair that they left out
// of jobs_fair_idx, and returns how many (migrations 0022 and 0024, lanes_settle). It
// runs in a READ COMMITTED transaction of its own when db can start one.
func (s *Store) LanesSettle(ctx context.Context, db DBTX) (int64, error) {
	var n int64
	run := func(db DBTX) error { return db.QueryRow(ctx, s.limits.settle.sql).Scan(&n) }
	b, ok := db.(txStarter)
	if _, tx := db.(pgx.Tx); !ok || tx {
		return n, run(db)
	}
	err := pgx.BeginTxFunc(ctx, b, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error { return run(tx) })
	return n, err
}

// LanesHeal runs LanesSettle in tx when a queue made fair was not settled since
// (queues.fair_unsettled, migration 0024: the client that made it fair stopped before
// its settle, or the change was made by SQL), and reports whether it ran and how many
// jobs it marked. Until a settle, a job inserted racing the change is not claimed. tx
// must be READ COMMITTED.
func (s *Store) LanesHeal(ctx context.Context, tx pgx.Tx) (ran bool, marked int64, err error) {
	var n *int64
	if err := tx.QueryRow(ctx, s.limits.heal.sql).Scan(&n); err != nil {
		return false, 0, err
	}
	if n == nil {
		return false, 0, nil
	}
	return true, *n, nil
}

func positiveOrNil(n int) *int {
	if n <= 0 {
		return nil
	}
	return &n
}

func perOrNil(r LimitRow) *int64 {
	if r.Rate <= 0 {
		return nil
	}
	us := micros(r.Per)
	return &us
}

// LimitDelete deletes a limit, notifying channel; it reports whether one existed.
func (s *Store) LimitDelete(ctx context.Context, db DBTX, scope, target, key, channel string) (bool, error) {
	var n int64
	var notified bool
	// A limit gone marks no job (job_grouped only narrows): nothing to settle.
	err := s.changeLanes(ctx, db, false, func(db DBTX) error {
		return db.QueryRow(ctx, s.limits.remove.sql, scope, target, key, channel).Scan(&n, &notified)
	})
	return n > 0, err
}

// Limits lists the limits table.
func (s *Store) Limits(ctx context.Context, db DBTX) ([]LimitRow, error) {
	rows, err := db.Query(ctx, s.limits.list.sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (LimitRow, error) {
		var r LimitRow
		var f limitFigures
		if err := row.Scan(&r.Scope, &r.Target, &r.Key, &f.maxRunning, &f.rate, &f.per, &r.UpdatedAt); err != nil {
			return r, err
		}
		f.set(&r)
		return r, nil
	})
}

// limitFigures scans a limit's nullable columns max_running, rate and per_us.
type limitFigures struct {
	maxRunning, rate *int
	per              *int64
}

// set puts the figures into r: 0 for a column that is NULL.
func (f *limitFigures) set(r *LimitRow) {
	r.MaxRunning, r.Rate, r.Per = deref(f.maxRunning), deref(f.rate), time.Duration(deref(f.per))*time.Microsecond
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// LimitScopes tells which queues have limits of their own and whether any kind has
// one.
func (s *Store) LimitScopes(ctx context.Context, db DBTX) (queues []string, anyKind bool, err error) {
	err = db.QueryRow(ctx, s.limits.scopes.sql).Scan(&queues, &anyKind)
	return queues, anyKind, err
}

// LimitUsage is one bucket's use of its limit.
type LimitUsage struct {
	LimitRow
	Bucket  string // the concurrency key the figures are for ('' for a wide limit)
	Running int64  // jobs running under a valid lease
	Started int64  // starts within the current window (rate limits)
}

// LimitUsages reports every bucket's usage (see the limit_usage statement).
func (s *Store) LimitUsages(ctx context.Context, db DBTX, now *time.Time) ([]LimitUsage, error) {
	return guarded(ctx, db, s.limits.usage, func(rows pgx.Rows, err error) ([]LimitUsage, error) {
		return collectValues(rows, err, func(row pgx.Row) (LimitUsage, error) {
			var u LimitUsage
			var f limitFigures
			if err := row.Scan(&u.Scope, &u.Target, &u.Key, &u.Bucket, &f.maxRunning, &f.rate, &f.per, &u.Running, &u.Started); err != nil {
				return u, err
			}
			f.set(&u.LimitRow)
			return u, nil
		})
	}, Now(now))
}

// LimitSweep deletes the rate windows that no longer hold a start.
func (s *Store) LimitSweep(ctx context.Context, db DBTX, now *time.Time) (int64, error) {
	tag, err := db.Exec(ctx, s.limits.sweep.sql, Now(now))
	return tag.RowsAffected(), err
}
