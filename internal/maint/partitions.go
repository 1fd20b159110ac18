package maint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/store"
)

// Partition periods, as stored in the partitioning settings.
const (
	PeriodDay  = "day"
	PeriodWeek = "week"
)

// PeriodLength is the span of one partition of period.
func PeriodLength(period string) time.Duration {
	if period == PeriodWeek {
		return 7 * 24 * time.Hour
	}
	return 24 * time.Hour
}

// PeriodStart returns the start (UTC) of the period holding t; weeks start on Monday.
func PeriodStart(period string, t time.Time) time.Time {
	t = t.UTC()
	d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	if period == PeriodWeek {
		d = d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
	}
	return d
}

// PartitionName names the partition starting at start.
func PartitionName(start time.Time) string { return "jobs_p" + start.Format("20060102") }

// maintainPartitions creates the partitions ahead and drops those past the window.
// Bounds follow the database's clock (ids are generated from it), cut-offs of the
// rows' ages follow Config.Clock (updated_at was written with it).
func (r *Retention) maintainPartitions(ctx context.Context, settings store.PartitionSettings, res *RetentionResult) error {
	cfg := r.Settings
	period := settings.Period
	dbNow, err := r.Store.DBClock(ctx, r.Pool)
	if err != nil {
		return fmt.Errorf("retention: reading the database clock: %w", err)
	}
	parts, err := r.Store.ListPartitions(ctx, r.Pool)
	if err != nil {
		return fmt.Errorf("retention: listing partitions: %w", err)
	}
	covered := func(t time.Time) bool {
		id := store.UUIDv7Floor(t)
		for _, p := range parts {
			if !p.Default && p.From <= id && id < p.To {
				return true
			}
		}
		return false
	}
	newest := ""
	for _, p := range parts {
		if !p.Default && (newest == "" || p.To > parts[indexOf(parts, newest)].To) {
			newest = p.Name
		}
	}
	// Create ahead.
	first := PeriodStart(period, dbNow)
	for i := 0; i < settings.Premake; i++ {
		from := first.Add(time.Duration(i) * PeriodLength(period))
		if covered(from) {
			continue
		}
		name := PartitionName(from)
		created, err := r.partitionDDL(ctx, func(tx pgx.Tx) (bool, error) {
			return r.Store.CreatePartition(ctx, tx, name, store.UUIDv7Floor(from),
				store.UUIDv7Floor(from.Add(PeriodLength(period))), newest)
		})
		switch {
		case err != nil && isPrivilegeError(err):
			r.Log.Warn("skiplock: this role may not create partitions; run retention as the table owner (skiplock retention run)", "partition", name, "error", err)
			return nil
		case err != nil && isLockTimeout(err):
			r.Log.Warn("skiplock: creating a partition timed out waiting for its lock; retrying next run", "partition", name)
			continue
		case err != nil:
			// Typically: the default partition holds jobs of this range. They stay
			// there (row retention covers them); later periods still get partitions.
			r.Log.Error("skiplock: creating a partition failed", "partition", name, "error", err)
			continue
		case created:
			res.PartitionsCreated = append(res.PartitionsCreated, name)
		}
	}
	// Drop expired partitions: wholly older than the shortest window, by the bound.
	shortest := time.Duration(-1)
	for _, st := range store.FinishedStatuses {
		if w, ok := cfg.window(st); ok && (shortest < 0 || w < shortest) {
			shortest = w
		}
	}
	if shortest < 0 {
		return nil // every finished state is kept forever
	}
	horizon := store.UUIDv7Floor(dbNow.Add(-shortest))
	cut := func(st string) *time.Time {
		w, ok := cfg.window(st)
		if !ok {
			return nil // kept forever: any such job blocks
		}
		t := dbNow
		if r.Clock != nil {
			t = r.Clock.Now()
		}
		t = t.Add(-w)
		return &t
	}
	cs, cf, cc := cut(store.StatusSucceeded), cut(store.StatusFailed), cut(store.StatusCancelled)
	for _, p := range parts {
		if p.Default || p.To > horizon {
			continue
		}
		b, err := r.Store.RangeBlockers(ctx, r.Pool, p.From, p.To, cs, cf, cc)
		if err != nil {
			return fmt.Errorf("retention: checking partition %s: %w", p.Name, err)
		}
		if b.Blocked() {
			res.PartitionsKept = append(res.PartitionsKept, kept(p.Name, b))
			continue
		}
		var under store.Blockers
		dropped, err := r.partitionDDL(ctx, func(tx pgx.Tx) (bool, error) {
			// Checked again under the lock: nothing can change the partition's jobs now.
			if under, err = r.Store.RangeBlockers(ctx, tx, p.From, p.To, cs, cf, cc); err != nil || under.Blocked() {
				return false, err
			}
			return true, r.Store.DropPartition(ctx, tx, p.Name, p.From, p.To)
		})
		switch {
		case err != nil && isPrivilegeError(err):
			r.Log.Warn("skiplock: this role may not drop partitions; run retention as the table owner (skiplock retention run)", "partition", p.Name, "error", err)
			return nil
		case err != nil && isLockTimeout(err):
			r.Log.Warn("skiplock: dropping a partition timed out waiting for its lock; retrying next run", "partition", p.Name)
		case err != nil:
			return fmt.Errorf("retention: dropping partition %s: %w", p.Name, err)
		case dropped:
			res.PartitionsDropped = append(res.PartitionsDropped, p.Name)
		default:
			res.PartitionsKept = append(res.PartitionsKept, kept(p.Name, under))
		}
	}
	return nil
}

func indexOf(parts []store.Partition, name string) int {
	for i, p := range parts {
		if p.Name == name {
			return i
		}
	}
	return -1
}

func kept(name string, b store.Blockers) KeptPartition {
	k := KeptPartition{Name: name, Pending: b.Pending, Leased: b.Running}
	switch {
	case b.Pending > 0 || b.Running > 0:
		k.Reason = fmt.Sprintf("%d pending and %d leased (claimed or running) job(s)", b.Pending, b.Running)
	default:
		k.Reason = "finished jobs younger than their retention window"
	}
	return k
}

// partitionDDL runs f in a transaction that holds the ACCESS EXCLUSIVE lock on jobs
// (waiting at most RetentionSettings.PartitionLockTimeout); f's false rolls back.
func (r *Retention) partitionDDL(ctx context.Context, f func(tx pgx.Tx) (bool, error)) (bool, error) {
	var done bool
	errSkip := errors.New("skip")
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		if err := r.Store.LockJobs(ctx, tx, r.Settings.PartitionLockTimeout); err != nil {
			return err
		}
		ok, err := f(tx)
		if err != nil {
			return err
		}
		if !ok {
			return errSkip
		}
		done = true
		return nil
	})
	if errors.Is(err, errSkip) {
		return false, nil
	}
	return done, err
}

// isPrivilegeError reports a permission failure (the role may not run DDL).
func isPrivilegeError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42501")
}

// isLockTimeout reports a lock_timeout expiry.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
