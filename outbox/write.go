package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/store"
)

// WriterConfig configures a Writer. The zero value is usable.
type WriterConfig struct {
	// Schema holding skiplock's tables. Default skiplock.DefaultSchema ("skiplock").
	Schema string
	// Ordered serialises writers of one aggregate: each write takes a
	// transaction-scoped advisory lock on (schema, aggregate type, aggregate id)
	// before the event's id is generated, held until the caller's transaction ends.
	// Then, per aggregate, id order equals commit order, which is what a relay with
	// RelayConfig.OrderedByAggregate needs to never publish a later event before an
	// earlier one. The cost: a second transaction writing to the same aggregate waits
	// until the first commits or rolls back, and every distinct aggregate of a
	// WriteMany holds one lock-table slot until commit (keep batches below
	// max_locks_per_transaction × max_connections). Default false.
	Ordered bool
	// Clock supplies created_at/available_at. Default nil: the database's now().
	Clock skiplock.Clock
	// MaxPayloadBytes refuses larger payloads. Default DefaultMaxPayload (1 MiB).
	MaxPayloadBytes int
	// NoNotify stops writes from sending NOTIFY (relays then find events by polling
	// only). Default false: each write statement sends one NOTIFY on Channel(schema),
	// delivered at commit; PostgreSQL folds identical notifications of one
	// transaction into one.
	NoNotify bool
}

// Writer writes events into one schema's outbox. It is safe for concurrent use and
// holds no connection: every write runs on the DB the caller passes.
type Writer struct {
	cfg     WriterConfig
	store   *store.Store
	channel string
}

// NewWriter validates cfg and returns a Writer.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if cfg.Schema == "" {
		cfg.Schema = skiplock.DefaultSchema
	}
	st, err := store.New(cfg.Schema)
	if err != nil {
		return nil, invalid("schema", "%v", err)
	}
	if cfg.MaxPayloadBytes < 0 {
		return nil, invalid("max_payload_bytes", "%d is negative; use 0 for the default", cfg.MaxPayloadBytes)
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = DefaultMaxPayload
	}
	w := &Writer{cfg: cfg, store: st}
	if !cfg.NoNotify {
		w.channel = Channel(cfg.Schema)
	}
	return w, nil
}

// Channel returns the NOTIFY channel outbox writes announce themselves on:
// "<schema>.outbox", cut to PostgreSQL's identifier limit.
func Channel(schema string) string { return ident.Channel(schema, "outbox") }

var defaultWriter, _ = NewWriter(WriterConfig{})

// Write inserts ev into the outbox of the default schema ("skiplock") in db, which
// should be the transaction that makes the business change: the event exists if and
// only if that transaction commits. It returns the event's id (a UUIDv7), which every
// published copy of the event carries. Invalid input returns a
// *skiplock.ValidationError (errors.Is(err, skiplock.ErrInvalid)) and writes nothing.
// Use a Writer for another schema or for ordered writes.
func Write(ctx context.Context, db skiplock.DB, ev Event) (string, error) {
	return defaultWriter.Write(ctx, db, ev)
}

// WriteMany inserts events into the default schema's outbox in one statement (one
// round trip) and returns their ids in input order. Either every event is valid and
// all are written, or none is.
func WriteMany(ctx context.Context, db skiplock.DB, evs []Event) ([]string, error) {
	return defaultWriter.WriteMany(ctx, db, evs)
}

// Write inserts ev in db (see the package-level Write).
func (w *Writer) Write(ctx context.Context, db skiplock.DB, ev Event) (string, error) {
	ids, err := w.write(ctx, db, []Event{ev}, false)
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// WriteMany inserts evs in db in one statement (see the package-level WriteMany).
func (w *Writer) WriteMany(ctx context.Context, db skiplock.DB, evs []Event) ([]string, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	return w.write(ctx, db, evs, true)
}

func (w *Writer) write(ctx context.Context, db skiplock.DB, evs []Event, many bool) ([]string, error) {
	ps := make([]store.OutboxInsertParams, len(evs))
	for i := range evs {
		ev := &evs[i]
		headers, err := ev.validate(w.cfg.MaxPayloadBytes)
		if err != nil {
			if many {
				return nil, fmt.Errorf("event %d: %w", i, err)
			}
			return nil, err
		}
		max := ev.MaxAttempts
		if max == 0 {
			max = DefaultMaxAttempts
		}
		ps[i] = store.OutboxInsertParams{
			AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, EventType: ev.EventType,
			Destination: ev.Destination, Payload: ev.Payload, Headers: headers, MaxAttempts: max,
		}
	}
	ids, err := w.store.OutboxInsert(ctx, db, nowParam(w.cfg.Clock), ps,
		store.OutboxInsertOptions{Ordered: w.cfg.Ordered, Channel: w.channel})
	if err != nil {
		return nil, fmt.Errorf("writing %d outbox event(s): %w", len(ps), wrapPgError(err))
	}
	return ids, nil
}

func nowParam(c skiplock.Clock) *time.Time {
	if c == nil {
		return nil
	}
	t := c.Now()
	return &t
}

// wrapPgError turns the database's refusals of input into validation errors and a
// missing schema into skiplock.ErrNotMigrated.
func wrapPgError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "22P02", "22P05", "22021": // invalid text representation, untranslatable character, bad encoding
		return &skiplock.ValidationError{Field: "payload", Reason: pgErr.Message}
	case "3F000", "42P01", "42704", "42883": // schema, table, type or function missing
		return fmt.Errorf("%w: %v", skiplock.ErrNotMigrated, err)
	}
	return err
}
