package skiplock

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/engine"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/store"
)

// ClaimSQLForTest exposes the claim statement so a test can EXPLAIN it.
func (c *Client) ClaimSQLForTest() string { return c.store.SQL("claim") }

// FlushRetriesForTest writes a retry outcome for each claimed job through the
// runtime's completer (flush), with errs[i] as job i's error text verbatim — bypassing
// the text policy, so a test can hand the database an outcome it refuses — and
// returns the state each job was left in (StateRunning where no outcome was written).
func (c *Client) FlushRetriesForTest(jobs []*Job, errs []string) []JobState {
	outs := make([]store.Outcome, len(jobs))
	for i, j := range jobs {
		outs[i] = store.Outcome{Lease: j.lease(), Action: store.ActionRetry, Error: errs[i]}
	}
	return c.flushForTest(jobs, outs, false)
}

// FlushForTest writes one batch through the completer: a completion for each job
// with complete[i] set, a retry with the error "boom" for the others. ambiguous says
// an earlier attempt at the batch may have committed, so the completer reads back
// the rows its write did not change (recognise). It returns the state each job was
// left in (StateRunning where the completer reported the lease lost).
func (c *Client) FlushForTest(jobs []*Job, complete []bool, ambiguous bool) []JobState {
	outs := make([]store.Outcome, len(jobs))
	for i, j := range jobs {
		outs[i] = store.Outcome{Lease: j.lease(), Action: store.ActionRetry, Error: "boom"}
		if complete[i] {
			outs[i] = store.Outcome{Lease: j.lease(), Action: store.ActionComplete}
		}
	}
	return c.flushForTest(jobs, outs, ambiguous)
}

func (c *Client) flushForTest(jobs []*Job, outs []store.Outcome, ambiguous bool) []JobState {
	rows := make([]*store.Job, len(jobs))
	adopted := make([]any, len(jobs))
	for i, j := range jobs {
		token, claimedAt := j.LeaseToken, j.claimedAt
		rows[i] = &store.Job{ID: j.ID, Kind: j.Kind, Attempts: j.Attempt, LeaseToken: &token}
		if !claimedAt.IsZero() {
			rows[i].AttemptedAt = &claimedAt
		}
		adopted[i] = j
	}
	engine.New(c.engineConfig()).FlushForTest(rows, adopted, outs, ambiguous)
	out := make([]JobState, len(jobs))
	for i, j := range jobs {
		out[i] = j.State
	}
	return out
}

// RunMaintenanceOnceForTest runs one pass of the named maintenance service
// ("reclaimer", "retention") under its advisory lock; ran is false when another
// client held the lock.
func (c *Client) RunMaintenanceOnceForTest(ctx context.Context, name string) (ran bool, err error) {
	for _, svc := range c.services() {
		if svc.Name() == name {
			ran, _, err = c.maint.RunOnce(ctx, svc)
			return ran, err
		}
	}
	return false, invalid("service", "unknown maintenance service %q", name)
}

// RunSchedulerAndDieForTest runs one scheduler pass under the service's lock in a
// transaction on a connection of its own, then closes that connection instead of
// committing — a client killed mid-fire — and returns how many jobs the pass had
// inserted before it died.
func (c *Client) RunSchedulerAndDieForTest(ctx context.Context) (fired int, err error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	defer conn.Conn().Close(ctx) // the server rolls the transaction back
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	if ok, err := c.store.TryServiceLock(ctx, tx, "scheduler"); err != nil || !ok {
		return 0, fmt.Errorf("scheduler lock: %v %v", ok, err)
	}
	res, err := c.scheduler().Run(ctx, tx)
	return res.Fired, err
}

// RunSchedulerUnlockedForTest runs one scheduler pass in a transaction of its own
// without the service's advisory lock, so that only the schedules' row locks stand
// between racing passes; it returns how many jobs it inserted.
func (c *Client) RunSchedulerUnlockedForTest(ctx context.Context) (fired, duplicates int, err error) {
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		res, err := c.scheduler().Run(ctx, tx)
		fired, duplicates = res.Fired, res.Duplicates
		return err
	})
	return fired, duplicates, err
}

// NextFireForTest returns the first fire time of spec in zone tz after t.
func NextFireForTest(spec, tz string, t time.Time) (time.Time, error) {
	s, err := maint.ParseSpec(spec, tz)
	if err != nil {
		return time.Time{}, err
	}
	return s.Next(t), nil
}

// ClaimWithPredsForTest runs the limited claim of queue (or, with successorsOnly, the
// claim of successors only) offering preds as predecessors, and returns the jobs
// with, per job, the id of the predecessor it succeeds ("" when it took a free slot).
func (c *Client) ClaimWithPredsForTest(ctx context.Context, queue string, n int, preds []*Job, successorsOnly bool) ([]*Job, []string, error) {
	p := store.ClaimParams{Queue: queue, WorkerID: c.cfg.ID, Limit: n, Lease: c.cfg.LeaseDuration}
	for _, j := range preds {
		p.Preds = append(p.Preds, j.lease())
	}
	var rows []*store.Job
	var err error
	if successorsOnly {
		rows, err = c.store.ClaimSuccessors(ctx, c.pool, store.NowParam(c.cfg.Clock), p)
	} else {
		var res store.LimitedClaim
		res, err = c.store.ClaimLimited(ctx, c.pool, store.NowParam(c.cfg.Clock), p)
		rows = res.Jobs
	}
	if err != nil {
		return nil, nil, err
	}
	jobs := fromRows(rows)
	of := make([]string, len(jobs))
	for i, r := range rows {
		if r.SlotOf != nil {
			of[i] = *r.SlotOf
		}
	}
	return jobs, of, nil
}

// SetChannelForTest makes the client announce its enqueues on channel (a name
// PostgreSQL refuses makes every NOTIFY fail).
func (c *Client) SetChannelForTest(channel string) {
	c.channel = channel
	c.coalescer.SetChannel(channel)
}

// ComponentsForTest counts the runtime's components that may each hold one pool
// connection at a time once started: the listener (unless PollOnly), each queue's
// producer and its head check, the limits watcher, the heartbeater, the completer,
// the warmer, and each maintenance service.
func (c *Client) ComponentsForTest() int {
	n := 2*len(c.cfg.Queues) + 4 + len(c.services())
	if !c.cfg.PollOnly {
		n++
	}
	return n
}
