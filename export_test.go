package skiplock

import (
	"context"

	"github.com/skiplock/skiplock/internal/store"
)

// ClaimSQLForTest exposes the claim statement so a test can EXPLAIN it.
func (c *Client) ClaimSQLForTest() string { return c.store.SQL("claim") }

// FlushRetriesForTest writes a retry outcome for each claimed job through the
// runtime's completer (flush), with errs[i] as job i's error text verbatim — bypassing
// the text policy, so a test can hand the database an outcome it refuses — and
// returns the state each job was left in (StateRunning where no outcome was written).
func (c *Client) FlushRetriesForTest(jobs []*Job, errs []string) []JobState {
	r := &runtime{c: c, inflight: map[string]*inflight{}}
	r.bgCtx, r.stopBg = context.WithCancel(context.Background())
	defer r.stopBg()
	p := &producer{slot: make(chan struct{}, 1)}
	batch := make([]*inflight, len(jobs))
	for i, j := range jobs {
		batch[i] = &inflight{job: j, p: p, outcome: store.Outcome{Lease: j.lease(), Action: store.ActionRetry, Error: errs[i]}}
		r.inflight[j.ID] = batch[i]
		r.jobsWG.Add(1)
	}
	r.flush(batch)
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
