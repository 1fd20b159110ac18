package skiplock

// The bulk path of EnqueueManyTx: a batch of copyThreshold jobs or more without keys
// COPY cannot honour is written with COPY, its lane marks read after its lock
// (store.CopyLaned).

import (
	"context"
	"fmt"
	"time"

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
	for i := range ps {
		if ps[i].DedupKey != nil || ps[i].UniqueKey != nil || ps[i].SequenceKey != nil {
			return nil, false, nil // COPY can skip no conflict and take no sequence lock
		}
	}
	now := store.NowParam(c.cfg.Clock)
	withRunAt, ok := copySchedule(now, len(ps), func(i int) *store.InsertParams { return &ps[i] })
	if !ok {
		return nil, false, nil
	}
	ids := make([][16]byte, len(ps))
	uuidv7.Fill(hostclock.Now(), ids)
	out = make([]EnqueueResult, len(ps))
	for i := range ids {
		out[i] = EnqueueResult{ID: uuidv7.String(ids[i])}
	}
	err = c.copyLaned(ctx, copier, tx, queues, notify, len(ps), func(cp store.Copier, marks store.LaneMarks) error {
		return c.store.CopyInsert(ctx, cp, ids, ps, withRunAt, now, marks)
	})
	if err != nil {
		return nil, true, fmt.Errorf("enqueueing %d job(s) with COPY: %w", len(ps), err)
	}
	return out, true, nil
}

// copySchedule says how a COPY of n jobs (at(i) the i-th's parameters) writes their
// schedule: with an injected clock (now not nil) every job's RunAt is set from it and
// run_at is written; with the database's clock run_at is written when every job has
// an absolute RunAt, and left to its default, now(), when none has a RunAt or Delay.
// ok is false for a mix, or relative delays, which need the database's now(): the
// insert statement takes those.
func copySchedule(now *time.Time, n int, at func(i int) *store.InsertParams) (withRunAt, ok bool) {
	allNow, allAbs := true, true
	for i := range n {
		p := at(i)
		allNow = allNow && p.RunAt == nil && p.Delay == 0
		allAbs = allAbs && p.RunAt != nil
	}
	if now == nil {
		return !allNow, allNow || allAbs
	}
	for i := range n {
		if p := at(i); p.RunAt == nil {
			t := now.Add(p.Delay)
			p.RunAt = &t
		}
	}
	return true, true
}

// copyLaned runs write, a COPY into jobs, with the lane marks of queues
// (store.CopyLaned: in a transaction of its own on the pool, else in the caller's),
// then announces notify, and counts the jobs. Once the COPY has committed on the
// client's pool, a failed NOTIFY is logged and not returned: the jobs exist, and
// reporting a failure would invite enqueueing them twice (polling finds them).
func (c *Client) copyLaned(ctx context.Context, copier store.Copier, tx DB, queues []string, notify *store.Notify,
	n int, write func(store.Copier, store.LaneMarks) error) error {
	owned, notifyErr, err := c.store.CopyLaned(ctx, copier, queues, notify, write)
	if err != nil {
		return wrapPgError(err)
	}
	if !owned {
		notifyErr = c.store.SendNotify(ctx, tx, notify)
		if _, pooled := tx.(*pgxpool.Pool); notifyErr != nil && !pooled {
			return fmt.Errorf("notifying after COPY: %w", notifyErr)
		}
	}
	if notifyErr != nil {
		c.log.Debug("notify after COPY failed; polling will pick the jobs up", "error", notifyErr)
	}
	c.metrics.inserted.Add(int64(n))
	return nil
}
