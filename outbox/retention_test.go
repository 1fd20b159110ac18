package outbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
)

func TestPrunePublishedAndDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 2500, 10)
	pub := memorypub.New()
	pub.SetFailure(func(m outbox.Message) error {
		if m.ID == ids[0] {
			return skiplock.Permanent(errors.New("rejected"))
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{BatchSize: 1000})
	for {
		if p, f := e.runOnce(r); p+f == 0 {
			break
		}
	}
	e.writeN(e.ob, 5, 1) // unpublished: never pruned

	e.clock.Advance(7*24*time.Hour - time.Second)
	res, err := e.admin.Prune(e.ctx, e.pool, outbox.Retention{})
	e.must(err)
	if res.Published != 0 {
		t.Fatalf("pruned %d inside the window", res.Published)
	}
	e.clock.Advance(2 * time.Second)
	res, err = e.admin.Prune(e.ctx, e.pool, outbox.Retention{BatchSize: 1000})
	e.must(err)
	if res.Published != 2499 || res.Dead != 0 {
		t.Fatalf("pruned %+v, want 2499 published and dead kept", res)
	}
	res, err = e.admin.Prune(e.ctx, e.pool, outbox.Retention{Published: -1, Dead: 24 * time.Hour})
	e.must(err)
	if res.Published != 0 || res.Dead != 1 {
		t.Fatalf("pruned %+v, want the dead event", res)
	}
	if c := e.counts(); c.Pending != 5 || c.Published != 0 || c.Dead != 0 {
		t.Fatalf("left %+v", c)
	}
}

func TestInboxClaimAndPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		first, err := e.inbox.Claim(e.ctx, e.pool, "billing", id)
		e.must(err)
		if !first {
			t.Fatalf("%s not first", id)
		}
	}
	// Rolled back claims do not count.
	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	first, err := e.inbox.Claim(e.ctx, tx, "billing", "d")
	e.must(err)
	if !first {
		t.Fatal("d not first inside its transaction")
	}
	e.must(tx.Rollback(e.ctx))
	if first, err = e.inbox.Claim(e.ctx, e.pool, "billing", "d"); err != nil || !first {
		t.Fatalf("claim after rollback: %v %v", first, err)
	}
	if first, _ = e.inbox.Claim(e.ctx, e.pool, "billing", "a"); first {
		t.Fatal("duplicate claimed as first")
	}
	if _, err := e.inbox.Claim(e.ctx, e.pool, "", "a"); !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("empty consumer: %v", err)
	}
	e.clock.Advance(48 * time.Hour)
	if _, err := e.inbox.Claim(e.ctx, e.pool, "billing", "e"); err != nil {
		t.Fatal(err)
	}
	n, err := e.inbox.Prune(e.ctx, e.pool, 24*time.Hour, 2)
	e.must(err)
	if n != 4 {
		t.Fatalf("pruned %d inbox rows, want 4", n)
	}
}
