package maint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// ErrNoJobsTable is returned by a retention run on a schema without a jobs table.
var ErrNoJobsTable = errors.New("the jobs table is missing")

// RetentionSettings configure Retention (the root package's RetentionConfig, with
// its defaults applied).
type RetentionSettings struct {
	Every time.Duration
	// Windows maps a finished state to how long its jobs are kept; a state that is
	// absent (or not positive) is kept forever.
	Windows              map[string]time.Duration
	BatchSize            int
	MaxBatches           int
	OutboxPublished      time.Duration
	PartitionLockTimeout time.Duration
}

// longest returns the longest retention window of the finished states; ok is false
// when a state is kept forever.
func (s RetentionSettings) longest() (time.Duration, bool) {
	var longest time.Duration
	for _, st := range store.FinishedStatuses {
		w, ok := s.window(st)
		if !ok {
			return 0, false
		}
		longest = max(longest, w, s.OutboxPublished)
	}
	return longest, true
}

// window returns the retention of a finished state; ok is false for "keep forever".
func (s RetentionSettings) window(status string) (time.Duration, bool) {
	d := s.Windows[status]
	return d, d > 0
}

// Retention deletes finished jobs past their state's window in small batches, and
// in the partitioned layout creates partitions ahead and drops expired ones.
type Retention struct {
	Store    *store.Store
	Pool     *pgxpool.Pool
	Log      *slog.Logger
	Clock    interface{ Now() time.Time } // nil: the database's now()
	Settings RetentionSettings
	// Observe, when set, hears about every run's result, errors included (the
	// client's counters of deleted rows and of runs that ended behind).
	Observe func(RetentionResult)
}

// KeptPartition is an expired partition that could not be dropped yet, and why.
type KeptPartition struct {
	Name            string
	Pending, Leased int64
	Reason          string
}

// RetentionResult reports one retention run.
type RetentionResult struct {
	Succeeded, Failed, Cancelled int64
	OutboxPublished              int64
	Lineage                      int64 // tx_lineage rows pruned
	Partitioned                  bool
	PartitionsCreated            []string
	PartitionsDropped            []string
	PartitionsKept               []KeptPartition
	Incomplete                   bool
	Duration                     time.Duration
}

// LogAttrs implements Result.
func (r RetentionResult) LogAttrs() []any {
	a := []any{"succeeded", r.Succeeded, "failed", r.Failed, "cancelled", r.Cancelled,
		"outbox_published", r.OutboxPublished, "duration", r.Duration.Round(time.Millisecond)}
	if r.Partitioned {
		a = append(a, "partitions_created", len(r.PartitionsCreated), "partitions_dropped", len(r.PartitionsDropped),
			"partitions_kept", len(r.PartitionsKept))
	}
	if r.Incomplete {
		a = append(a, "incomplete", true)
	}
	return a
}

// Backlogged implements Backlogged: a run that stopped at MaxBatches left expired
// rows behind, and the runner starts the next one at once rather than after the
// interval, so a backlog is worked off in bounded runs back to back.
func (r RetentionResult) Backlogged() bool { return r.Incomplete }

// Name implements Service.
func (r *Retention) Name() string { return "retention" }

// Interval implements Service.
func (r *Retention) Interval() time.Duration { return r.Settings.Every }

// RunOnce implements Service. The lock's transaction only guards the run: every
// batch runs on the pool and commits on its own, so no transaction stays open across
// batches.
func (r *Retention) RunOnce(ctx context.Context, _ pgx.Tx) (Result, error) {
	return r.Run(ctx)
}

// Run is one retention run.
func (r *Retention) Run(ctx context.Context) (res RetentionResult, err error) {
	cfg := r.Settings
	start := hostclock.Now()
	defer func() {
		res.Duration = hostclock.Since(start)
		switch {
		case res.Incomplete:
			r.Log.Warn("skiplock: retention is behind: the run stopped at its batch cap with expired rows left; "+
				"the next run starts at once (raise RetentionConfig.BatchSize or MaxBatches if this repeats)",
				res.LogAttrs()...)
		case res.Succeeded+res.Failed+res.Cancelled+res.OutboxPublished > 0 ||
			len(res.PartitionsCreated)+len(res.PartitionsDropped)+len(res.PartitionsKept) > 0:
			r.Log.Info("skiplock: retention run", res.LogAttrs()...)
		}
		if r.Observe != nil {
			r.Observe(res)
		}
	}()
	layout, err := r.Store.JobsLayout(ctx, r.Pool)
	if err != nil {
		return res, fmt.Errorf("retention: reading the jobs table's layout: %w", err)
	}
	if layout == store.LayoutMissing {
		return res, fmt.Errorf("retention: %w", ErrNoJobsTable)
	}
	// In the partitioned layout, jobs normally leave with their partition. Row deletes
	// then wait one more period, so they only catch what partitions cannot drop: late
	// finishers in kept partitions, the converted legacy table and the default partition.
	var grace time.Duration
	if layout == store.LayoutPartitioned {
		res.Partitioned = true
		settings, err := r.Store.ReadPartitionSettings(ctx, r.Pool)
		if err != nil {
			return res, fmt.Errorf("retention: reading partition settings: %w", err)
		}
		if settings != nil {
			grace = PeriodLength(settings.Period)
			if err := r.maintainPartitions(ctx, *settings, &res); err != nil {
				return res, err
			}
		}
	}
	// drain runs batches until one is short; false means MaxBatches stopped it.
	batches := 0
	drain := func(batch func() (int64, error), total *int64) (bool, error) {
		for {
			n, err := batch()
			batches++
			*total += n
			if err != nil || n < int64(cfg.BatchSize) {
				return true, err
			}
			if batches >= cfg.MaxBatches {
				res.Incomplete = true
				return false, nil
			}
		}
	}
	for _, st := range store.FinishedStatuses {
		window, ok := cfg.window(st)
		if !ok {
			continue
		}
		total := map[string]*int64{store.StatusSucceeded: &res.Succeeded, store.StatusFailed: &res.Failed,
			store.StatusCancelled: &res.Cancelled}[st]
		// Each batch starts where the previous one stopped (the newest updated_at it
		// deleted), so the run walks the retention index once, not once per batch
		// over the entries of the rows it already deleted (store.DeleteFinished).
		var from time.Time
		more, err := drain(func() (int64, error) {
			n, newest, err := r.Store.DeleteFinished(ctx, r.Pool, store.NowParam(r.Clock), st, window+grace, cfg.BatchSize, from)
			if newest.After(from) {
				from = newest
			}
			return n, err
		}, total)
		if err != nil {
			return res, fmt.Errorf("retention: deleting %s jobs: %w", st, err)
		}
		if !more {
			return res, nil
		}
	}
	// Lineage rows outlive nothing they point at: they go one day after the longest
	// retention window; with any state kept forever, they are kept too. Their
	// batches have their own MaxBatches budget, so they never starve job deletes.
	if longest, ok := cfg.longest(); ok {
		for n := 0; n < cfg.MaxBatches; n++ {
			pruned, err := r.Store.PruneLineage(ctx, r.Pool, store.NowParam(r.Clock), longest+grace+24*time.Hour, cfg.BatchSize)
			res.Lineage += pruned
			if err != nil {
				return res, fmt.Errorf("retention: pruning lineage: %w", err)
			}
			if pruned < int64(cfg.BatchSize) {
				break
			}
		}
	}
	if cfg.OutboxPublished > 0 {
		_, err := drain(func() (int64, error) {
			return r.Store.OutboxPrunePublished(ctx, r.Pool, store.NowParam(r.Clock), cfg.OutboxPublished, cfg.BatchSize)
		}, &res.OutboxPublished)
		if err != nil {
			return res, fmt.Errorf("retention: deleting published outbox events: %w", err)
		}
	}
	return res, nil
}
