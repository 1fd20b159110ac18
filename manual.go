package skiplock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/safetext"
	"github.com/skiplock/skiplock/internal/store"
)

// Manual is the low-level, fenced job lifecycle, for tools, tests and callers that
// run their own loop instead of starting the Client: claim due jobs under a lease,
// renew it, and finish each job with one statement conditional on its lease token.
// A started Client does all of this for you (and handler code never needs it: a
// handler returns nil, an error, Snooze, Cancel or Permanent). Every finishing
// method returns ErrLeaseLost when its write changed nothing: the lease expired and
// the job was taken over, or an operator cancelled it; write nothing more for it.
//
//	m := client.Manual()
//	jobs, err := m.Claim(ctx, "default", 10)
//	for _, job := range jobs {
//		// … work outside any transaction; m.Heartbeat(ctx, job) extends the lease …
//		if err := m.Complete(ctx, job); errors.Is(err, skiplock.ErrLeaseLost) {
//			// taken over: write nothing more for this job
//		}
//	}
type Manual struct{ c *Client }

// Manual returns the client's low-level lifecycle API (see Manual).
func (c *Client) Manual() *Manual { return &Manual{c: c} }

// Claim leases up to limit due jobs of queue to this client (worker id Config.ID) for
// Config.LeaseDuration, each under a fresh lease token. A context made with
// ContextWithJob for one of them carries the client too (ClientFromContext). Jobs come back in claim order:
// priority (high first), then run_at, then id. Two claimers never receive the same job.
// Limits apply (LimitSet): Claim leaves pending the jobs they hold back. From a fair
// queue (QueueSetFair) Claim takes the jobs of the queue's keys in turn, from the
// queue's one rotation, and returns them in that order.
func (m *Manual) Claim(ctx context.Context, queue string, limit int) ([]*Job, error) {
	c := m.c
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if err := ident.ValidateQueue(queue); err != nil {
		return nil, invalid("queue", "%v", err)
	}
	if limit < 1 {
		return nil, invalid("limit", "must be at least 1")
	}
	qs, anyKind, err := c.store.LimitScopes(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("claiming jobs from queue %q: reading limits: %w", queue, wrapPgError(err))
	}
	fair, err := c.store.FairQueues(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("claiming jobs from queue %q: reading fair queues: %w", queue, wrapPgError(err))
	}
	p := store.ClaimParams{Queue: queue, WorkerID: c.cfg.ID, Limit: limit, Lease: c.cfg.LeaseDuration}
	var rows []*store.Job
	limited := anyKind || slices.Contains(qs, queue)
	switch {
	case slices.ContainsFunc(fair, func(f store.FairQueue) bool { return f.Name == queue }):
		var res store.FairClaim
		res, err = c.store.ClaimFair(ctx, c.pool, store.NowParam(c.cfg.Clock), p, limited)
		rows = res.Jobs
	case limited:
		var res store.LimitedClaim
		res, err = c.store.ClaimLimited(ctx, c.pool, store.NowParam(c.cfg.Clock), p)
		rows = res.Jobs
	default:
		rows, err = c.store.Claim(ctx, c.pool, store.NowParam(c.cfg.Clock), p)
	}
	if err != nil {
		return nil, fmt.Errorf("claiming jobs from queue %q: %w", queue, wrapPgError(err))
	}
	jobs := make([]*Job, len(rows))
	for i, r := range rows {
		jobs[i] = c.claimed(r)
	}
	return jobs, nil
}

// Heartbeat renews the leases of jobs in one statement and returns the jobs whose
// lease was lost (expired, reclaimed or cancelled). It never changes a lease token. A
// job another transaction has locked (its completion being written, a CompleteTx
// transaction still open) is skipped, not waited for: it is neither renewed nor lost.
func (m *Manual) Heartbeat(ctx context.Context, jobs ...*Job) (lost []*Job, err error) {
	c := m.c
	if len(jobs) == 0 {
		return nil, nil
	}
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	leases := make([]store.Lease, len(jobs))
	for i, j := range jobs {
		if j == nil {
			return nil, invalid("jobs", "job %d is nil", i)
		}
		leases[i] = j.lease()
	}
	renewed, err := c.store.Heartbeat(ctx, c.pool, store.NowParam(c.cfg.Clock), leases, c.cfg.LeaseDuration)
	if err != nil {
		return nil, fmt.Errorf("renewing %d lease(s): %w", len(jobs), wrapPgError(err))
	}
	for _, j := range jobs {
		if _, held := renewed[j.ID]; !held {
			lost = append(lost, j)
		}
	}
	return lost, nil
}

// Complete marks a running job succeeded. ErrLeaseLost means nothing was written.
func (m *Manual) Complete(ctx context.Context, job *Job) error {
	c := m.c
	_, err := c.finishOne(ctx, job, store.Outcome{Action: store.ActionComplete})
	return err
}

// Retry records cause and makes the job pending again after delay, or failed when
// its attempts are exhausted. A negative delay uses the kind's retry policy. It
// returns the state the job is now in.
func (m *Manual) Retry(ctx context.Context, job *Job, cause error, delay time.Duration) (JobState, error) {
	c := m.c
	if delay < 0 {
		delay = c.retryPolicy(job.Kind).Delay(job.Attempt)
	}
	return c.finishOne(ctx, job, store.Outcome{Action: store.ActionRetry, Delay: delay, Error: safetext.Error(cause)})
}

// Fail marks a running job failed now, whatever attempts remain.
func (m *Manual) Fail(ctx context.Context, job *Job, cause error) error {
	c := m.c
	_, err := c.finishOne(ctx, job, store.Outcome{Action: store.ActionFail, Error: safetext.Error(cause)})
	return err
}

// Snooze makes a running job pending again at now+d and gives back the attempt its
// claim counted.
func (m *Manual) Snooze(ctx context.Context, job *Job, d time.Duration) error {
	c := m.c
	_, err := c.finishOne(ctx, job, store.Outcome{Action: store.ActionSnooze, Delay: d})
	return err
}

// Cancel moves a running job this worker holds to 'cancelled'.
func (m *Manual) Cancel(ctx context.Context, job *Job, cause error) error {
	c := m.c
	_, err := c.finishOne(ctx, job, store.Outcome{Action: store.ActionCancel, Error: safetext.Error(cause)})
	return err
}

// Reclaim returns every job whose lease has expired to the queue after its kind's
// retry delay (so a job that crashes its worker backs off like any failure), or fails
// it when its attempts are exhausted. Safe to run from several processes: each
// update is fenced by the lease token and by the lease still being expired.
func (m *Manual) Reclaim(ctx context.Context) (ReclaimResult, error) {
	c := m.c
	if ctx == nil {
		return ReclaimResult{}, invalid("ctx", "must not be nil")
	}
	res, err := c.reclaimer().Reclaim(ctx, c.pool)
	return ReclaimResult(res), wrapPgError(err)
}

func (c *Client) finishOne(ctx context.Context, job *Job, o store.Outcome) (JobState, error) {
	if ctx == nil {
		return "", invalid("ctx", "must not be nil")
	}
	if job == nil {
		return "", invalid("job", "must not be nil")
	}
	o.Lease, o.Delay = job.lease(), clampDelay(o.Delay)
	if o.Action == store.ActionComplete {
		o.Output = job.output
	}
	res, err := c.writeOutcomes(ctx, c.pool, []store.Outcome{o})
	if err != nil {
		return "", fmt.Errorf("finishing job %s (%s): %w", o.ID, o.Action, wrapPgError(err))
	}
	st, ok := res[o.Lease]
	if !ok {
		c.metrics.leaseLost.Add(1)
		return "", fmt.Errorf("finishing job %s (%s): %w", o.ID, o.Action, ErrLeaseLost)
	}
	c.count(o.Action, st)
	return JobState(st), nil
}
