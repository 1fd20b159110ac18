package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/validate"
)

// Config configures an Outbox. The zero value is usable.
type Config struct {
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
	// NoNotify stops writes from sending NOTIFY (relays then find events by polling
	// only). Default false: each write statement sends one NOTIFY on Channel(schema),
	// delivered at commit; PostgreSQL folds identical notifications of one
	// transaction into one.
	NoNotify bool
}

// Outbox is the transactional outbox of one skiplock.Client: it writes events into
// the client's schema with the client's clock and payload limit, and hands out that
// schema's Inbox, Admin and relays, so nothing built from it can address another
// schema by mistake. Create it with New. It is safe for concurrent use and holds no
// connection of its own: writes run on the DB the caller passes, relays on the
// client's pool.
type Outbox struct {
	client     *skiplock.Client
	pool       *pgxpool.Pool
	schema     string
	store      *store.Store
	clock      skiplock.Clock
	maxPayload int
	cfg        Config
	channel    string
}

// New returns the outbox of client's schema. It does not touch the database.
//
// The consumer side needs a client too, on the consumer's database (run skiplock's
// migrations there): skiplock.NewClient only records its configuration, so a client
// made just to reach an Inbox costs nothing.
func New(client *skiplock.Client, cfg Config) (*Outbox, error) {
	if client == nil {
		return nil, &skiplock.ValidationError{Field: "client", Reason: "must not be nil; create one with skiplock.NewClient"}
	}
	st, err := store.New(client.Schema())
	if err != nil {
		return nil, &skiplock.ValidationError{Field: "client", Reason: fmt.Sprintf("schema: %v (was the client made with skiplock.NewClient?)", err)}
	}
	clock := client.Clock()
	if clock != nil && isNil(clock) {
		return nil, &skiplock.ValidationError{Field: "client", Reason: fmt.Sprintf("its Clock is a nil %T; leave Config.Clock nil for the database's clock", clock)}
	}
	o := &Outbox{client: client, pool: client.Pool(), schema: client.Schema(), store: st, clock: clock, cfg: cfg, maxPayload: payloadLimit(client)}
	if !cfg.NoNotify {
		o.channel = Channel(o.schema)
	}
	return o, nil
}

// payloadLimit is the client's payload limit, when the client reports it.
func payloadLimit(client *skiplock.Client) int {
	if c, ok := any(client).(interface{ MaxPayloadBytes() int }); ok {
		if n := c.MaxPayloadBytes(); n > 0 {
			return n
		}
	}
	return DefaultMaxPayload
}

// Schema returns the schema the outbox writes to (its client's).
func (o *Outbox) Schema() string {
	if o == nil {
		return ""
	}
	return o.schema
}

// Channel returns the NOTIFY channel outbox writes announce themselves on:
// "<schema>.outbox", cut to PostgreSQL's identifier limit.
func Channel(schema string) string { return ident.Channel(schema, "outbox") }

// Write inserts ev in db, which should be the transaction that makes the business
// change: the event exists if and only if that transaction commits. db may be a
// pgx.Tx, a pool, a conn, or database/sql through skiplock.FromSQL. Write returns the
// event's id (a UUIDv7), which every published copy of the event carries. Invalid
// input (including a nil ctx or db) returns a *skiplock.ValidationError
// (errors.Is(err, skiplock.ErrInvalid)) and writes nothing.
func (o *Outbox) Write(ctx context.Context, db skiplock.DB, ev Event) (string, error) {
	ids, err := o.write(ctx, db, []Event{ev}, false)
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// WriteMany inserts evs in db in one statement (one round trip) and returns their
// ids in input order. Either every event is valid and all are written, or none is.
func (o *Outbox) WriteMany(ctx context.Context, db skiplock.DB, evs []Event) ([]string, error) {
	if err := o.check(ctx, db); err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, nil
	}
	return o.write(ctx, db, evs, true)
}

func (o *Outbox) write(ctx context.Context, db skiplock.DB, evs []Event, many bool) ([]string, error) {
	if err := o.check(ctx, db); err != nil {
		return nil, err
	}
	ps := make([]store.OutboxInsertParams, len(evs))
	for i := range evs {
		ev := &evs[i]
		headers, err := ev.validate(o.maxPayload)
		if err != nil {
			if many {
				return nil, fmt.Errorf("event %d: %w", i, err)
			}
			return nil, err
		}
		attempts := ev.MaxAttempts
		if attempts == 0 {
			attempts = DefaultMaxAttempts
		}
		ps[i] = store.OutboxInsertParams{
			AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, EventType: ev.EventType,
			Destination: ev.Destination, Payload: ev.Payload, Headers: headers, MaxAttempts: attempts,
			ConcurrencyKey: ev.ConcurrencyKey,
		}
	}
	ids, err := o.store.OutboxInsert(ctx, db, o.now(), ps,
		store.OutboxInsertOptions{Ordered: o.cfg.Ordered, Channel: o.channel})
	if err != nil {
		return nil, fmt.Errorf("writing %d outbox event(s): %w", len(ps), wrapDB(err, "payload"))
	}
	return ids, nil
}

// check refuses a zero or nil Outbox and a nil ctx or db before any SQL runs.
func (o *Outbox) check(ctx context.Context, db skiplock.DB) error {
	if o == nil || o.store == nil {
		return &skiplock.ValidationError{Field: "outbox", Reason: "not created by outbox.New"}
	}
	return checkArgs(ctx, db)
}

// checkArgs refuses a nil ctx and a nil (or typed-nil) db, which would otherwise
// panic inside the driver.
func checkArgs(ctx context.Context, db skiplock.DB) error {
	if ctx == nil {
		return &skiplock.ValidationError{Field: "ctx", Reason: "must not be nil; use context.Background() or a request's context"}
	}
	if isNil(db) {
		return &skiplock.ValidationError{Field: "db", Reason: fmt.Sprintf("is a nil %T; pass the transaction (pgx.Tx), a pool or a conn, or skiplock.FromSQL(tx)", db)}
	}
	return nil
}

// isNil is validate.IsNil (the relay's files call it by this name).
func isNil(v any) bool { return validate.IsNil(v) }

// now is the statement parameter for the outbox's clock: nil selects the database's now().
func (o *Outbox) now() *time.Time { return store.NowParam(o.clock) }

// wrapDB turns the database's refusal of text into a validation error on field and a
// missing schema into skiplock.ErrNotMigrated.
func wrapDB(err error, field string) error {
	return pgerr.Wrap(err, func(reason string) error {
		return &skiplock.ValidationError{Field: field, Reason: reason}
	}, skiplock.ErrNotMigrated)
}
