package store

// Notifications: LISTEN/NOTIFY only shortens latency (polling guarantees progress),
// so every statement here is cheap and none needs durability.

import (
	"context"

	"github.com/skiplock/skiplock/internal/ident"
)

// Notify names the channel and the queues an insert announces.
type Notify struct {
	Channel string
	Queues  []string
}

func (n *Notify) args() (any, []string) {
	if n == nil || len(n.Queues) == 0 {
		return "", nil
	}
	return n.Channel, n.Queues
}

// notifyColumn sends one NOTIFY per listed queue ($10 channel, $11 queues) as part of
// the insert statement, so enqueueing costs no extra round trip. The notifications are
// delivered when the enclosing transaction commits, and not at all if it rolls back.
// The statements reference the column so the planner cannot drop it.
const notifyColumn = `(SELECT count(*) FROM (SELECT pg_notify($10, q) FROM unnest($11::text[]) AS q) AS n) AS notified`

type notifyStatements struct {
	send, async stmt
}

func newNotifyStatements(b *builder) notifyStatements {
	return notifyStatements{
		send: b.add("send_notify", "SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q"),

		// NOTIFY makes its transaction take an xid, and so a commit record that a
		// synchronous commit waits to flush; a wake-up needs no durability, so this one
		// transaction commits asynchronously and costs no disk sync.
		async: b.add("notify_async", "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)"),
	}
}

// SendNotify announces queues on channel (delivered when db's transaction commits).
func (s *Store) SendNotify(ctx context.Context, db DBTX, n *Notify) error {
	ch, qs := n.args()
	if len(qs) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, s.notify.send.sql, ch, qs)
	return err
}

// NotifyAsync sends payload on channel in a statement of its own whose transaction
// commits asynchronously (no wait for a WAL flush): a wake-up that needs no
// durability. Pass a pool or a connection outside any transaction: inside a caller's
// transaction it would make that whole transaction commit asynchronously.
func (s *Store) NotifyAsync(ctx context.Context, db DBTX, channel, payload string) error {
	_, err := db.Exec(ctx, s.notify.async.sql, channel, payload)
	return err
}

// Listen subscribes db's session to channel. LISTEN takes no parameters, so the
// channel is quoted into the statement (and cannot be prepared).
func Listen(ctx context.Context, db DBTX, channel string) error {
	_, err := db.Exec(ctx, "LISTEN "+ident.Quote(channel))
	return err
}
