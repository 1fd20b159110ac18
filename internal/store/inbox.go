package store

// The consumer inbox: a consumer records each event id it processed, in its own
// transaction, so a redelivered event is recognised as a duplicate.

import (
	"context"
	"time"
)

type inboxStatements struct {
	claim, prune stmt
}

func newInboxStatements(b *builder) inboxStatements {
	return inboxStatements{
		claim: b.add("inbox_claim", `
INSERT INTO {{s}}.inbox (consumer, event_id, processed_at)
VALUES ($2, $3, coalesce($1::timestamptz, now()))
ON CONFLICT (consumer, event_id) DO NOTHING`),

		// The rows to delete are found and locked first, then deleted by their tuple
		// ids (which the lock keeps current): no join for a plan to get wrong.
		prune: b.addGuarded(planGuardOn, "inbox_prune", `
DELETE FROM {{s}}.inbox
WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM {{s}}.inbox
  WHERE processed_at < coalesce($1::timestamptz, now()) - $2::bigint * interval '1 microsecond'
  ORDER BY processed_at
  LIMIT $3
  FOR UPDATE SKIP LOCKED))`),
	}
}

// InboxClaim records that consumer processed eventID and reports whether this is the
// first time (false: a duplicate, already recorded by a committed or concurrent
// transaction).
func (s *Store) InboxClaim(ctx context.Context, db DBTX, now *time.Time, consumer, eventID string) (bool, error) {
	tag, err := db.Exec(ctx, s.inbox.claim.sql, Now(now), consumer, eventID)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// InboxPrune deletes up to limit inbox rows recorded more than olderThan ago.
func (s *Store) InboxPrune(ctx context.Context, db DBTX, now *time.Time, olderThan time.Duration, limit int) (int64, error) {
	return guarded(ctx, db, s.inbox.prune, affected, Now(now), micros(olderThan), limit)
}
