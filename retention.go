package skiplock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// DefaultRetention is how long finished jobs are kept by default, per state.
const DefaultRetention = 7 * 24 * time.Hour

// RetentionConfig configures the retention service: a maintenance service (one client
// at a time, under an advisory lock) that deletes finished jobs in small batches and,
// when jobs is partitioned, creates partitions ahead and drops expired ones.
//
// The zero value keeps succeeded, failed and cancelled jobs 7 days and deletes them in
// batches of 1,000 every minute.
type RetentionConfig struct {
	// Interval between runs, jittered by ±10%. Default 1m; negative disables the
	// service (Client.RunRetention still works).
	Interval time.Duration
	// Succeeded, Failed and Cancelled are how long a job is kept after it reached that
	// state (measured from updated_at, by Config.Clock). Default 7 days each; negative
	// keeps that state forever.
	Succeeded, Failed, Cancelled time.Duration
	// BatchSize caps the rows one DELETE statement removes; each batch commits on its
	// own. Default 1000.
	BatchSize int
	// MaxBatches caps the batches of one run, so a large backlog is worked off over
	// several runs rather than in one long one. Default 1000.
	MaxBatches int
	// OutboxPublished, when positive, also deletes outbox events published longer ago
	// than this (the outbox package's statement; same as outbox.Admin.Prune). Default
	// 0: outbox retention is left to outbox.Admin.Prune, which the relay's deployment
	// runs with the relay role's DELETE privilege on the outbox.
	OutboxPublished time.Duration
	// PartitionLockTimeout bounds the wait for the brief ACCESS EXCLUSIVE lock on jobs
	// that creating or dropping a partition takes; on timeout the run skips the step
	// and the next run tries again. Default 2s.
	PartitionLockTimeout time.Duration
}

func (r RetentionConfig) withDefaults() RetentionConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&r.Interval, time.Minute)
	def(&r.Succeeded, DefaultRetention)
	def(&r.Failed, DefaultRetention)
	def(&r.Cancelled, DefaultRetention)
	def(&r.PartitionLockTimeout, 2*time.Second)
	if r.BatchSize <= 0 {
		r.BatchSize = 1000
	}
	if r.MaxBatches <= 0 {
		r.MaxBatches = 1000
	}
	return r
}

// window returns the retention of a finished state; ok is false for "keep forever".
func (r RetentionConfig) window(status string) (d time.Duration, ok bool) {
	switch status {
	case store.StatusSucceeded:
		d = r.Succeeded
	case store.StatusFailed:
		d = r.Failed
	case store.StatusCancelled:
		d = r.Cancelled
	}
	return d, d > 0
}

// RetentionResult reports what one retention run removed.
type RetentionResult struct {
	// Succeeded, Failed and Cancelled count the jobs deleted row by row.
	Succeeded, Failed, Cancelled int64
	// OutboxPublished counts deleted outbox events (RetentionConfig.OutboxPublished).
	OutboxPublished int64
	// Partitioned is true when jobs is partitioned; the fields below apply then.
	Partitioned bool
	// PartitionsCreated names the partitions created ahead.
	PartitionsCreated []string
	// PartitionsDropped names the partitions dropped whole.
	PartitionsDropped []string
	// PartitionsKept are expired partitions that could not be dropped, and why.
	PartitionsKept []KeptPartition
	// Incomplete is true when the run stopped at MaxBatches with rows left to delete.
	Incomplete bool
	// Duration is the run's wall time.
	Duration time.Duration
}

// Deleted returns the total of jobs deleted row by row.
func (r RetentionResult) Deleted() int64 { return r.Succeeded + r.Failed + r.Cancelled }

// KeptPartition is a partition past the retention window that still holds jobs that
// must not be lost (pending or running — for example a job scheduled far ahead, or a
// late retry) or finished jobs younger than their state's window. It is dropped by a
// later run once they are gone; meanwhile its finished jobs are deleted row by row.
type KeptPartition struct {
	Name             string
	Pending, Running int64
	Reason           string
}

// ErrMaintenanceLocked is returned by RunRetention when another client is running
// the same maintenance service at that moment; nothing was done.
var ErrMaintenanceLocked = errors.New("skiplock: another client is running this maintenance service")

func (c *Client) retentionService() maintenanceService {
	return maintenanceService{name: "retention", interval: c.cfg.Retention.Interval,
		run: func(ctx context.Context, _ pgx.Tx) ([]any, error) {
			res, err := c.retain(ctx)
			return res.attrs(), err
		}}
}

// retentionServices returns the maintenance services that delete finished jobs and
// manage partitions.
func (c *Client) retentionServices() []maintenanceService {
	if c.cfg.Retention.Interval < 0 {
		return nil
	}
	return []maintenanceService{c.retentionService()}
}

func (r RetentionResult) attrs() []any {
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

// RunRetention runs one retention pass now, under the same advisory lock as the
// background service (ErrMaintenanceLocked if another client holds it), and returns
// what it removed. It works on a client that was never started, so a cron job or the
// CLI can run retention without working any queue.
func (c *Client) RunRetention(ctx context.Context) (RetentionResult, error) {
	var res RetentionResult
	svc := c.retentionService()
	svc.run = func(ctx context.Context, _ pgx.Tx) ([]any, error) {
		var err error
		res, err = c.retain(ctx)
		return nil, err
	}
	ran, _, err := c.runService(ctx, svc)
	if err != nil {
		return res, err
	}
	if !ran {
		return res, ErrMaintenanceLocked
	}
	return res, nil
}

// retain is one retention run. The advisory lock's transaction only guards the run:
// every batch runs on the pool and commits on its own, so no transaction stays open
// across batches.
func (c *Client) retain(ctx context.Context) (res RetentionResult, err error) {
	cfg := c.cfg.Retention
	start := hostclock.Now()
	defer func() {
		res.Duration = hostclock.Since(start)
		if res.Deleted()+res.OutboxPublished > 0 || len(res.PartitionsCreated)+len(res.PartitionsDropped)+len(res.PartitionsKept) > 0 {
			c.log.Info("skiplock: retention run", res.attrs()...)
		}
	}()
	layout, err := c.store.JobsLayout(ctx, c.pool)
	if err != nil {
		return res, fmt.Errorf("retention: reading the jobs table's layout: %w", wrapPgError(err))
	}
	if layout == store.LayoutMissing {
		return res, fmt.Errorf("retention: %w", ErrNotMigrated)
	}
	// In the partitioned layout, jobs normally leave with their partition. Row deletes
	// then wait one more period, so they only catch what partitions cannot drop: late
	// finishers in kept partitions, the converted legacy table and the default partition.
	var grace time.Duration
	if layout == store.LayoutPartitioned {
		res.Partitioned = true
		settings, err := c.store.ReadPartitionSettings(ctx, c.pool)
		if err != nil {
			return res, fmt.Errorf("retention: reading partition settings: %w", wrapPgError(err))
		}
		if settings != nil {
			grace = PartitionPeriod(settings.Period).length()
			if err := c.maintainPartitions(ctx, *settings, &res); err != nil {
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
		more, err := drain(func() (int64, error) {
			return c.store.DeleteFinished(ctx, c.pool, store.NowParam(c.cfg.Clock), st, window+grace, cfg.BatchSize)
		}, total)
		if err != nil {
			return res, fmt.Errorf("retention: deleting %s jobs: %w", st, wrapPgError(err))
		}
		if !more {
			return res, nil
		}
	}
	if cfg.OutboxPublished > 0 {
		_, err := drain(func() (int64, error) {
			return c.store.OutboxPrunePublished(ctx, c.pool, store.NowParam(c.cfg.Clock), cfg.OutboxPublished, cfg.BatchSize)
		}, &res.OutboxPublished)
		if err != nil {
			return res, fmt.Errorf("retention: deleting published outbox events: %w", wrapPgError(err))
		}
	}
	return res, nil
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
