package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
)

// waitBlocked returns once the backend pid waits for an advisory lock.
func (e *env) waitBlocked(pid uint32) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if scalar[bool](e, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)`, int32(pid)) {
			return
		}
	}
	e.t.Fatalf("backend %d never waited for the aggregate's lock", pid)
}

// Two transactions write to one aggregate; the one that began first (earlier
// created_at) writes and commits last. With ordered writes the relay publishes in
// commit order and never skips the event whose created_at is older than one it
// already published.
func TestOrderedCommitOrderIsPublishOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.outbox(skiplock.Config{}, outbox.Config{Ordered: true}) // database clock
	pub := memorypub.New()
	r := e.dbRelay(pub, outbox.RelayConfig{OrderedByAggregate: true})

	txEarly, err := e.pool.Begin(e.ctx)
	e.must(err)
	defer txEarly.Rollback(e.ctx)
	_, err = txEarly.Exec(e.ctx, "SELECT 1") // the transaction (and its now()) starts here
	e.must(err)
	txLate, err := e.pool.Begin(e.ctx)
	e.must(err)
	defer txLate.Rollback(e.ctx)

	idL, err := w.Write(e.ctx, txLate, event("G", 1))
	e.must(err)
	type result struct {
		id  string
		err error
	}
	early := make(chan result, 1)
	go func() {
		id, err := w.Write(e.ctx, txEarly, event("G", 2))
		early <- result{id, err}
	}()
	e.waitBlocked(txEarly.Conn().PgConn().PID())
	if p, f := e.runOnce(r); p+f != 0 {
		t.Fatal("published uncommitted events")
	}

	e.must(txLate.Commit(e.ctx))
	res := <-early
	e.must(res.err)
	idE := res.id
	if idE <= idL {
		t.Fatalf("the write that waited got id %s, not after %s", idE, idL)
	}
	if p, _ := e.runOnce(r); p != 1 {
		t.Fatalf("published %d, want the committed event", p)
	}
	e.must(txEarly.Commit(e.ctx))
	if p, _ := e.runOnce(r); p != 1 {
		t.Fatalf("published %d, want the late-committing event", p)
	}
	msgs := pub.Messages()
	if len(msgs) != 2 || msgs[0].ID != idL || msgs[1].ID != idE {
		t.Fatalf("publish order %v, want commit order [%s %s]", ids(msgs), idL, idE)
	}
	if !msgs[1].CreatedAt.Before(msgs[0].CreatedAt) {
		t.Fatalf("test premise: the late committer began first (%v vs %v)", msgs[1].CreatedAt, msgs[0].CreatedAt)
	}
}

// Without the writer's lock the relay cannot tell: an event with a smaller id that
// commits later is published after a larger one. This is why ordered relaying needs
// ordered writes (or an application lock on the aggregate).
func TestUnorderedWritesCanBeReordered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.dbob
	pub := memorypub.New()
	r := e.dbRelay(pub, outbox.RelayConfig{OrderedByAggregate: true})
	txA, err := e.pool.Begin(e.ctx)
	e.must(err)
	defer txA.Rollback(e.ctx)
	idA, err := w.Write(e.ctx, txA, event("G", 1))
	e.must(err)
	idB, err := w.Write(e.ctx, e.pool, event("G", 2)) // commits at once, not blocked
	e.must(err)
	e.runOnce(r)
	e.must(txA.Commit(e.ctx))
	e.runOnce(r)
	msgs := pub.Messages()
	if idA >= idB || len(msgs) != 2 || msgs[0].ID != idB || msgs[1].ID != idA {
		t.Fatalf("expected the documented anomaly (B before A), got %v", ids(msgs))
	}
}

func ids(msgs []outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// An earlier event of the aggregate that is in backoff, or dead, holds back the
// later ones; other aggregates flow.
func TestOrderedBlocksBehindBackoffAndDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.writer(true)
	first, err := w.Write(e.ctx, e.pool, event("G", 1))
	e.must(err)
	second, err := w.Write(e.ctx, e.pool, event("G", 2))
	e.must(err)
	other, err := w.Write(e.ctx, e.pool, event("H", 3))
	e.must(err)
	pub := memorypub.New()
	fail := errors.New("transient")
	pub.SetFailure(func(m outbox.Message) error {
		if m.ID == first {
			return fail
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{OrderedByAggregate: true})
	if p, f := e.runOnce(r); p != 1 || f != 1 {
		t.Fatalf("published %d failed %d; want H's event published and G's first failed", p, f)
	}
	if p, f := e.runOnce(r); p+f != 0 {
		t.Fatal("claimed G's second event while the first is in backoff")
	}
	// Dead blocks too.
	pub.SetFailure(func(m outbox.Message) error {
		if m.ID == first {
			return skiplock.Permanent(fail)
		}
		return nil
	})
	e.clock.Advance(10 * time.Second)
	e.runOnce(r)
	if e.get(first).DeadAt == nil {
		t.Fatal("first not dead")
	}
	e.clock.Advance(time.Hour)
	if p, f := e.runOnce(r); p+f != 0 {
		t.Fatal("claimed G's second event behind a dead one")
	}
	pub.Recover()
	e.must(e.admin.Requeue(e.ctx, e.pool, first))
	e.runOnce(r)
	e.runOnce(r)
	got := ids(pub.Messages())
	if fmt.Sprint(got) != fmt.Sprint([]string{other, first, second}) {
		t.Fatalf("publish order %v", got)
	}
}

// Many concurrent single-event transactions on a few aggregates, relayed by three
// ordered relays: per aggregate, publication order is commit order, and every event
// is published exactly once.
func TestOrderedConcurrentWritersAndRelays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.outbox(skiplock.Config{}, outbox.Config{Ordered: true})
	_, err := e.pool.Exec(e.ctx, "CREATE TABLE "+e.q("commits")+" (agg text PRIMARY KEY, n int NOT NULL)")
	e.must(err)
	const aggs, writers, perWriter = 3, 6, 60
	for a := range aggs {
		_, err = e.pool.Exec(e.ctx, "INSERT INTO "+e.q("commits")+" VALUES ($1, 0)", fmt.Sprint("agg-", a))
		e.must(err)
	}
	pub := memorypub.New()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var relays []*outbox.Relay
	for range 3 {
		r := e.dbRelay(pub, outbox.RelayConfig{OrderedByAggregate: true, PollInterval: 10 * time.Millisecond})
		e.must(r.Start(ctx))
		relays = append(relays, r)
	}

	var mu sync.Mutex
	seq := map[string]int{} // event id -> its position in its aggregate's commit order
	var wg sync.WaitGroup
	for wr := range writers {
		wg.Go(func() {
			for i := range perWriter {
				agg := fmt.Sprint("agg-", (wr+i)%aggs)
				var id string
				var n int
				err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
					var err error
					if id, err = w.Write(ctx, tx, event(agg, i)); err != nil {
						return err
					}
					// Under the aggregate's lock: this counter's order is commit order.
					return tx.QueryRow(ctx, "UPDATE "+e.q("commits")+" SET n = n + 1 WHERE agg = $1 RETURNING n", agg).Scan(&n)
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seq[id] = n
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wctx, wcancel := context.WithTimeout(e.ctx, time.Minute)
	defer wcancel()
	if err := pub.WaitFor(wctx, writers*perWriter); err != nil {
		t.Fatalf("published %d of %d: %v", pub.Count(), writers*perWriter, err)
	}
	for _, r := range relays {
		e.must(r.Stop(e.ctx))
	}

	msgs := pub.Messages()
	if len(msgs) != writers*perWriter || len(byID(msgs)) != writers*perWriter {
		t.Fatalf("%d messages, %d distinct", len(msgs), len(byID(msgs)))
	}
	next := map[string]int{}
	for _, m := range msgs {
		next[m.AggregateID]++
		if seq[m.ID] != next[m.AggregateID] {
			t.Fatalf("aggregate %s: published commit #%d in position %d", m.AggregateID, seq[m.ID], next[m.AggregateID])
		}
	}
}
