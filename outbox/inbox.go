package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

// Inbox records which events a consumer has processed, in the consumer's own
// transaction, so a handler can drop the duplicates at-least-once delivery produces
// atomically with its own effects:
//
//	inbox := ob.Inbox() // ob from outbox.New on a client of the consumer's database
//	tx, _ := pool.Begin(ctx)
//	first, err := inbox.Claim(ctx, tx, "billing", msg.ID)
//	if err != nil || !first { tx.Rollback(ctx); return err } // duplicate: already handled
//	... apply the event's effects in tx ...
//	return tx.Commit(ctx)
//
// If the transaction rolls back, the claim goes with it and a redelivery is handled
// again. A concurrent Claim of the same id waits for the first transaction and then
// reports a duplicate (or, if that one rolled back, claims it). The consumer's
// database must hold skiplock's schema (run the migrations there).
//
// Get an Inbox from Outbox.Inbox: it uses the outbox's schema and clock. It is a
// small value, safe to copy and share; the zero value refuses every call with a
// *skiplock.ValidationError.
type Inbox struct{ o *Outbox }

// Inbox returns the consumer inbox of the outbox's schema.
func (o *Outbox) Inbox() Inbox { return Inbox{o: o} }

// Claim records that consumer has processed eventID, in tx, and reports whether this
// is the first time. first == false means a committed (or concurrent, now committed)
// transaction already recorded it: skip the event. consumer names the handler, so
// several consumers of one event stream keep separate records; both consumer and
// eventID must be non-empty, at most MaxNameLen bytes.
func (in Inbox) Claim(ctx context.Context, tx skiplock.DB, consumer, eventID string) (first bool, err error) {
	if err := in.o.check(ctx, tx); err != nil {
		return false, err
	}
	if err := checkName("consumer", consumer, false); err != nil {
		return false, err
	}
	if err := checkName("event_id", eventID, false); err != nil {
		return false, err
	}
	first, err = in.o.store.InboxClaim(ctx, tx, in.o.now(), consumer, eventID)
	if err != nil {
		return false, fmt.Errorf("recording event %s for consumer %s in the inbox: %w", eventID, consumer, wrapDB(err, "event_id"))
	}
	return first, nil
}

// Prune deletes inbox records older than olderThan (by processed_at) in batches of
// batchSize (0 means 1000), each its own statement, and returns how many it removed.
// Keep records longer than an event can take to be redelivered (the relay's whole
// retry span plus any broker-side retention), or a late duplicate is processed again.
func (in Inbox) Prune(ctx context.Context, db skiplock.DB, olderThan time.Duration, batchSize int) (int64, error) {
	if err := in.o.check(ctx, db); err != nil {
		return 0, err
	}
	if olderThan <= 0 {
		return 0, &skiplock.ValidationError{Field: "older_than", Reason: "must be positive"}
	}
	return pruneLoop(ctx, batchSize, func(limit int) (int64, error) {
		return in.o.store.InboxPrune(ctx, db, in.o.now(), olderThan, limit)
	}, "pruning the inbox")
}

// pruneLoop runs batch deletes until one removes fewer rows than the batch size.
func pruneLoop(ctx context.Context, batchSize int, batch func(limit int) (int64, error), what string) (int64, error) {
	if batchSize < 0 {
		return 0, &skiplock.ValidationError{Field: "batch_size", Reason: fmt.Sprintf("%d is negative; use 0 for the default (1000)", batchSize)}
	}
	if batchSize == 0 {
		batchSize = 1000
	}
	var total int64
	for {
		n, err := batch(batchSize)
		total += n
		if err != nil {
			return total, fmt.Errorf("%s: %w", what, wrapDB(err, "retention"))
		}
		if n < int64(batchSize) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("%s: %w", what, err)
		}
	}
}
