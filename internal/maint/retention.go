package maint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
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

	// The floors: where the next run's first batch of each finished state starts in
	// jobs_retention_idx. Within a run each batch starts where the previous one
	// stopped; across runs, the entries of the rows earlier runs deleted stay in the
	// index until vacuum removes them, and while a snapshot held open elsewhere stops
	// vacuum (W14's disturbed run) each is also a heap visit, since the row is not yet
	// dead to everyone. A run starting from the oldest entry would walk all of them,
	// every interval, for as long as the snapshot is held. So a run leaves each
	// state's floor at the newest updated_at it deleted less retentionFloorMargin,
	// and the next run starts there.
	//
	// As the reclaimer's floor, it is a starting point, never a promise: a job whose
	// completion committed long after its updated_at (CompleteTx in a long caller
	// transaction, another client's clock running behind) can land below it. Every
	// retentionFullEvery-th run, and the first of each Retention, start from the
	// oldest entry, so such a job waits at most that many intervals longer.
	mu     sync.Mutex
	floors map[string]time.Time
	runs   int // runs since the last one from the oldest entry
}

// retentionFloorMargin is how far below the newest updated_at a run deleted the
// next run starts: a completion commits within moments of the updated_at it writes.
const retentionFloorMargin = 5 * time.Second

// retentionFullEvery paces the runs that start from the oldest entry (every tenth:
// 10 minutes at the default 1 m interval).
const retentionFullEvery = 10

// startFloors returns the floors this run starts from (nil: from the oldest entry
// for every state).
func (r *Retention) startFloors() map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs++
	if r.floors == nil || r.runs > retentionFullEvery {
		r.runs = 1
		return nil
	}
	return maps.Clone(r.floors)
}

// reached records the newest updated_at a run deleted in a state (zero: it deleted
// none, and the floor stays): the next run of that state starts a margin below it.
func (r *Retention) reached(status string, newest time.Time) {
	if newest.IsZero() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.floors == nil {
		r.floors = map[string]time.Time{}
	}
	r.floors[status] = newest.Add(-retentionFloorMargin)
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
		if res.Succeeded+res.Failed+res.Cancelled+res.OutboxPublished > 0 ||
			len(res.PartitionsCreated)+len(res.PartitionsDropped)+len(res.PartitionsKept) > 0 {
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
	floors := r.startFloors()
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
		// over the entries of the rows it already deleted (store.DeleteFinished); the
		// first starts at the state's floor.
		from := floors[st]
		var newest time.Time
		more, err := drain(func() (int64, error) {
			n, last, err := r.Store.DeleteFinished(ctx, r.Pool, store.NowParam(r.Clock), st, window+grace, cfg.BatchSize, from)
			if last.After(from) {
				from = last
			}
			if last.After(newest) {
				newest = last
			}
			return n, err
		}, total)
		r.reached(st, newest)
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
