package skiplock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/store"
)

// Client enqueues jobs, administers them, and — with Queues configured and Start
// called — works them. It is safe for concurrent use.
type Client struct {
	pool     *pgxpool.Pool
	cfg      Config
	store    *store.Store
	workers  *Workers
	log      *slog.Logger
	failures *failures
	maint    *maint.Runner
	channel  string
	metrics  counters

	notifyMu   sync.Mutex
	lastNotify map[string]time.Time
	trailing   map[string]bool // a trailing NOTIFY is scheduled
	skipped    map[string]int  // enqueues in flight that rely on the trailing NOTIFY
	due        map[string]bool // the window ended while some of them were in flight
	notifying  int             // own inserts in flight that carry a NOTIFY inside their transaction
	ownFlight  int             // own inserts in flight, whatever their NOTIFY
	sendNotify func(queue string)
	bg         sync.WaitGroup // trailing notifications

	events eventHub

	rt *runtime // set while started
	mu sync.Mutex
}

// NewClient returns a client on pool. It does not touch the database; run the
// migrations first (skiplock migrate up, or Migrate).
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, invalid("pool", "must not be nil")
	}
	full, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	st, err := store.New(full.Schema)
	if err != nil {
		return nil, invalid("schema", "%v", err)
	}
	c := &Client{
		pool: pool, cfg: full, store: st, workers: full.Workers, log: full.Logger,
		channel: Channel(full.Schema), lastNotify: map[string]time.Time{}, trailing: map[string]bool{},
		skipped: map[string]int{}, due: map[string]bool{},
		failures: newFailures(full.Logger),
	}
	c.maint = c.newRunner()
	c.sendNotify = c.sendTrailing
	return c, nil
}

// Channel returns the NOTIFY channel of a schema's job queue.
func Channel(schema string) string { return ident.Channel(schema, "jobs") }

// Schema returns the client's schema name.
func (c *Client) Schema() string { return c.cfg.Schema }

// ID returns the client's worker id.
func (c *Client) ID() string { return c.cfg.ID }

// MaxPayloadBytes returns the payload limit the client enforces at enqueue (the
// outbox applies the same to events).
func (c *Client) MaxPayloadBytes() int { return c.cfg.MaxPayloadBytes }

// Clock returns the client's clock; nil means the database's now().
func (c *Client) Clock() Clock { return c.cfg.Clock }

// Pool returns the client's pool.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// notifyQueues returns the NOTIFY an insert should carry, and done, to call once the
// insert's statement has returned. An insert announces a queue unless this process
// announced it less than NotifyCoalesce ago; then one trailing notification follows
// at the window's end. own says the insert commits by itself (an autocommit statement
// on the client's pool): the trailing notification then also waits until every such
// insert that skipped its own has returned, committed or not. (Sent before such an
// insert committed, it would wake the producers too early: their claims would miss
// the job, and nothing would wake them again until their next poll.) An insert in the
// caller's transaction cannot be waited for — its commit is the caller's — so one
// that commits after its window's trailing notification relies on the next
// notification or poll (docs/runtime.md); carrying a NOTIFY in every such
// transaction instead serialises their commits on NOTIFY's lock (the chaos
// suite's mvcc-pin scenario, 800 transactional enqueues a second, saw its baseline
// pickup p99 rise from about 40 to 56 ms).
//
// An own insert that announces queues carries the NOTIFY inside its transaction only
// while no other such insert of this client is in flight; otherwise it announces them
// after its commit, in an asynchronously committed transaction of its own, so that it
// does not wait on NOTIFY's lock for the other's disk sync (store.Notify.AfterCommit).
//
// An own insert with no other own insert in flight is not coalesced: it carries its
// NOTIFY and opens a window for the inserts that overlap it. Coalescing saves
// concurrent commits from queueing on NOTIFY's lock; one insert at a time has nobody
// of its own to queue behind, and skipping its NOTIFY only bought a trailing one, a
// transaction of its own on another connection (sequential enqueues, W1, sent one for
// every 4–5 inserts).
func (c *Client) notifyQueues(queues []string, own bool) (notify *store.Notify, done func()) {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	send, done := queues, func() {}
	switch {
	case c.cfg.NotifyCoalesce < 0:
	case own && c.ownFlight == 0:
		now := hostclock.Now()
		for _, q := range queues {
			c.lastNotify[q] = now
		}
	default:
		send, done = c.coalesceLocked(queues, own)
	}
	if own {
		done = c.countLocked(&c.ownFlight, done)
	}
	if len(send) == 0 {
		return nil, done
	}
	n := &store.Notify{Channel: c.channel, Queues: send}
	switch {
	case !own:
	case c.notifying > 0:
		n.AfterCommit = true
	default:
		done = c.countLocked(&c.notifying, done)
	}
	return n, done
}

// countLocked counts one more insert in flight on *n and returns done extended to
// count it off. Called with notifyMu held; n is one of its counters.
func (c *Client) countLocked(n *int, done func()) func() {
	*n++
	return func() {
		c.notifyMu.Lock()
		*n--
		c.notifyMu.Unlock()
		done()
	}
}

// coalesceLocked returns the queues an insert announces itself (see notifyQueues)
// and done. Called with notifyMu held.
func (c *Client) coalesceLocked(queues []string, own bool) (send []string, done func()) {
	now := hostclock.Now()
	var skipped []string
	for _, q := range queues {
		last, ok := c.lastNotify[q]
		if !ok || now.Sub(last) >= c.cfg.NotifyCoalesce {
			c.lastNotify[q] = now
			send = append(send, q)
			continue
		}
		if own {
			skipped = append(skipped, q)
			c.skipped[q]++
		}
		if !c.trailing[q] {
			c.trailing[q] = true
			wait := c.cfg.NotifyCoalesce - now.Sub(last)
			c.bg.Add(1)
			time.AfterFunc(wait, func() { defer c.bg.Done(); c.trailingDue(q) })
		}
	}
	done = func() {}
	if len(skipped) > 0 {
		done = func() { c.skippedDone(skipped) }
	}
	return send, done
}

// txNotify is the NOTIFY of an insert in a transaction the caller commits (flows and
// batches; see notifyQueues).
func (c *Client) txNotify(queues []string) *store.Notify {
	n, _ := c.notifyQueues(queues, false)
	return n
}

// trailingDue is the end of queue's window: its trailing NOTIFY goes out now, or
// when the last insert that relies on it returns.
func (c *Client) trailingDue(queue string) {
	c.notifyMu.Lock()
	if c.skipped[queue] > 0 {
		c.due[queue] = true
		c.notifyMu.Unlock()
		return
	}
	c.fireLocked(queue)
	c.notifyMu.Unlock()
	c.sendNotify(queue)
}

// fireLocked records that queue's trailing NOTIFY goes out now, which opens its
// next window. Called with notifyMu held.
func (c *Client) fireLocked(queue string) {
	c.trailing[queue] = false
	c.lastNotify[queue] = hostclock.Now()
}

// skippedDone records that inserts which skipped their NOTIFY for queues have
// returned, and sends the trailing NOTIFYs that were waiting for them.
func (c *Client) skippedDone(queues []string) {
	var send []string
	c.notifyMu.Lock()
	for _, q := range queues {
		if c.skipped[q]--; c.skipped[q] == 0 {
			delete(c.skipped, q)
			if c.due[q] {
				delete(c.due, q)
				c.fireLocked(q)
				send = append(send, q)
			}
		}
	}
	c.notifyMu.Unlock()
	for _, q := range send {
		c.bg.Add(1)
		go func() { defer c.bg.Done(); c.sendNotify(q) }()
	}
}

// sendTrailing sends a trailing NOTIFY for queue, committed asynchronously.
func (c *Client) sendTrailing(queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.store.NotifyAsync(ctx, c.pool, c.channel, queue); err != nil {
		c.log.Debug("trailing notify failed; polling will pick the jobs up", "queue", queue, "error", err)
	}
}

// Close waits for background notifications. Call it when done with a client that
// was never started (Stop does it for a started client).
func (c *Client) Close() { c.bg.Wait() }

// ErrNotMigrated is matched by errors from a database whose schema lacks skiplock's
// tables: run `skiplock migrate up` (or Migrate) first.
var ErrNotMigrated = errors.New("skiplock: schema not migrated (is the schema name right? if so, run `skiplock migrate up`)")

// ErrSchemaNewer is returned by Start when the schema was migrated by a newer
// skiplock than this build: upgrade the build (or point it at another schema).
var ErrSchemaNewer = errors.New("skiplock: schema is newer than this skiplock")

// wrapPgError turns PostgreSQL errors a caller can act on into typed errors.
func wrapPgError(err error) error {
	return pgerr.Wrap(err, func(reason string) error { return invalid("payload", "%s", reason) }, ErrNotMigrated)
}
