package skiplock

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/validate"
)

// This file holds the job record an operator reads (the dashboard, the CLI): tags,
// the handler's output, the history of attempts and the writing transaction.

// Limits of the job record.
const (
	MaxTags        = 16
	MaxTagLen      = 64
	MaxOutputBytes = 64 << 10
	// MaxHistory is how many attempts Job.History keeps (the newest).
	MaxHistory = store.MaxHistory
)

// AttemptRecord is one finished attempt of a job.
type AttemptRecord struct {
	Attempt int `json:"attempt"`
	// StartedAt is when the attempt's claim started it; FinishedAt when its outcome
	// was written (or its lease was found expired).
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	WorkerID   string    `json:"worker_id,omitempty"`
	// Outcome is "succeeded", "retried", "failed", "cancelled", "snoozed" or
	// "lease_expired".
	Outcome string `json:"outcome"`
	// Error is the attempt's error text, if any.
	Error string `json:"error,omitempty"`
}

// SetOutput records v, encoded as JSON, as the job's output: it is stored with the
// job when the job succeeds (a later SetOutput replaces an earlier one) and shown by
// the dashboard and `skiplock jobs show`. At most MaxOutputBytes. Call it from the
// job's handler.
func (j *Job) SetOutput(v any) error {
	if j == nil {
		return invalid("job", "must not be nil")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return invalid("output", "encoding %T as JSON: %v", v, err)
	}
	if err := ValidatePayload(b, MaxOutputBytes); err != nil {
		return invalid("output", "%v", err)
	}
	j.output = b
	return nil
}

// validateTags checks the tags of an enqueue.
func validateTags(tags []string) ([]string, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	if len(tags) > MaxTags {
		return nil, invalid("tags", "%d tags exceed the limit of %d", len(tags), MaxTags)
	}
	for _, t := range tags {
		if reason := validate.Name(t, MaxTagLen, false); reason != "" {
			return nil, invalid("tags", "tag %q: %s", t, reason)
		}
	}
	return append([]string(nil), tags...), nil
}

// history decodes a job row's attempt history.
func history(raw []byte) []AttemptRecord {
	if len(raw) == 0 {
		return nil
	}
	var h []AttemptRecord
	_ = json.Unmarshal(raw, &h) // written by the store's statements
	return h
}

// JobRunNow makes a pending job due now (it keeps its place among equal priorities
// by run_at). ErrNotFound if no job has that id; ErrJobState if it is not pending.
func (c *Client) JobRunNow(ctx context.Context, id string) (*Job, error) {
	if err := checkAdmin(ctx, id); err != nil {
		return nil, err
	}
	return c.adminRow(ctx, id, "running now", "only pending jobs can be run now")(c.store.AdminRunNow(ctx, c.pool, store.NowParam(c.cfg.Clock), id))
}

// JobsByTx returns every job the transaction txid wrote (Job.TxID), oldest first:
// with outbox's Admin.EventsByTx, everything one business transaction wrote.
func (c *Client) JobsByTx(ctx context.Context, txid int64) ([]*Job, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if txid <= 0 {
		return nil, invalid("txid", "%d is not a transaction id", txid)
	}
	rows, err := c.store.JobsByTx(ctx, c.pool, txid)
	if err != nil {
		return nil, fmt.Errorf("listing the jobs of transaction %d: %w", txid, wrapPgError(err))
	}
	return fromRows(rows), nil
}

// ThroughputPoint counts a queue's jobs that finished in one bucket of time.
type ThroughputPoint struct {
	Queue string    `json:"queue"`
	Start time.Time `json:"start"`
	// Succeeded, Failed and Cancelled count the jobs that reached each state in the
	// bucket (jobs deleted since — retention, DeleteOnSuccess — are not counted).
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Cancelled int64 `json:"cancelled"`
}

// Throughput counts the jobs of every process that finished within the last window,
// per queue and bucket (buckets aligned to the Unix epoch), from the database. Only
// buckets with finished jobs are returned, by queue then time. bucket is at least 1s
// and window at most 7 days.
func (c *Client) Throughput(ctx context.Context, window, bucket time.Duration) ([]ThroughputPoint, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if bucket < time.Second || window < bucket || window > 7*24*time.Hour {
		return nil, invalid("window", "want 1s ≤ bucket (%s) ≤ window (%s) ≤ 7 days", bucket, window)
	}
	counts, err := c.store.Throughput(ctx, c.pool, store.NowParam(c.cfg.Clock), window, bucket)
	if err != nil {
		return nil, fmt.Errorf("counting throughput: %w", wrapPgError(err))
	}
	type key struct {
		q string
		t int64
	}
	byKey := map[key]int{} // index into out
	var out []ThroughputPoint
	for _, n := range counts {
		k := key{n.Queue, n.Start.UnixNano()}
		i, ok := byKey[k]
		if !ok {
			i = len(out)
			out = append(out, ThroughputPoint{Queue: n.Queue, Start: n.Start})
			byKey[k] = i
		}
		p := &out[i]
		switch n.Status {
		case store.StatusSucceeded:
			p.Succeeded = n.Count
		case store.StatusFailed:
			p.Failed = n.Count
		case store.StatusCancelled:
			p.Cancelled = n.Count
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Queue != out[j].Queue {
			return out[i].Queue < out[j].Queue
		}
		return out[i].Start.Before(out[j].Start)
	})
	return out, nil
}
