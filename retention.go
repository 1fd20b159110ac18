package skiplock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/maint"
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
	// several runs rather than in one long one. A run that stops at the cap with
	// expired jobs left is behind: it counts in ProcessCounters.RetentionBehind
	// (RetentionResult.Incomplete), and the service logs a warning and starts the
	// next run at once instead of after Interval. Default 1000.
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

// RetentionResult reports what one retention run removed.
type RetentionResult struct {
	// Succeeded, Failed and Cancelled count the jobs deleted row by row.
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Cancelled int64 `json:"cancelled"`
	// OutboxPublished counts deleted outbox events (RetentionConfig.OutboxPublished).
	OutboxPublished int64 `json:"outbox_published"`
	// Partitioned is true when jobs is partitioned; the fields below apply then.
	Partitioned bool `json:"partitioned"`
	// PartitionsCreated names the partitions created ahead.
	PartitionsCreated []string `json:"partitions_created,omitempty"`
	// PartitionsDropped names the partitions dropped whole.
	PartitionsDropped []string `json:"partitions_dropped,omitempty"`
	// PartitionsKept are expired partitions that could not be dropped, and why.
	PartitionsKept []KeptPartition `json:"partitions_kept,omitempty"`
	// Incomplete is true when the run stopped at MaxBatches with rows left to delete:
	// retention is behind (run it again; the service does so at once).
	Incomplete bool `json:"incomplete"`
	// Duration is the run's wall time (nanoseconds in JSON).
	Duration time.Duration `json:"duration_ns"`
}

// Deleted returns the total of jobs deleted row by row.
func (r RetentionResult) Deleted() int64 { return r.Succeeded + r.Failed + r.Cancelled }

// KeptPartition is a partition past the retention window that still holds jobs that
// must not be lost (pending or leased — for example a job scheduled far ahead, or a
// late retry) or finished jobs younger than their state's window. It is dropped by a
// later run once they are gone; meanwhile its finished jobs are deleted row by row.
type KeptPartition struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"`
	Leased  int64  `json:"leased"` // claimed or running
	Reason  string `json:"reason"`
}

// ErrMaintenanceLocked is returned by RunRetention when another client is running
// the same maintenance service at that moment; nothing was done.
var ErrMaintenanceLocked = errors.New("skiplock: another client is running this maintenance service")

// RunRetention runs one retention pass now, under the same advisory lock as the
// background service (ErrMaintenanceLocked if another client holds it), and returns
// what it removed. It works on a client that was never started, so a cron job or the
// CLI can run retention without working any queue.
func (c *Client) RunRetention(ctx context.Context) (RetentionResult, error) {
	if ctx == nil {
		return RetentionResult{}, invalid("ctx", "must not be nil")
	}
	ran, res, err := c.maint.RunOnce(ctx, c.retention())
	if err != nil {
		if errors.Is(err, maint.ErrNoJobsTable) {
			return RetentionResult{}, fmt.Errorf("%w: %v", ErrNotMigrated, err)
		}
		return RetentionResult{}, wrapPgError(err)
	}
	if !ran {
		return RetentionResult{}, ErrMaintenanceLocked
	}
	return retentionResult(res.(maint.RetentionResult)), nil
}

// retentionResult is the public form of a retention run's result.
func retentionResult(r maint.RetentionResult) RetentionResult {
	out := RetentionResult{Succeeded: r.Succeeded, Failed: r.Failed, Cancelled: r.Cancelled,
		OutboxPublished: r.OutboxPublished, Partitioned: r.Partitioned, PartitionsCreated: r.PartitionsCreated,
		PartitionsDropped: r.PartitionsDropped, Incomplete: r.Incomplete, Duration: r.Duration}
	for _, k := range r.PartitionsKept {
		out.PartitionsKept = append(out.PartitionsKept, KeptPartition(k))
	}
	return out
}
