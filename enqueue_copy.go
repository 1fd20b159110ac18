package skiplock

// The bulk path of EnqueueManyTx: a batch of copyThreshold jobs or more without keys
// COPY cannot honour is written with COPY, its lane marks read after its lock
// (store.CopyLaned).

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/uuidv7"
)

// copyThreshold is the batch size from which EnqueueManyTx uses COPY when it can.
const copyThreshold = 64

// copyInsert writes a batch with COPY when no job carries a deduplication or unique
// key (COPY cannot skip conflicts) and the batch's schedule can be expressed as column values.
// ok is false when the batch does not qualify.
func (c *Client) copyInsert(ctx context.Context, copier store.Copier, tx DB, ps []store.InsertParams, queues []string, notify *store.Notify) (out []EnqueueResult, ok bool, err error) {
	allNow, allAbs := true, true
	for i := range ps {
		if ps[i].DedupKey != nil || ps[i].UniqueKey != nil || ps[i].SequenceKey != nil {
			return nil, false, nil // COPY can skip no conflict and take no sequence lock
		}
		allNow = allNow && ps[i].RunAt == nil && ps[i].Delay == 0
		allAbs = allAbs && ps[i].RunAt != nil
	}
	now := store.NowParam(c.cfg.Clock)
	withRunAt := !allNow
	if now != nil {
		withRunAt = true
		for i := range ps {
			if ps[i].RunAt == nil {
				t := now.Add(ps[i].Delay)
				ps[i].RunAt = &t
			}
		}
	} else if !allNow && !allAbs {
		return nil, false, nil // relative delays need the database's now(): use the statement path
	}
	stamp := hostclock.Now()
	ids := make([][16]byte, len(ps))
	uuidv7.Fill(stamp, ids)
	out = make([]EnqueueResult, len(ps))
	for i := range ids {
		out[i] = EnqueueResult{ID: uuidv7.String(ids[i])}
	}
	// The COPY writes each job's lane marks (jobs.grouped, jobs.fair_indexed) as the
	// insert statements do, read in its own transaction after it locked jobs
	// (store.CopyLaned).
	owned, notifyErr, err := c.store.CopyLaned(ctx, copier, queues, notify, func(cp store.Copier, marks store.LaneMarks) error {
		return c.store.CopyInsert(ctx, cp, ids, ps, withRunAt, now, marks)
	})
	if err != nil {
		return nil, true, fmt.Errorf("enqueueing %d job(s) with COPY: %w", len(ps), wrapPgError(err))
	}
	if !owned {
		notifyErr = c.store.SendNotify(ctx, tx, notify)
		if _, pooled := tx.(*pgxpool.Pool); notifyErr != nil && !pooled {
			return nil, true, fmt.Errorf("notifying after COPY: %w", notifyErr)
		}
	}
	if notifyErr != nil {
		// The COPY has committed: report the jobs, not a failure that would invite
		// enqueueing them twice. Polling finds them.
		c.log.Debug("notify after COPY failed; polling will pick the jobs up", "error", notifyErr)
	}
	c.metrics.inserted.Add(int64(len(out)))
	return out, true, nil
}
