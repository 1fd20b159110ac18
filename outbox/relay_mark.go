package outbox

// Recording a batch's outcomes: turning each publish result into an outcome, and the
// marker, which records them with token-fenced statements, splits a statement the
// database refuses for good and retries a refused error text with a plain one.

import (
	"context"
	"errors"
	"fmt"

	"github.com/skiplock/skiplock"
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

// marker records a batch's outcomes, splitting a statement the database refuses for
// good (see RunOnce). budget bounds the statements one batch may take, so an error
// that every row hits (a trigger that refuses all updates) costs a few dozen
// statements, not two per event.
type marker struct {
	r       *Relay
	ctx     context.Context
	budget  int
	done    map[string]store.OutboxAction // what the statements changed, by id
	settled map[string]bool               // ids a successful statement covered (absent from done: lease lost)
	errs    []error                       // why outcomes were refused
}

// finish records outs; a non-nil error (retryable, or ctx ended) means the outcomes
// not yet in m.done were not recorded.
func (m *marker) finish(outs []store.OutboxOutcome) error {
	err := m.statement(outs)
	if err == nil || pgerr.Retryable(err) || m.ctx.Err() != nil {
		return err
	}
	if len(outs) > 1 {
		half := len(outs) / 2
		if err := m.finish(outs[:half]); err != nil {
			return err
		}
		return m.finish(outs[half:])
	}
	o := outs[0]
	if o.Error != "" {
		m.r.log.Warn("outbox relay: the database refused an event's outcome; recording it with a plain error text",
			"event_id", o.ID, "outcome", string(o.Action), "error", o.Error, "db_error", safetext.Error(err))
		o.Error = fallbackText(err)
		if err = m.statement([]store.OutboxOutcome{o}); err == nil || pgerr.Retryable(err) || m.ctx.Err() != nil {
			return err
		}
	}
	m.r.log.Error("outbox relay: the database refused an event's outcome; it stays leased and will be claimed again",
		"event_id", o.ID, "outcome", string(o.Action), "db_error", safetext.Error(err))
	m.refuse(outs, err)
	return nil
}

// statement runs one finish statement within the budget and keeps what it recorded.
func (m *marker) statement(outs []store.OutboxOutcome) error {
	if m.budget <= 0 {
		m.refuse(outs, errors.New("too many refused statements in this batch; not split further"))
		return nil
	}
	m.budget--
	done, err := m.r.o.store.OutboxFinish(m.ctx, m.r.o.pool, m.r.o.now(), outs)
	if err != nil {
		return err
	}
	for id, a := range done {
		m.done[id] = a
	}
	for _, o := range outs {
		m.settled[o.ID] = true
	}
	return nil
}

func (m *marker) refuse(outs []store.OutboxOutcome, err error) {
	if len(outs) == 1 {
		m.errs = append(m.errs, fmt.Errorf("event %s: %w", outs[0].ID, err))
	} else {
		m.errs = append(m.errs, fmt.Errorf("events %s and %d more: %w", outs[0].ID, len(outs)-1, err))
	}
}

// fallbackText replaces a publisher's error text the database refused to store.
func fallbackText(err error) string {
	return "publish failed; the database refused to store the publisher's error text (SQLSTATE " +
		pgerr.Code(err) + "), see the relay's log"
}
