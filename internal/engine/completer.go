package engine

import (
	"context"
	"time"

	"github.com/skiplock/skiplock/internal/batchsplit"
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
// doing, not the batch's: the splitter (internal/batchsplit) halves the batch so
// every other outcome is written at once, and writes the offending outcome once more
// as its fallback (see fallback); one refused even so, or left when the splitter's
// statement budget is spent, is dropped — its lease expires and the reclaimer
// retries the job like a crashed run.
func (e *Engine) flush(batch []*flight) {
	s := batchsplit.Splitter[*flight]{
		Write: e.writeBatch,
		Fallback: func(f *flight, refusal error) (*flight, bool) {
			f.outcome = fallback(f.outcome, refusal)
			return f, true
		},
		GiveUp: func(fs []*flight, _ error) {
			for _, f := range fs {
				e.retire(f, nil)
			}
		},
		Log:  e.cfg.Log,
		Name: "skiplock",
		Attrs: func(f *flight) []any {
			return []any{"job_id", f.row.ID, "kind", f.row.Kind, "action", string(f.outcome.Action)}
		},
	}
	_ = s.Run(batch) // writeBatch returns no error but a refusal
}

// writeBatch writes the outcomes of fs with one statement, retried while the failure
// is one retrying can fix, and retires each flight with the state its outcome left.
// It returns the server's refusal, for the splitter to isolate; nil once every
// flight is retired (also when a stop cut the retries short: their outcomes are
// dropped, and the reclaimer retries the jobs).
func (e *Engine) writeBatch(fs []*flight) error {
	outs := make([]store.Outcome, len(fs))
	for i, f := range fs {
		outs[i] = f.outcome
	}
	fail := e.failBackoff(50 * time.Millisecond)
	for {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.bgCtx), 30*time.Second)
		began := hostclock.Now()
		res, err := e.cfg.Store.FinishEach(ctx, e.cfg.Pool, e.now(), outs, e.cfg.DeleteOnSuccess)
		if err == nil && recheck(fs) {
			// An earlier attempt, or the handler's own transaction (CompleteTx), may
			// have written the outcome already: the fenced write then matched nothing.
			err = e.recognise(ctx, fs, res)
		}
		cancel()
		if err == nil {
			e.cfg.Failures.OK("completion")
			m := e.cfg.Counters
			m.FlushNanos.Add(int64(hostclock.Since(began)))
			m.Flushes.Add(1)
			m.Flushed.Add(int64(len(outs)))
			for i, f := range fs {
				if res[i] != "" {
					e.retire(f, &res[i])
				} else {
					e.retire(f, nil)
				}
			}
			return nil
		}
		if !pgerr.Retryable(err) {
			return err
		}
		for _, f := range fs {
			f.ambiguous = true // the failed attempt may have committed
		}
		wait := fail.Next()
		e.cfg.Failures.Warn("completion", err, "jobs", len(fs), "retry_in", wait)
		if !hostclock.Sleep(e.bgCtx, wait) {
			e.cfg.Log.Error("skiplock: stopping with unwritten outcomes; their jobs will be reclaimed and run again", "jobs", len(fs))
			for _, f := range fs {
				e.retire(f, nil)
			}
			return nil
		}
	}
}

// recheck reports whether a write of fs must read back the rows it did not change:
// an earlier attempt at one of them may have committed, or a handler completed its
// job with CompleteTx.
func recheck(fs []*flight) bool {
	for _, f := range fs {
		if f.ambiguous || f.inTx {
			return true
		}
	}
	return false
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
// not change, it reads the row and sets the job's answer in res (FinishEach's, by
// position in batch) when the row is exactly what this outcome writes (state,
// attempt count and, where written, the error), so the worker
// reports the outcome it wrote instead of a lost lease. A job taken over by another
// worker cannot match: a reclaim writes its own error, a new claim raises attempts —
// or, after a claim lost in a server crash, counts the same attempt again but at
// another claim time.
func (e *Engine) recognise(ctx context.Context, batch []*flight, res []string) error {
	var missing []string
	for i, f := range batch {
		if res[i] == "" {
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
	for i, f := range batch {
		if res[i] != "" {
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
			res[i] = st
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
