package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/store"
)

// Admin inspects and repairs the outbox: read events, list and requeue dead ones,
// and apply retention. Get one from Outbox.Admin: it uses the outbox's schema, and
// its clock for requeues and retention cut-offs. It is a small value, safe to copy
// and share; the zero value refuses every call with a *skiplock.ValidationError.
type Admin struct{ o *Outbox }

// Admin returns the operator interface of the outbox's schema.
func (o *Outbox) Admin() Admin { return Admin{o: o} }

func record(e *store.OutboxEvent) *Record {
	r := &Record{
		ID: e.ID,
		Event: Event{AggregateType: e.AggregateType, AggregateID: e.AggregateID, EventType: e.EventType,
			Destination: e.Destination, Payload: e.Payload, Headers: e.Headers, MaxAttempts: e.MaxAttempts},
		Attempts: e.Attempts, AvailableAt: e.AvailableAt, RelayUntil: e.RelayUntil, PublishedAt: e.PublishedAt,
		DeadAt: e.DeadAt, CreatedAt: e.CreatedAt,
	}
	if e.LastError != nil {
		r.LastError = *e.LastError
	}
	if e.TxID != nil {
		r.TxID = *e.TxID
	}
	return r
}

// EventsByTx returns the events the transaction txid wrote (see Record.TxID), oldest
// first: with Client.JobsByTx, everything one business transaction wrote.
func (a Admin) EventsByTx(ctx context.Context, db skiplock.DB, txid int64) ([]*Record, error) {
	if err := a.o.check(ctx, db); err != nil {
		return nil, err
	}
	evs, err := a.o.store.OutboxByTx(ctx, db, txid)
	if err != nil {
		return nil, fmt.Errorf("listing the outbox events of transaction %d: %w", txid, wrapDB(err, "txid"))
	}
	out := make([]*Record, len(evs))
	for i, e := range evs {
		out[i] = record(e)
	}
	return out, nil
}

// Get returns one event, or ErrNotFound.
func (a Admin) Get(ctx context.Context, db skiplock.DB, id string) (*Record, error) {
	if err := a.o.check(ctx, db); err != nil {
		return nil, err
	}
	e, err := a.o.store.OutboxGet(ctx, db, id)
	if errors.Is(err, pgx.ErrNoRows) || isBadID(err) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("reading outbox event %s: %w", id, wrapDB(err, "id"))
	}
	return record(e), nil
}

// State is an outbox event's state as Admin.List filters it.
type State string

// The states of an outbox event.
const (
	// StatePending: not published yet and not parked — new, leased by a relay, or
	// waiting out a retry backoff.
	StatePending State = "pending"
	// StateDead: parked after its last attempt or a permanent error; Requeue
	// gives it a fresh attempt budget.
	StateDead State = "dead"
	// StatePublished: a publisher confirmed it.
	StatePublished State = "published"
)

// States lists every State.
var States = []State{StatePending, StateDead, StatePublished}

// List returns up to limit events in state, oldest first — by creation for pending
// events, by parking for dead ones, by publication for published ones — starting
// after the event after (nil for the first page; pass the last record of a page for
// the next). An unknown state is an ErrInvalid error naming the valid ones.
func (a Admin) List(ctx context.Context, db skiplock.DB, state State, after *Record, limit int) ([]*Record, error) {
	if err := a.o.check(ctx, db); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	var at *time.Time
	var id string
	switch state {
	case StatePending:
		if after != nil {
			at, id = &after.CreatedAt, after.ID
		}
	case StateDead:
		if after != nil && after.DeadAt != nil {
			at, id = after.DeadAt, after.ID
		}
	case StatePublished:
		if after != nil && after.PublishedAt != nil {
			at, id = after.PublishedAt, after.ID
		}
	default:
		return nil, &skiplock.ValidationError{Field: "state", Reason: fmt.Sprintf("unknown outbox state %q (valid: pending, dead, published)", state)}
	}
	evs, err := a.o.store.OutboxList(ctx, db, string(state), at, id, limit)
	if err != nil {
		return nil, fmt.Errorf("listing %s outbox events: %w", state, wrapDB(err, "after"))
	}
	out := make([]*Record, len(evs))
	for i, e := range evs {
		out[i] = record(e)
	}
	return out, nil
}

// isBadID reports a database refusal of a string as a uuid: no event can have it.
func isBadID(err error) bool { return pgerr.Code(err) == "22P02" }

// Requeue makes a dead event due now with a fresh attempt budget (attempts reset to
// 0; last_error is kept until the next failure). It returns ErrNotFound if no dead
// event has that id.
func (a Admin) Requeue(ctx context.Context, db skiplock.DB, id string) error {
	if err := a.o.check(ctx, db); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: empty id (use RequeueDead for all)", ErrNotFound)
	}
	ids, err := a.o.store.OutboxRequeue(ctx, db, a.o.now(), id)
	if isBadID(err) {
		return fmt.Errorf("%w: %q is not an event id", ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("requeueing outbox event %s: %w", id, wrapDB(err, "id"))
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: no dead event %s", ErrNotFound, id)
	}
	return nil
}

// RequeueDead requeues every dead event (see Requeue) and returns how many.
func (a Admin) RequeueDead(ctx context.Context, db skiplock.DB) (int, error) {
	if err := a.o.check(ctx, db); err != nil {
		return 0, err
	}
	ids, err := a.o.store.OutboxRequeue(ctx, db, a.o.now(), "")
	if err != nil {
		return 0, fmt.Errorf("requeueing dead outbox events: %w", wrapDB(err, "id"))
	}
	return len(ids), nil
}

// Retention says which events Prune deletes.
type Retention struct {
	// Published deletes events published longer ago than this. Default 7 days;
	// negative keeps published events.
	Published time.Duration
	// Dead deletes dead events parked longer ago than this. Default 0: dead events
	// are kept until an operator requeues or deletes them.
	Dead time.Duration
	// BatchSize is the number of rows one DELETE removes. Default 1000.
	BatchSize int
}

// PruneResult tells what Prune removed.
type PruneResult struct {
	Published int64
	Dead      int64
}

// Prune deletes old published (and, if configured, dead) events in batches, each its
// own statement on db (pass a pool, not a transaction, so each batch commits and
// frees its locks). Run it from one process at a time on a timer; concurrent runs
// skip each other's rows rather than wait.
func (a Admin) Prune(ctx context.Context, db skiplock.DB, r Retention) (PruneResult, error) {
	var res PruneResult
	if err := a.o.check(ctx, db); err != nil {
		return res, err
	}
	var err error
	if r.Published == 0 {
		r.Published = 7 * 24 * time.Hour
	}
	if r.Published > 0 {
		res.Published, err = pruneLoop(ctx, r.BatchSize, func(limit int) (int64, error) {
			return a.o.store.OutboxPrunePublished(ctx, db, a.o.now(), r.Published, limit)
		}, "pruning published outbox events")
		if err != nil {
			return res, err
		}
	}
	if r.Dead > 0 {
		res.Dead, err = pruneLoop(ctx, r.BatchSize, func(limit int) (int64, error) {
			return a.o.store.OutboxPruneDead(ctx, db, a.o.now(), r.Dead, limit)
		}, "pruning dead outbox events")
	}
	return res, err
}

// Counts are the outbox's events by state.
type Counts struct {
	Pending   int64 // not yet published and not dead: new, being relayed, or in backoff
	Published int64
	Dead      int64
}

// Count counts the outbox's events by state. It scans the table: use it for tests,
// benchmarks and occasional checks, not on a hot path.
func (a Admin) Count(ctx context.Context, db skiplock.DB) (Counts, error) {
	if err := a.o.check(ctx, db); err != nil {
		return Counts{}, err
	}
	c, err := a.o.store.OutboxCount(ctx, db)
	if err != nil {
		return Counts{}, fmt.Errorf("counting outbox events: %w", wrapDB(err, "outbox"))
	}
	return Counts(c), nil
}
