package engine

import (
	"context"
	"math/bits"
	"time"

	"github.com/skiplock/skiplock/internal/backoff"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/safetext"
	"github.com/skiplock/skiplock/internal/store"
)

// complete batches the outcomes sent to it and writes each batch (flush).
func (e *Engine) complete() {
	defer e.bgWG.Done()
	batch := make([]*flight, 0, e.cfg.CompletionBatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case f := <-e.outcomes:
			batch = append(batch, f)
		case <-e.bgCtx.Done():
			return
		}
		timer.Reset(e.cfg.CompletionBatchDelay)
	fill:
		for len(batch) < e.cfg.CompletionBatchSize {
			select {
			case f := <-e.outcomes:
				batch = append(batch, f)
			case <-timer.C:
				break fill
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		e.flush(batch)
		batch = batch[:0]
	}
}

// flush writes a batch of outcomes. It retries the whole batch while the failure is
// one retrying can fix (the database is unreachable, restarting, overloaded): the
// writes are fenced, so retrying after an ambiguous failure is safe. A failure that
// retrying can never fix (the server refused the statement's data) is one outcome's
// doing, not the batch's: the batch is split so every other outcome is written at
// once, and the offending outcome is written with a safe fallback (see fallback).
func (e *Engine) flush(batch []*flight) {
	budget := splitBudget(len(batch))
	e.flushSplit(batch, false, false, &budget)
}

// splitBudget bounds the statements flush spends on a batch of n: an error every
// outcome hits (a trigger that refuses all updates) costs a few dozen statements, not
// two per job.
func splitBudget(n int) int { return 8*bits.Len(uint(n)) + 8 }

// flushSplit is flush for part of a batch. ambiguous says an earlier attempt at these
// outcomes failed in a way that may have committed; fellBack says the outcomes are
// already fallbacks, so a refusal drops them instead of splitting again.
func (e *Engine) flushSplit(batch []*flight, ambiguous, fellBack bool, budget *int) {
	if *budget <= 0 {
		e.cfg.Log.Error("skiplock: the database keeps refusing these outcomes; their leases will expire and the reclaimer will retry the jobs",
			"jobs", len(batch))
		for _, f := range batch {
			e.retire(f, nil)
		}
		return
	}
	*budget--
	outs := make([]store.Outcome, len(batch))
	for i, f := range batch {
		outs[i] = f.outcome
	}
	fail := backoff.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: hostclock.Jitter}
	for {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.bgCtx), 30*time.Second)
		began := hostclock.Now()
		res, err := Finish(ctx, e.cfg.Store, e.cfg.Pool, e.now(), e.cfg.DeleteOnSuccess, outs)
		if err == nil && (ambiguous || anyCompletedInTx(batch)) {
			// An earlier attempt, or the handler's own transaction (CompleteTx), may
			// have written the outcome already: the fenced write then matched nothing.
			err = e.recognise(ctx, batch, res)
		}
		cancel()
		if err == nil {
			e.cfg.Failures.OK("completion")
			e.cfg.Counters.FlushNanos.Add(int64(hostclock.Since(began)))
			e.cfg.Counters.Flushes.Add(1)
			e.cfg.Counters.Flushed.Add(int64(len(outs)))
			for _, f := range batch {
				if st, ok := res[f.outcome.Lease]; ok {
					e.retire(f, &st)
				} else {
					e.retire(f, nil)
				}
			}
			return
		}
		if !pgerr.Retryable(err) {
			e.refused(batch, err, ambiguous, fellBack, budget)
			return
		}
		ambiguous = true
		wait := fail.Next()
		e.cfg.Failures.Warn("completion", err, "jobs", len(batch), "retry_in", wait)
		if !hostclock.Sleep(e.bgCtx, wait) {
			e.cfg.Log.Error("skiplock: stopping with unwritten outcomes; their jobs will be reclaimed and run again", "jobs", len(batch))
			for _, f := range batch {
				e.retire(f, nil)
			}
			return
		}
	}
}

// anyCompletedInTx reports whether a handler of the batch completed its job with
// CompleteTx.
func anyCompletedInTx(batch []*flight) bool {
	for _, f := range batch {
		if f.inTx {
			return true
		}
	}
	return false
}

// refused handles a batch the server refused with an error retrying cannot fix. A
// batch of several is halved and each half written on its own, so a poison outcome
// costs log2(batch) extra statements and delays no other outcome behind it. A single
// outcome is written once more as its fallback; if even that is refused, its lease is
// left to expire and the reclaimer retries the job like a crashed run.
func (e *Engine) refused(batch []*flight, err error, ambiguous, fellBack bool, budget *int) {
	if len(batch) > 1 {
		half := len(batch) / 2
		e.flushSplit(batch[:half], ambiguous, fellBack, budget)
		e.flushSplit(batch[half:], ambiguous, fellBack, budget)
		return
	}
	f := batch[0]
	if fellBack {
		e.cfg.Log.Error("skiplock: the database refused a job's fallback outcome; its lease will expire and the reclaimer will retry it",
			"job_id", f.row.ID, "kind", f.row.Kind, "error", err)
		e.retire(f, nil)
		return
	}
	e.cfg.Log.Error("skiplock: the database refused a job's outcome; writing a fallback",
		"job_id", f.row.ID, "kind", f.row.Kind, "action", string(f.outcome.Action), "sqlstate", pgerr.Code(err), "error", err)
	f.outcome = fallback(f.outcome, err)
	e.flushSplit(batch, ambiguous, true, budget)
}

// fallback is the outcome written for a job whose own outcome the database refused.
// It keeps the action (a success stays a success, a retry a retry) but replaces what
// came from the handler — the error text and the delay — with values that cannot be
// refused: the refusal's own message, and the retry policy's smallest delay (none).
func fallback(o store.Outcome, refusal error) store.Outcome {
	if o.Action != store.ActionComplete {
		o.Error = safetext.Clean("skiplock: the handler's outcome was refused by the database (" +
			safetext.Error(refusal) + "); its error text was dropped")
	}
	o.Delay = 0
	return o
}

// recognise runs after a retried completion batch: an earlier attempt may have
// committed before its connection failed, and then the retry — fenced by tokens the
// first attempt cleared — changes nothing for those jobs. For each job the retry did
// not change, it reads the row and adds it to res when the row is exactly what this
// outcome writes (state, attempt count and, where written, the error), so the worker
// reports the outcome it wrote instead of a lost lease. A job taken over by another
// worker cannot match: a reclaim writes its own error, a new claim raises attempts —
// or, after a claim lost in a server crash, counts the same attempt again but at
// another claim time.
func (e *Engine) recognise(ctx context.Context, batch []*flight, res map[store.Lease]string) error {
	var missing []string
	for _, f := range batch {
		if _, ok := res[f.outcome.Lease]; !ok {
			missing = append(missing, f.row.ID)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	rows, err := e.cfg.Store.Finished(ctx, e.cfg.Pool, missing)
	if err != nil {
		return err
	}
	for _, f := range batch {
		if _, ok := res[f.outcome.Lease]; ok {
			continue
		}
		row, found := rows[f.row.ID]
		var claimedAt time.Time
		if f.row.AttemptedAt != nil {
			claimedAt = *f.row.AttemptedAt
		}
		st, ok := ownOutcome(f.outcome, f.row.Attempts, claimedAt, row, found, e.cfg.DeleteOnSuccess)
		if !ok && f.inTx {
			// The handler's CompleteTx committed the job's completion and the handler
			// then returned an error: the completion stands, and the job succeeded.
			st, ok = ownOutcome(store.Outcome{Action: store.ActionComplete}, f.row.Attempts, claimedAt, row, found, e.cfg.DeleteOnSuccess)
		}
		if ok {
			res[f.outcome.Lease] = st
		}
	}
	return nil
}

// ownOutcome reports whether a job row (found or deleted) is what outcome o, written
// for a claim at attempt made at claimedAt (zero: unknown), leaves behind, and the
// state it left. A deleted row (DeleteOnSuccess) keeps no trace of which claim
// completed it: it is taken as ours.
func ownOutcome(o store.Outcome, attempt int, claimedAt time.Time, row store.FinishedRow, found, deleteOnSuccess bool) (string, bool) {
	if !found {
		return store.StatusSucceeded, o.Action == store.ActionComplete && deleteOnSuccess
	}
	if row.Running {
		return "", false
	}
	if !claimedAt.IsZero() && row.AttemptedAt != nil && !row.AttemptedAt.Equal(claimedAt) {
		return "", false
	}
	wantAttempts, wantErr := attempt, o.Error
	var states []string
	switch o.Action {
	case store.ActionComplete:
		states, wantErr = []string{store.StatusSucceeded}, row.LastError // a completion keeps the old error
	case store.ActionFail:
		states = []string{store.StatusFailed}
	case store.ActionCancel:
		states = []string{store.StatusCancelled}
	case store.ActionSnooze:
		states, wantAttempts, wantErr = []string{store.StatusPending}, attempt-1, row.LastError
	case store.ActionRetry:
		states = []string{store.StatusPending, store.StatusFailed}
	}
	if row.Attempts != wantAttempts || row.LastError != wantErr {
		return "", false
	}
	for _, st := range states {
		if row.Status == st {
			return st, true
		}
	}
	return "", false
}

// Finish writes outcomes with the statement the configuration asks for: deleting
// successes (deleteOnSuccess) or keeping them. db may be the caller's transaction
// (CompleteTx). It returns the state each written job was left in, by lease.
func Finish(ctx context.Context, st *store.Store, db store.DBTX, now *time.Time, deleteOnSuccess bool, outs []store.Outcome) (map[store.Lease]string, error) {
	if deleteOnSuccess {
		return st.FinishDeleting(ctx, db, now, outs)
	}
	return st.Finish(ctx, db, now, outs)
}
