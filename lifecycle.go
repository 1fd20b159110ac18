package skiplock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/store"
)

// This file is the low-level, fenced job lifecycle. A started Client drives it for
// you; it is public for tools, tests and callers that run their own loop.

// Claim leases up to limit due jobs of queue to this client (worker id Config.ID) for
// Config.LeaseDuration, each under a fresh lease token. Jobs come back in claim order:
// priority (high first), then run_at, then id. Two claimers never receive the same job.
func (c *Client) Claim(ctx context.Context, queue string, limit int) ([]*Job, error) {
	if err := ident.ValidateQueue(queue); err != nil {
		return nil, invalid("queue", "%v", err)
	}
	if limit < 1 {
		return nil, invalid("limit", "must be at least 1")
	}
	rows, err := c.store.Claim(ctx, c.pool, nowParam(c.cfg.Clock), store.ClaimParams{
		Queue: queue, WorkerID: c.cfg.ID, Limit: limit, Lease: c.cfg.LeaseDuration,
	})
	if err != nil {
		return nil, fmt.Errorf("claiming jobs from queue %q: %w", queue, wrapPgError(err))
	}
	return fromRows(rows), nil
}

// Heartbeat renews the leases of jobs in one statement and returns the jobs whose
// lease was lost (expired, reclaimed or cancelled). It never changes a lease token.
func (c *Client) Heartbeat(ctx context.Context, jobs ...*Job) (lost []*Job, err error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	leases := make([]store.Lease, len(jobs))
	for i, j := range jobs {
		leases[i] = j.lease()
	}
	renewed, err := c.store.Heartbeat(ctx, c.pool, nowParam(c.cfg.Clock), leases, c.cfg.LeaseDuration)
	if err != nil {
		return nil, fmt.Errorf("renewing %d lease(s): %w", len(jobs), wrapPgError(err))
	}
	for _, j := range jobs {
		if !renewed[j.ID] {
			lost = append(lost, j)
		}
	}
	return lost, nil
}

// Complete marks a running job succeeded. ErrLeaseLost means nothing was written.
func (c *Client) Complete(ctx context.Context, job *Job) error {
	_, err := c.finishOne(ctx, store.Outcome{Lease: job.lease(), Action: store.ActionComplete})
	return err
}

// Retry records cause and makes the job pending again after delay, or failed when
// its attempts are exhausted. A negative delay uses the kind's retry policy. It
// returns the state the job is now in.
func (c *Client) Retry(ctx context.Context, job *Job, cause error, delay time.Duration) (JobState, error) {
	if delay < 0 {
		delay = c.retryPolicy(job.Kind).Delay(job.Attempt)
	}
	return c.finishOne(ctx, store.Outcome{Lease: job.lease(), Action: store.ActionRetry, Delay: delay, Error: errText(cause)})
}

// Fail marks a running job failed now, whatever attempts remain.
func (c *Client) Fail(ctx context.Context, job *Job, cause error) error {
	_, err := c.finishOne(ctx, store.Outcome{Lease: job.lease(), Action: store.ActionFail, Error: errText(cause)})
	return err
}

// Snooze makes a running job pending again at now+d and gives back the attempt its
// claim counted.
func (c *Client) Snooze(ctx context.Context, job *Job, d time.Duration) error {
	_, err := c.finishOne(ctx, store.Outcome{Lease: job.lease(), Action: store.ActionSnooze, Delay: d})
	return err
}

// Cancel moves a running job this worker holds to 'cancelled'.
func (c *Client) Cancel(ctx context.Context, job *Job, cause error) error {
	_, err := c.finishOne(ctx, store.Outcome{Lease: job.lease(), Action: store.ActionCancel, Error: errText(cause)})
	return err
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (c *Client) finishOne(ctx context.Context, o store.Outcome) (JobState, error) {
	res, err := c.finish(ctx, []store.Outcome{o})
	if err != nil {
		return "", fmt.Errorf("finishing job %s (%s): %w", o.ID, o.Action, wrapPgError(err))
	}
	st, ok := res[o.ID]
	if !ok {
		c.metrics.leaseLost.Add(1)
		return "", fmt.Errorf("finishing job %s (%s): %w", o.ID, o.Action, ErrLeaseLost)
	}
	c.count(o.Action, st)
	return JobState(st), nil
}

// finish writes outcomes with the statement the configuration asks for.
func (c *Client) finish(ctx context.Context, outs []store.Outcome) (map[string]string, error) {
	if c.cfg.DeleteOnSuccess {
		return c.store.FinishDeleting(ctx, c.pool, nowParam(c.cfg.Clock), outs)
	}
	return c.store.Finish(ctx, c.pool, nowParam(c.cfg.Clock), outs)
}

func (c *Client) count(a store.Action, status string) {
	switch {
	case status == store.StatusSucceeded:
		c.metrics.succeeded.Add(1)
	case status == store.StatusFailed:
		c.metrics.failed.Add(1)
	case status == store.StatusCancelled:
		c.metrics.cancelled.Add(1)
	case a == store.ActionSnooze:
		c.metrics.snoozed.Add(1)
	default:
		c.metrics.retried.Add(1)
	}
}

// ReclaimResult reports one reclaimer pass.
type ReclaimResult struct {
	Requeued int // back to pending after the retry delay
	Failed   int // attempts exhausted
}

// Reclaim returns every job whose lease has expired to the queue after its kind's
// retry delay (so a job that crashes its worker backs off like any failure), or fails
// it when its attempts are exhausted. Safe to run from several processes: each
// update is fenced by the lease token and by the lease still being expired.
func (c *Client) Reclaim(ctx context.Context) (ReclaimResult, error) {
	return c.reclaim(ctx, c.pool)
}

func (c *Client) reclaim(ctx context.Context, db DB) (ReclaimResult, error) {
	const batch = 1000
	var res ReclaimResult
	for {
		now := nowParam(c.cfg.Clock)
		expired, err := c.store.ListExpired(ctx, db, now, batch)
		if err != nil {
			return res, fmt.Errorf("listing expired leases: %w", wrapPgError(err))
		}
		if len(expired) == 0 {
			return res, nil
		}
		leases := make([]store.Lease, len(expired))
		delays := make([]time.Duration, len(expired))
		for i, e := range expired {
			leases[i] = e.Lease
			delays[i] = c.retryPolicy(e.Kind).Delay(e.Attempts)
		}
		changed, err := c.store.Reclaim(ctx, db, now, leases, delays)
		if err != nil {
			return res, fmt.Errorf("reclaiming %d expired lease(s): %w", len(leases), wrapPgError(err))
		}
		for _, st := range changed {
			if st == store.StatusFailed {
				res.Failed++
			} else {
				res.Requeued++
			}
		}
		c.metrics.reclaimed.Add(int64(len(changed)))
		if len(expired) < batch {
			return res, nil
		}
	}
}

// JobGet returns one job. ErrNotFound if no job has that id.
func (c *Client) JobGet(ctx context.Context, id string) (*Job, error) {
	return c.adminRow(c.store.Get(ctx, c.pool, id))("getting job " + id)
}

// ListParams filter and page JobList. Zero values match everything.
type ListParams struct {
	States []JobState
	Queue  string
	Kind   string
	// AfterID continues a listing after the last id of the previous page.
	AfterID string
	// Limit is the page size. Default 100, at most 10,000.
	Limit int
}

// JobList lists jobs oldest first, filtered by state, queue and kind, paged by id.
func (c *Client) JobList(ctx context.Context, p ListParams) ([]*Job, error) {
	if p.Limit == 0 {
		p.Limit = 100
	}
	if p.Limit < 0 || p.Limit > 10000 {
		return nil, invalid("limit", "must be 1..10000")
	}
	sp := store.ListParams{Queue: p.Queue, Kind: p.Kind, AfterID: p.AfterID, Limit: p.Limit}
	for _, s := range p.States {
		sp.Statuses = append(sp.Statuses, string(s))
	}
	rows, err := c.store.List(ctx, c.pool, sp)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", wrapPgError(err))
	}
	return fromRows(rows), nil
}

// JobRetry makes a failed or cancelled job pending and due now, granting at least one
// more attempt. ErrNotFound if the job is not failed or cancelled.
func (c *Client) JobRetry(ctx context.Context, id string) (*Job, error) {
	return c.adminRow(c.store.AdminRetry(ctx, c.pool, nowParam(c.cfg.Clock), id))("retrying job " + id)
}

// JobCancel cancels a pending or running job. A running job's worker loses its lease
// at its next heartbeat: its context is cancelled and its outcome is not written.
func (c *Client) JobCancel(ctx context.Context, id, reason string) (*Job, error) {
	return c.adminRow(c.store.AdminCancel(ctx, c.pool, nowParam(c.cfg.Clock), id, reason))("cancelling job " + id)
}

// JobDelete deletes a job that is not running.
func (c *Client) JobDelete(ctx context.Context, id string) (*Job, error) {
	return c.adminRow(c.store.AdminDelete(ctx, c.pool, id))("deleting job " + id)
}

func (c *Client) adminRow(row *store.Job, err error) func(what string) (*Job, error) {
	return func(what string) (*Job, error) {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		var pgErr interface{ SQLState() string }
		if errors.As(err, &pgErr) && pgErr.SQLState() == "22P02" {
			return nil, fmt.Errorf("%s: %w", what, invalid("id", "not a UUID"))
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, wrapPgError(err))
		}
		return fromRow(row), nil
	}
}
