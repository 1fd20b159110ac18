package store

// Notifications: LISTEN/NOTIFY only shortens latency (polling guarantees progress),
// so every statement here is cheap and none needs durability.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/ident"
)

// Notify names the channel and the queues an insert announces.
type Notify struct {
	Channel string
	Queues  []string
	// AfterCommit announces the queues after the insert's commit, in a transaction of
	// their own (see withNotifyAfter), instead of within the insert's. It applies only
	// to an insert on the pool, which commits by itself.
	AfterCommit bool
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
		async: b.add("notify_async", `SELECT set_config('synchronous_commit', 'off', true),
  (SELECT count(*) FROM (SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q) AS n)`),
	}
}

// SendNotify announces queues on channel, delivered when db's transaction commits. On
// the pool the NOTIFY is a transaction of its own, so it commits asynchronously (see
// NotifyAsync).
func (s *Store) SendNotify(ctx context.Context, db DBTX, n *Notify) error {
	ch, qs := n.args()
	if len(qs) == 0 {
		return nil
	}
	sql := s.notify.send.sql
	if _, pooled := db.(*pgxpool.Pool); pooled {
		sql = s.notify.async.sql
	}
	_, err := db.Exec(ctx, sql, ch, qs)
	return err
}

// NotifyAsync sends payload on channel in a statement of its own whose transaction
// commits asynchronously (no wait for a WAL flush): a wake-up that needs no
// durability. Pass a pool or a connection outside any transaction: inside a caller's
// transaction it would make that whole transaction commit asynchronously.
func (s *Store) NotifyAsync(ctx context.Context, db DBTX, channel, payload string) error {
	_, err := db.Exec(ctx, s.notify.async.sql, channel, []string{payload})
	return err
}

// notifyAfter says whether an insert on db announces n after its commit rather than
// within it (see withNotifyAfter): when n asks for it, db is the pool (so the insert
// commits by itself), and there is something to announce.
func notifyAfter(db DBTX, n *Notify) (*pgxpool.Pool, bool) {
	p, ok := db.(*pgxpool.Pool)
	return p, ok && n != nil && n.AfterCommit && len(n.Queues) > 0
}

// queryInsert runs an insert statement whose $10 and $11 carry n's channel and
// queues (notifyColumn), and collects its rows: with the NOTIFY inside the statement's
// transaction, or announced after its commit when notifyAfter says so.
func queryInsert[T any](ctx context.Context, s *Store, db DBTX, n *Notify, collect func(pgx.Rows, error) (T, error), sql string, args ...any) (T, error) {
	if pool, after := notifyAfter(db, n); after {
		args[9], args[10] = "", []string(nil) // no NOTIFY inside: it follows the commit
		return withNotifyAfter(ctx, s, pool, n, collect, sql, args...)
	}
	return collect(db.Query(ctx, sql, args...))
}

// withNotifyAfter runs sql, an insert that carries no NOTIFY, in a transaction of its
// own, and announces n in a second transaction that commits asynchronously — both in
// one pipeline, so in one round trip: BEGIN; sql; COMMIT; NOTIFY.
//
// Why. A notifying commit holds PostgreSQL's database-wide NOTIFY lock from before
// its commit record until that record is flushed, so notifying commits cannot share
// a disk sync: each waits for the previous one's, and concurrent enqueuers queue on
// that lock. Committed asynchronously, the NOTIFY's transaction holds the lock only
// briefly, and the inserts' commits group freely (docs/benchmarks-archive.md,
// "Concurrent enqueues: the NOTIFY after the commit"). The listener is woken once the
// job's commit is durable, as before.
//
// Why not always. The second transaction costs every enqueue an xid and a commit
// record, which a lone enqueue would wait for before its job can start. So the
// client asks for it only while another of its own inserts carrying the NOTIFY
// inside its transaction is in flight — the case where the lock would be waited for.
//
// A caller's transaction (EnqueueTx) cannot do this: its commit is the caller's, so
// its NOTIFY stays inside it.
//
// Once COMMIT has succeeded the insert is durable and its result is returned whatever
// becomes of the NOTIFY: a lost wake-up costs at most a poll interval, a reported
// failure would invite a second enqueue.
func withNotifyAfter[T any](ctx context.Context, s *Store, pool *pgxpool.Pool, n *Notify, collect func(pgx.Rows, error) (T, error), sql string, args ...any) (T, error) {
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue(sql, args...)
	batch.Queue("COMMIT")
	batch.Queue(s.notify.async.sql, n.Channel, n.Queues)
	br := pool.SendBatch(ctx, batch)
	defer br.Close()
	var zero T
	if _, err := br.Exec(); err != nil {
		return zero, fmt.Errorf("beginning: %w", err)
	}
	out, err := collect(br.Query())
	if err != nil {
		return zero, err
	}
	if _, err := br.Exec(); err != nil {
		return zero, fmt.Errorf("committing: %w", err)
	}
	_, _ = br.Exec() // the wake-up: best effort (above)
	return out, nil
}

// Listen subscribes db's session to channel. LISTEN takes no parameters, so the
// channel is quoted into the statement (and cannot be prepared).
func Listen(ctx context.Context, db DBTX, channel string) error {
	_, err := db.Exec(ctx, "LISTEN "+ident.Quote(channel))
	return err
}
