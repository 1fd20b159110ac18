package outbox

// Recording a batch's outcomes: turning each publish result into an outcome, and
// mark, which records them with token-fenced statements through the one splitter
// (internal/batchsplit): a statement the database refuses for good is split, and a
// refused error text retried with a plain one.

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/batchsplit"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/safetext"
	"github.com/skiplock/skiplock/internal/store"
)

// outcome turns one publish result into what to record. It never panics: an error
// whose methods panic (Error, Unwrap, As) or a RetryPolicy that panics makes a
// retry after the poll interval with a description of the panic.
func (r *Relay) outcome(o store.OutboxOutcome, attempt int, e error, stopping bool) (out store.OutboxOutcome) {
	defer func() {
		if p := recover(); p != nil {
			out = o
			out.Action, out.Delay = store.OutboxRetry, r.cfg.PollInterval
			out.Error = safetext.Clean(fmt.Sprintf("outbox relay: classifying the publisher's result panicked: %v", p))
		}
	}()
	switch {
	case e == nil:
		o.Action = store.OutboxPublished
	case stopping:
		o.Action = store.OutboxRelease // our own cancellation, not the event's fault
	case isPermanent(e):
		o.Action, o.Error = store.OutboxDead, safetext.Error(e)
	default:
		o.Action, o.Error, o.Delay = store.OutboxRetry, safetext.Error(e), r.cfg.RetryPolicy.Delay(attempt)
	}
	return o
}

// isPermanent reports whether err asks not to be retried: it wraps a
// *skiplock.PermanentError, the one permanent-error type of jobs and events alike.
func isPermanent(err error) bool {
	var p *skiplock.PermanentError
	return errors.As(err, &p)
}

// marks is what recording a batch's outcomes did.
type marks struct {
	done     map[string]store.OutboxAction // what the statements changed, by id
	settled  map[string]bool               // ids a successful statement covered (absent from done: lease lost)
	refusals []error                       // why outcomes were refused
}

// mark records outs with token-fenced statements through the one splitter
// (internal/batchsplit; see RunOnce): a statement the database refuses for good is
// halved until the refused outcome is alone, which is tried once more with a plain
// error text in place of the publisher's, and given up (left leased) if that is
// refused too; the batch's statements are bounded by batchsplit.Budget. A non-nil
// error (retryable, or ctx ended) means the outcomes not yet settled were not
// recorded.
func (r *Relay) mark(ctx context.Context, outs []store.OutboxOutcome) (*marks, error) {
	m := &marks{done: make(map[string]store.OutboxAction, len(outs)), settled: make(map[string]bool, len(outs))}
	err := batchsplit.Splitter[store.OutboxOutcome]{
		Write: func(part []store.OutboxOutcome) error {
			done, err := r.o.store.OutboxFinish(ctx, r.o.pool, r.o.now(), part)
			if err != nil {
				return err
			}
			maps.Copy(m.done, done)
			for _, o := range part {
				m.settled[o.ID] = true
			}
			return nil
		},
		Refused: func(err error) bool { return !pgerr.Retryable(err) && ctx.Err() == nil },
		Fallback: func(o store.OutboxOutcome, refusal error) (store.OutboxOutcome, bool) {
			if o.Error == "" {
				return o, false // nothing of the publisher's to replace
			}
			o.Error = fallbackText(refusal)
			return o, true
		},
		GiveUp: func(part []store.OutboxOutcome, err error) {
			if len(part) == 1 {
				m.refusals = append(m.refusals, fmt.Errorf("event %s: %w", part[0].ID, err))
			} else {
				m.refusals = append(m.refusals, fmt.Errorf("events %s and %d more: %w", part[0].ID, len(part)-1, err))
			}
		},
		Log:  r.log,
		Name: "outbox relay",
		Attrs: func(o store.OutboxOutcome) []any {
			return []any{"event_id", o.ID, "outcome", string(o.Action), "publisher_error", o.Error}
		},
	}.Run(outs)
	return m, err
}

// fallbackText replaces a publisher's error text the database refused to store.
func fallbackText(err error) string {
	return "publish failed; the database refused to store the publisher's error text (SQLSTATE " +
		pgerr.Code(err) + "), see the relay's log"
}
