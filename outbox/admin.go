package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/store"
)

// ErrNotFound is returned when an event id matches no event (or none in the state an
// operation needs, such as Requeue of an event that is not dead).
var ErrNotFound = errors.New("outbox: event not found")

// Admin inspects and repairs one schema's outbox: read events, list and requeue dead
// ones, and apply retention. The zero value uses the default schema.
type Admin struct {
	// Schema holding skiplock's tables. Default skiplock.DefaultSchema.
	Schema string
	// Clock supplies the time of requeues and retention cut-offs. Default nil: the
	// database's now().
	Clock skiplock.Clock
}

func (a Admin) store() (*store.Store, error) {
	return Inbox{Schema: a.Schema}.store()
}

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
	return r
}

// Get returns one event, or ErrNotFound.
func (a Admin) Get(ctx context.Context, db skiplock.DB, id string) (*Record, error) {
	st, err := a.store()
	if err != nil {
		return nil, err
	}
	e, err := st.OutboxGet(ctx, db, id)
	if errors.Is(err, pgx.ErrNoRows) || isBadID(err) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("reading outbox event %s: %w", id, wrapPgError(err))
	}
	return record(e), nil
}

// ListDead returns up to limit dead events, oldest parking first, starting after the
// event after (nil for the first page; pass the last record of a page for the next).
func (a Admin) ListDead(ctx context.Context, db skiplock.DB, after *Record, limit int) ([]*Record, error) {
	st, err := a.store()
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	var at *time.Time
	var id string
	if after != nil && after.DeadAt != nil {
		at, id = after.DeadAt, after.ID
	}
	evs, err := st.OutboxListDead(ctx, db, at, id, limit)
	if err != nil {
		return nil, fmt.Errorf("listing dead outbox events: %w", wrapPgError(err))
	}
	out := make([]*Record, len(evs))
	for i, e := range evs {
		out[i] = record(e)
	}
	return out, nil
}

// isBadID reports a database refusal of a string as a uuid: no event can have it.
func isBadID(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02"
}

// Requeue makes a dead event due now with a fresh attempt budget (attempts reset to
// 0; last_error is kept until the next failure). It returns ErrNotFound if no dead
// event has that id.
func (a Admin) Requeue(ctx context.Context, db skiplock.DB, id string) error {
	st, err := a.store()
	if err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: empty id (use RequeueDead for all)", ErrNotFound)
	}
	ids, err := st.OutboxRequeue(ctx, db, nowParam(a.Clock), id)
	if isBadID(err) {
		return fmt.Errorf("%w: %q is not an event id", ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("requeueing outbox event %s: %w", id, wrapPgError(err))
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: no dead event %s", ErrNotFound, id)
	}
	return nil
}

// RequeueDead requeues every dead event (see Requeue) and returns how many.
func (a Admin) RequeueDead(ctx context.Context, db skiplock.DB) (int, error) {
	st, err := a.store()
	if err != nil {
		return 0, err
	}
	ids, err := st.OutboxRequeue(ctx, db, nowParam(a.Clock), "")
	if err != nil {
		return 0, fmt.Errorf("requeueing dead outbox events: %w", wrapPgError(err))
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
	st, err := a.store()
	if err != nil {
		return res, err
	}
	if r.Published == 0 {
		r.Published = 7 * 24 * time.Hour
	}
	if r.Published > 0 {
		res.Published, err = pruneLoop(ctx, r.BatchSize, func(limit int) (int64, error) {
			return st.OutboxPrunePublished(ctx, db, nowParam(a.Clock), r.Published, limit)
		}, "pruning published outbox events")
		if err != nil {
			return res, err
		}
	}
	if r.Dead > 0 {
		res.Dead, err = pruneLoop(ctx, r.BatchSize, func(limit int) (int64, error) {
			return st.OutboxPruneDead(ctx, db, nowParam(a.Clock), r.Dead, limit)
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
	st, err := a.store()
	if err != nil {
		return Counts{}, err
	}
	c, err := st.OutboxCount(ctx, db)
	if err != nil {
		return Counts{}, fmt.Errorf("counting outbox events: %w", wrapPgError(err))
	}
	return Counts(c), nil
}
