package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// Coalescer decides which NOTIFY each enqueue carries, so that concurrent commits do
// not queue on NOTIFY's lock, and sends the trailing notifications a coalescing
// window owes. A client has one from its creation (enqueueing needs no Start).
type Coalescer struct {
	window  time.Duration // NotifyCoalesce; negative: every insert notifies
	channel string
	store   *store.Store
	pool    *pgxpool.Pool
	log     *slog.Logger

	notifyMu   sync.Mutex
	lastNotify map[string]time.Time
	trailing   map[string]bool // a trailing NOTIFY is scheduled
	skipped    map[string]int  // enqueues in flight that rely on the trailing NOTIFY
	due        map[string]bool // the window ended while some of them were in flight
	notifying  int             // own inserts in flight that carry a NOTIFY inside their transaction
	ownFlight  int             // own inserts in flight, whatever their NOTIFY
	sendNotify func(queue string)
	bg         sync.WaitGroup // trailing notifications
}

// NewCoalescer returns the coalescer of a schema's NOTIFY channel: window is
// Config.NotifyCoalesce; st and pool send the trailing notifications.
func NewCoalescer(window time.Duration, channel string, st *store.Store, pool *pgxpool.Pool, log *slog.Logger) *Coalescer {
	c := &Coalescer{window: window, channel: channel, store: st, pool: pool, log: log,
		lastNotify: map[string]time.Time{}, trailing: map[string]bool{}, skipped: map[string]int{}, due: map[string]bool{}}
	c.sendNotify = c.sendTrailing
	return c
}

// SetChannel makes the coalescer announce on channel (tests).
func (c *Coalescer) SetChannel(channel string) { c.channel = channel }

// Queues returns the NOTIFY an insert should carry, and done, to call once the
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
// transaction instead serialises their commits on NOTIFY's lock, which raises the
// pickup latency of every job (the chaos suite's mvcc-pin scenario measured it;
// docs/benchmarks-archive.md, "Concurrent enqueues: the NOTIFY after the commit").
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
// transaction of its own on another connection (sequential enqueues sent one for
// every few inserts).
func (c *Coalescer) Queues(queues []string, own bool) (notify *store.Notify, done func()) {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	send, done := queues, func() {}
	switch {
	case c.window < 0:
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
func (c *Coalescer) countLocked(n *int, done func()) func() {
	*n++
	return func() {
		c.notifyMu.Lock()
		*n--
		c.notifyMu.Unlock()
		done()
	}
}

// coalesceLocked returns the queues an insert announces itself (see Queues)
// and done. Called with notifyMu held.
func (c *Coalescer) coalesceLocked(queues []string, own bool) (send []string, done func()) {
	now := hostclock.Now()
	var skipped []string
	for _, q := range queues {
		last, ok := c.lastNotify[q]
		if !ok || now.Sub(last) >= c.window {
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
			wait := c.window - now.Sub(last)
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

// Tx is the NOTIFY of an insert in a transaction the caller commits (flows and
// batches; see Queues).
func (c *Coalescer) Tx(queues []string) *store.Notify {
	n, _ := c.Queues(queues, false)
	return n
}

// trailingDue is the end of queue's window: its trailing NOTIFY goes out now, or
// when the last insert that relies on it returns.
func (c *Coalescer) trailingDue(queue string) {
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
func (c *Coalescer) fireLocked(queue string) {
	c.trailing[queue] = false
	c.lastNotify[queue] = hostclock.Now()
}

// skippedDone records that inserts which skipped their NOTIFY for queues have
// returned, and sends the trailing NOTIFYs that were waiting for them.
func (c *Coalescer) skippedDone(queues []string) {
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
func (c *Coalescer) sendTrailing(queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.store.NotifyAsync(ctx, c.pool, c.channel, queue); err != nil {
		c.log.Debug("trailing notify failed; polling will pick the jobs up", "queue", queue, "error", err)
	}
}

// Wait waits for the trailing notifications scheduled so far.
func (c *Coalescer) Wait() { c.bg.Wait() }
