package skiplock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/migrate"
	"github.com/skiplock/skiplock/internal/store"
)

// Partitioned layout
//
// At high volume, deleting finished jobs row by row costs as much write and vacuum
// work as completing them did. The partitioned layout range-partitions jobs by
// creation time so that retention drops whole partitions instead:
//
//	jobs                  partitioned by RANGE (id); ids are UUIDv7, whose first 48
//	                      bits are the database clock's milliseconds at insert
//	  jobs_legacy         the converted table, ids up to the conversion's next period
//	  jobs_p20300101 …    one per day (or week, from Monday), created ahead
//	  jobs_default        anything else (kept empty in normal operation)
//	job_dedup             (kind, deduplication_key) → job id, kept by triggers
//
// Partitioning by the time-ordered id rather than by created_at keeps the primary key
// (id) a global unique constraint and prunes every by-id statement to one partition.
// The table keeps its name, columns and indexes, so the claim, heartbeat, completion,
// reclaim and admin statements run unchanged.
//
// A partition is dropped only when it lies wholly past the shortest retention window
// and, checked again under the lock that the drop takes, it holds no pending or
// running job and no finished job younger than its state's window. A partition that
// still holds such a job (a job scheduled far ahead, a retry of an old job) is kept
// and reported (RetentionResult.PartitionsKept); its finished jobs are then deleted
// row by row one period after their window, and the partition goes once it is clear.
// No job row is ever moved, so ids, leases and fencing tokens are untouched.

// PartitionPeriod is the time span of one partition.
type PartitionPeriod string

// The partition periods (weeks start on Monday, UTC).
const (
	PartitionDaily  PartitionPeriod = "day"
	PartitionWeekly PartitionPeriod = "week" // the same strings as maint.PeriodDay and maint.PeriodWeek, stored in the settings table
)

// PartitionOpts configure PartitionJobs.
type PartitionOpts struct {
	// Period of one partition. Default PartitionDaily.
	Period PartitionPeriod
	// Premake is how many periods ahead partitions exist, counting the current one.
	// Default 3: two days (or weeks) of maintenance outage lose nothing; should
	// partitions run out, new jobs go to the default partition and nothing fails.
	Premake int
	// LockTimeout bounds the wait for the ACCESS EXCLUSIVE lock on jobs. Default 5s.
	LockTimeout time.Duration
	// Progress, if set, receives one line per step (the CLI passes stderr).
	Progress io.Writer
}

// PartitionReport describes a conversion.
type PartitionReport struct {
	// DedupKeys is the number of deduplication keys copied to job_dedup.
	DedupKeys int64 `json:"dedup_keys"`
	// LegacyUntil is when the converted table stops receiving new jobs.
	LegacyUntil time.Time `json:"legacy_until"`
	// Created names the partitions created ahead.
	Created []string `json:"created"`
	// LockHeld is how long jobs was locked (nanoseconds in JSON).
	LockHeld time.Duration `json:"lock_held_ns"`
}

// ErrNotPartitionable is returned (wrapped) by PartitionJobs on a schema with the
// Citus layout (MigrateOpts.Citus): a distributed jobs table is not partitioned.
var ErrNotPartitionable = errors.New("skiplock: jobs cannot be partitioned")

// ErrAlreadyPartitioned is returned by PartitionJobs on a partitioned jobs table.
var ErrAlreadyPartitioned = errors.New("skiplock: jobs is already partitioned")

// PartitionJobs converts schema's plain jobs table to the partitioned layout in one
// transaction. No job row is copied: the table becomes the partition jobs_legacy, so
// the lock on jobs (which stops enqueues and claims) lasts one sequential scan of the
// table (ATTACH PARTITION verifies the bound) plus the copy of its deduplication keys
// (docs/operations.md gives a measured duration). Run it as the role that owns the
// tables (the migrator), after `skiplock migrate up`. Workers keep running: their
// statements wait for the lock, then continue on the new layout.
func PartitionJobs(ctx context.Context, pool *pgxpool.Pool, schema string, opts PartitionOpts) (*PartitionReport, error) {
	if ctx == nil || pool == nil {
		return nil, invalid("pool", "ctx and pool must not be nil")
	}
	if schema == "" {
		schema = DefaultSchema
	}
	if opts.Period == "" {
		opts.Period = PartitionDaily
	}
	if opts.Period != PartitionDaily && opts.Period != PartitionWeekly {
		return nil, invalid("period", "%q is neither %q nor %q", opts.Period, PartitionDaily, PartitionWeekly)
	}
	if opts.Premake == 0 {
		opts.Premake = 3
	}
	if opts.Premake < 1 || opts.Premake > 60 {
		return nil, invalid("premake", "%d is outside 1..60", opts.Premake)
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = 5 * time.Second
	}
	progress := func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, format+"\n", args...)
		}
	}
	st, err := store.New(schema)
	if err != nil {
		return nil, invalid("schema", "%v", err)
	}
	if dist, err := migrate.Distributed(ctx, pool, schema); err != nil {
		return nil, err
	} else if dist {
		return nil, fmt.Errorf("%w: %s.jobs is distributed by Citus (docs/citus.md)", ErrNotPartitionable, schema)
	}
	rep := &PartitionReport{}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		progress("locking %s.jobs (waiting at most %s)", schema, opts.LockTimeout)
		if err := st.LockJobs(ctx, tx, opts.LockTimeout); err != nil {
			return fmt.Errorf("locking jobs: %w", wrapPgError(err))
		}
		locked := hostclock.Now()
		layout, err := st.JobsLayout(ctx, tx)
		if err != nil {
			return err
		}
		if layout == store.LayoutPartitioned {
			return ErrAlreadyPartitioned
		}
		now, err := st.DBClock(ctx, tx)
		if err != nil {
			return err
		}
		first := maint.PeriodStart(string(opts.Period), now).Add(maint.PeriodLength(string(opts.Period)))
		rep.LegacyUntil = first
		progress("attaching the table as %s (ids before %s) and copying deduplication keys", store.LegacyPartition, first.Format(time.DateTime))
		rep.DedupKeys, err = st.ConvertToPartitioned(ctx, tx, store.ConvertParams{
			Period: string(opts.Period), Premake: opts.Premake, LegacyTo: store.UUIDv7Floor(first),
		})
		if err != nil {
			return fmt.Errorf("converting jobs: %w", wrapPgError(err))
		}
		progress("copied %d deduplication keys", rep.DedupKeys)
		// The legacy table covers the current period; premake counts it.
		for i := 0; i < opts.Premake-1; i++ {
			from := first.Add(time.Duration(i) * maint.PeriodLength(string(opts.Period)))
			name := maint.PartitionName(from)
			created, err := st.CreatePartition(ctx, tx, name, store.UUIDv7Floor(from),
				store.UUIDv7Floor(from.Add(maint.PeriodLength(string(opts.Period)))), store.LegacyPartition)
			if err != nil {
				return fmt.Errorf("creating partition %s: %w", name, err)
			}
			if created {
				rep.Created = append(rep.Created, name)
				progress("created %s", name)
			}
		}
		rep.LockHeld = hostclock.Since(locked)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("partitioning %s.jobs: %w", schema, err)
	}
	progress("done; jobs was locked for %s", rep.LockHeld.Round(time.Millisecond))
	return rep, nil
}

// PartitionInfo describes one partition of jobs.
type PartitionInfo struct {
	Name string `json:"name"`
	// From and To bound the creation times of the partition's jobs; From is zero for
	// the legacy partition (no lower bound); both are zero for the default partition.
	From    time.Time `json:"from,omitzero"`
	To      time.Time `json:"to,omitzero"`
	Default bool      `json:"default"`
	// Rows is PostgreSQL's estimate (updated by VACUUM and ANALYZE).
	Rows int64 `json:"rows"`
	// Bytes is the partition's size with its indexes.
	Bytes int64 `json:"bytes"`
}

// Partitions lists the partitions of jobs (none when jobs is not partitioned).
func (c *Client) Partitions(ctx context.Context) ([]PartitionInfo, error) {
	parts, err := c.store.ListPartitions(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("listing partitions: %w", wrapPgError(err))
	}
	out := make([]PartitionInfo, 0, len(parts))
	for _, p := range parts {
		info := PartitionInfo{Name: p.Name, Default: p.Default, Rows: p.Rows, Bytes: p.Bytes}
		if !p.Default {
			if p.From != store.MinUUID {
				info.From, _ = store.UUIDv7Time(p.From)
			}
			info.To, _ = store.UUIDv7Time(p.To)
		}
		out = append(out, info)
	}
	return out, nil
}
