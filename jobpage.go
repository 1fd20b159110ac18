package skiplock

import (
	"context"
	"fmt"
	"slices"
)

// PageParams filter and page JobPage: a listing for people, whose cost does not grow
// with the table.
type PageParams struct {
	// ListParams are the filters (AfterID continues after a job in the listing's
	// order; Limit is the page size, default 50, at most 1,000).
	ListParams
	// NewestFirst lists the newest jobs first (by id, which is creation time).
	NewestFirst bool
	// BeforeID goes back: the page that ends just before this job in the listing's
	// order. It excludes AfterID.
	BeforeID string
	// ScanBudget is how many jobs, of those the state and tag filters leave, one page
	// examines at most for the other filters (queue, kind, text, metadata). Default
	// 10,000, at most 1,000,000. When it runs out first the page is JobPage.Bounded.
	ScanBudget int
}

// DefaultScanBudget is PageParams.ScanBudget's default.
const DefaultScanBudget = 10_000

// JobPage is one page of a bounded listing.
type JobPage struct {
	Jobs []*Job
	// Next continues the listing after this page (PageParams.AfterID); "" at its end.
	Next string
	// Prev is the cursor of the page before (PageParams.BeforeID); "" on the first
	// page.
	Prev string
	// Bounded reports that the scan budget ran out before the page filled: jobs past
	// the ones examined were not looked at, and Next (or, going back, Prev)
	// continues from where the scan stopped.
	Bounded bool
}

// JobPage lists one page of jobs. Unlike JobList, which reads until it has a page (on a
// large table with a filter that matches nothing, all of it), it examines at most
// PageParams.ScanBudget jobs, and says when it stopped early.
func (c *Client) JobPage(ctx context.Context, p PageParams) (*JobPage, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if p.Limit == 0 {
		p.Limit = 50
	}
	if p.Limit < 0 || p.Limit > 1000 {
		return nil, invalid("limit", "must be 1..1000")
	}
	if p.ScanBudget == 0 {
		p.ScanBudget = DefaultScanBudget
	}
	if p.ScanBudget < 0 || p.ScanBudget > 1_000_000 {
		return nil, invalid("scan_budget", "must be 1..1000000")
	}
	for name, id := range map[string]string{"after_id": p.AfterID, "before_id": p.BeforeID} {
		if id != "" && !isUUID(id) {
			return nil, invalid(name, "%q is not a job id (a UUID)", id)
		}
	}
	if p.AfterID != "" && p.BeforeID != "" {
		return nil, invalid("before_id", "give AfterID or BeforeID, not both")
	}
	back := p.BeforeID != ""
	sp, err := c.storeListParams(p.ListParams)
	if err != nil {
		return nil, err
	}
	if back {
		sp.AfterID = p.BeforeID
	}
	sp.Limit = p.Limit + 1
	rows, err := c.store.ListPage(ctx, c.pool, sp, p.NewestFirst != back, p.ScanBudget)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", wrapPgError(err))
	}
	var out JobPage
	stop := ""
	for _, r := range rows {
		if r.Hit {
			out.Jobs = append(out.Jobs, fromRow(r.Job))
		}
		if r.Last {
			stop = r.Job.ID
		}
	}
	// Onward: the page's last job, or where the scan stopped.
	onward := ""
	switch {
	case len(out.Jobs) > p.Limit:
		out.Jobs = out.Jobs[:p.Limit]
		onward = out.Jobs[p.Limit-1].ID
	case stop != "":
		onward, out.Bounded = stop, true
	}
	if !back {
		out.Next = onward
		if p.AfterID != "" && len(out.Jobs) > 0 {
			out.Prev = out.Jobs[0].ID
		}
		return &out, nil
	}
	slices.Reverse(out.Jobs)
	out.Prev = onward
	if len(out.Jobs) > 0 {
		out.Next = out.Jobs[len(out.Jobs)-1].ID
	}
	return &out, nil
}

// JobStateEstimates returns the database planner's estimate of how many jobs each
// state holds, read from the table's statistics (as of its last ANALYZE): two catalog
// rows, whatever the table's size. States too rare for the statistics to list are
// absent; exact counts of the live states are in Stats.
func (c *Client) JobStateEstimates(ctx context.Context) (map[JobState]int64, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	est, err := c.store.StateEstimates(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("estimating jobs by state: %w", wrapPgError(err))
	}
	out := make(map[JobState]int64, len(est))
	for s, n := range est {
		out[JobState(s)] = n
	}
	return out, nil
}

// JobsByTxPage returns up to limit (1..1000) of the jobs the transaction txid wrote,
// by id after afterID ("" from the first): JobsByTx a page at a time.
func (c *Client) JobsByTxPage(ctx context.Context, txid int64, afterID string, limit int) ([]*Job, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if txid <= 0 {
		return nil, invalid("txid", "%d is not a transaction id", txid)
	}
	if afterID != "" && !isUUID(afterID) {
		return nil, invalid("after_id", "%q is not a job id (a UUID)", afterID)
	}
	if limit < 1 || limit > 1000 {
		return nil, invalid("limit", "must be 1..1000")
	}
	rows, err := c.store.JobsByTxPage(ctx, c.pool, txid, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("listing the jobs of transaction %d: %w", txid, wrapPgError(err))
	}
	return fromRows(rows), nil
}

// JobCount counts the jobs p's filters match (its cursor and limit are ignored), up
// to limit (1..1,000,000), and returns the count and, when it is below the limit, the
// greatest matching id (an action on "these jobs" can stop there, leaving alone the
// jobs enqueued later).
func (c *Client) JobCount(ctx context.Context, p ListParams, limit int) (n int64, lastID string, err error) {
	if ctx == nil {
		return 0, "", invalid("ctx", "must not be nil")
	}
	if limit < 1 || limit > 1_000_000 {
		return 0, "", invalid("limit", "must be 1..1000000")
	}
	sp, err := c.storeListParams(p)
	if err != nil {
		return 0, "", err
	}
	n, lastID, err = c.store.CountCapped(ctx, c.pool, sp, limit)
	if err != nil {
		return 0, "", fmt.Errorf("counting jobs: %w", wrapPgError(err))
	}
	if n >= int64(limit) {
		lastID = ""
	}
	return n, lastID, nil
}
