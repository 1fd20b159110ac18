package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
)

func TestRelayPublishesThenMarks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 5, 5)
	pub := memorypub.New()
	r := e.relay(pub, outbox.RelayConfig{})

	var before outbox.Counts
	outbox.SetBeforeMark(r, func(context.Context) error {
		before = e.counts() // published but not yet marked
		return nil
	})
	if p, f := e.runOnce(r); p != 5 || f != 0 {
		t.Fatalf("published %d, failed %d", p, f)
	}
	if before.Published != 0 || before.Pending != 5 {
		t.Fatalf("events marked before the publish returned: %+v", before)
	}
	if c := e.counts(); c.Published != 5 || c.Pending != 0 {
		t.Fatalf("after mark: %+v", c)
	}
	msgs := pub.Messages()
	if pub.Calls() != 1 || len(msgs) != 5 {
		t.Fatalf("%d calls, %d messages; want one call with the whole batch", pub.Calls(), len(msgs))
	}
	for i, m := range msgs {
		if m.ID != ids[i] || m.Attempt != 1 || m.AggregateType != "order" || m.AggregateID != fmt.Sprintf("agg-%d", i) ||
			m.EventType != "order.paid" || m.Destination != "orders" || string(m.Payload) != fmt.Sprintf(`{"n": %d}`, i) ||
			m.Headers["x-tenant"] != "acme" || !m.CreatedAt.Equal(t0) {
			t.Fatalf("message %d: %+v (payload %s)", i, m, m.Payload)
		}
	}
	r0 := e.get(ids[0])
	if r0.PublishedAt == nil || !r0.PublishedAt.Equal(t0) || r0.RelayUntil != nil || r0.Attempts != 1 {
		t.Fatalf("published record: %+v", r0)
	}
	if p, f := e.runOnce(r); p+f != 0 {
		t.Fatalf("second run: %d/%d", p, f)
	}
}

func TestRelayRetriesWithBackoffThenParks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := event("1", 1)
	ev.MaxAttempts = 3
	id, err := e.ob.Write(e.ctx, e.pool, ev)
	e.must(err)
	pub := memorypub.New()
	pub.FailAll(nil)
	r := e.relay(pub, outbox.RelayConfig{RetryPolicy: skiplock.ExponentialBackoff{Base: 10 * time.Second, Jitter: -1}})

	if _, f := e.runOnce(r); f != 1 {
		t.Fatalf("first attempt: failed %d", f)
	}
	rec := e.get(id)
	if rec.Attempts != 1 || !rec.AvailableAt.Equal(t0.Add(10*time.Second)) || rec.LastError == "" || rec.DeadAt != nil || rec.RelayUntil != nil {
		t.Fatalf("after one failure: %+v", rec)
	}
	// In backoff: not claimed.
	e.clock.Advance(9 * time.Second)
	if p, f := e.runOnce(r); p+f != 0 {
		t.Fatal("claimed during backoff")
	}
	e.clock.Advance(time.Second)
	e.runOnce(r)
	if rec = e.get(id); rec.Attempts != 2 || !rec.AvailableAt.Equal(e.clock.Now().Add(20*time.Second)) {
		t.Fatalf("second backoff: %+v (now %v)", rec, e.clock.Now())
	}
	e.clock.Advance(20 * time.Second)
	e.runOnce(r)
	rec = e.get(id)
	if rec.DeadAt == nil || rec.Attempts != 3 || rec.LastError != memorypub.ErrDown.Error() {
		t.Fatalf("after max attempts: %+v", rec)
	}
	if c := e.counts(); c.Dead != 1 || c.Pending != 0 {
		t.Fatalf("counts %+v", c)
	}
	if s := r.Stats(); s.Retried != 2 || s.Dead != 1 {
		t.Fatalf("stats %+v", s)
	}
	dead, err := e.admin.List(e.ctx, e.pool, outbox.StateDead, nil, 10)
	e.must(err)
	if len(dead) != 1 || dead[0].ID != id {
		t.Fatalf("dead list %+v", dead)
	}

	// Dead events are visible and requeued by hand.
	pub.Recover()
	e.clock.Advance(time.Hour)
	if p, _ := e.runOnce(r); p != 0 {
		t.Fatal("dead event published")
	}
	e.must(e.admin.Requeue(e.ctx, e.pool, id))
	if err := e.admin.Requeue(e.ctx, e.pool, id); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("second requeue: %v", err)
	}
	if p, _ := e.runOnce(r); p != 1 {
		t.Fatal("requeued event not published")
	}
	if msgs := pub.Messages(); len(msgs) != 1 || msgs[0].Attempt != 1 {
		t.Fatalf("published %+v", msgs)
	}
}

// A publisher error wrapped with skiplock.Permanent — the one permanent-error
// wrapper of jobs and events — parks the event after its first attempt, however
// deeply it is wrapped. (The outbox used to have its own PermanentError, and a
// skiplock.Permanent error was retried 25 times over about 14 hours.)
func TestRelayPermanentErrorParksAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 4, 4)
	pub := memorypub.New()
	pub.SetFailure(func(m outbox.Message) error {
		switch m.ID {
		case ids[1]:
			return skiplock.Permanent(errors.New("422 unprocessable"))
		case ids[3]:
			return fmt.Errorf("adapter: %w", skiplock.Permanent(errors.New("410 gone")))
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{})
	if p, f := e.runOnce(r); p != 2 || f != 2 {
		t.Fatalf("published %d failed %d", p, f)
	}
	rec := e.get(ids[1])
	if rec.DeadAt == nil || rec.Attempts != 1 || rec.MaxAttempts != outbox.DefaultMaxAttempts || rec.LastError != "permanent: 422 unprocessable" {
		t.Fatalf("permanent failure: %+v", rec)
	}
	if rec := e.get(ids[3]); rec.DeadAt == nil || rec.Attempts != 1 || rec.LastError != "adapter: permanent: 410 gone" {
		t.Fatalf("wrapped permanent failure: %+v", rec)
	}
	if s := r.Stats(); s.Dead != 2 || s.Retried != 0 {
		t.Fatalf("stats %+v", s)
	}
	n, err := e.admin.RequeueDead(e.ctx, e.pool)
	e.must(err)
	pub.Recover()
	if p, _ := e.runOnce(r); n != 2 || p != 2 {
		t.Fatalf("requeued %d, published %d", n, p)
	}
}

// A relay that dies after claiming leaves its lease behind; once relay_until passes,
// another relay claims the events again. The crash-after-publish case republishes
// the same id, and the consumer's inbox drops the duplicate.
func TestRelayCrashBeforeMarkRepublishesSameID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 2, 2)
	pub := memorypub.New()
	crashing := e.relay(pub, outbox.RelayConfig{LeaseDuration: 30 * time.Second})
	outbox.SetBeforeMark(crashing, func(context.Context) error { return errors.New("relay killed") })
	if _, _, err := crashing.RunOnce(e.ctx); err == nil {
		t.Fatal("mark hook error not reported")
	}
	if pub.Count() != 2 {
		t.Fatalf("published %d before the crash", pub.Count())
	}

	healthy := e.relay(pub, outbox.RelayConfig{})
	e.clock.Advance(29 * time.Second)
	if p, f := e.runOnce(healthy); p+f != 0 {
		t.Fatal("claimed events whose lease is still live")
	}
	e.clock.Advance(time.Second)
	if p, _ := e.runOnce(healthy); p != 2 {
		t.Fatalf("after lease expiry published %d", p)
	}
	msgs := pub.Messages()
	if len(msgs) != 4 || byID(msgs)[ids[0]] != 2 || byID(msgs)[ids[1]] != 2 || msgs[2].Attempt != 2 {
		t.Fatalf("republished: %+v", msgs)
	}

	// The consumer: effects and inbox record in one transaction; duplicates skipped.
	_, err := e.pool.Exec(e.ctx, "CREATE TABLE "+e.q("effects")+" (event_id text)")
	e.must(err)
	for _, m := range msgs {
		tx, err := e.pool.Begin(e.ctx)
		e.must(err)
		first, err := e.inbox.Claim(e.ctx, tx, "billing", m.ID)
		e.must(err)
		if first {
			_, err = tx.Exec(e.ctx, "INSERT INTO "+e.q("effects")+" VALUES ($1)", m.ID)
			e.must(err)
		}
		e.must(tx.Commit(e.ctx))
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("effects")); n != 2 {
		t.Fatalf("consumer applied %d effects for 2 events", n)
	}
	// A different consumer keeps its own record.
	first, err := e.inbox.Claim(e.ctx, e.pool, "audit", ids[0])
	e.must(err)
	if !first {
		t.Fatal("second consumer saw the first one's record")
	}
}

// The last attempt's lease expiring parks the event without publishing it again.
func TestRelayLeaseExpiredOnLastAttemptParks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := event("1", 1)
	ev.MaxAttempts = 1
	id, err := e.ob.Write(e.ctx, e.pool, ev)
	e.must(err)
	pub := memorypub.New()
	crashing := e.relay(pub, outbox.RelayConfig{})
	outbox.SetBeforeMark(crashing, func(context.Context) error { return errors.New("relay killed") })
	_, _, _ = crashing.RunOnce(e.ctx)
	e.clock.Advance(31 * time.Second)
	r := e.relay(pub, outbox.RelayConfig{})
	if _, f := e.runOnce(r); f != 1 {
		t.Fatal("expired last attempt not parked")
	}
	if rec := e.get(id); rec.DeadAt == nil || pub.Count() != 1 {
		t.Fatalf("record %+v, published %d", rec, pub.Count())
	}
}

// A relay whose lease was taken over cannot write: its marks change nothing.
func TestRelayStaleMarkIsFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 3, 3)
	pub := memorypub.New()
	stale := e.relay(pub, outbox.RelayConfig{})
	fresh := e.relay(pub, outbox.RelayConfig{})
	pub.FailAll(nil) // the stale relay's publish fails; its retry mark must not land
	outbox.SetBeforeMark(stale, func(context.Context) error {
		// The stale relay stalls past its lease; another relay takes over and publishes.
		e.clock.Advance(31 * time.Second)
		pub.Recover()
		if p, _, err := fresh.RunOnce(e.ctx); err != nil || p != 3 {
			return fmt.Errorf("takeover published %d: %v", p, err)
		}
		return nil
	})
	p, f, err := stale.RunOnce(e.ctx)
	e.must(err)
	if p != 0 || f != 0 || stale.Stats().LeaseLost != 3 {
		t.Fatalf("stale relay: published %d failed %d stats %+v", p, f, stale.Stats())
	}
	for _, id := range ids {
		rec := e.get(id)
		if rec.PublishedAt == nil || rec.LastError != "" || rec.Attempts != 2 || rec.DeadAt != nil {
			t.Fatalf("stale mark changed %+v", rec)
		}
	}
}

// The broker is down for a while: events wait in backoff, attempts are counted, and
// every event is published once it returns. None is lost.
func TestRelayBrokerOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 250, 10)
	pub := memorypub.New()
	pub.FailAll(nil)
	r := e.relay(pub, outbox.RelayConfig{BatchSize: 100, RetryPolicy: skiplock.ExponentialBackoff{Base: time.Second, Max: time.Minute}})
	for range 5 { // five rounds of outage
		for {
			p, f := e.runOnce(r)
			if p != 0 {
				t.Fatal("published while down")
			}
			if f == 0 {
				break
			}
		}
		e.clock.Advance(time.Minute + 10*time.Second)
	}
	if c := e.counts(); c.Pending != 250 || c.Dead != 0 {
		t.Fatalf("during outage: %+v", c)
	}
	if rec := e.get(ids[0]); rec.Attempts != 5 {
		t.Fatalf("attempts during outage: %d", rec.Attempts)
	}
	pub.Recover()
	for {
		p, _ := e.runOnce(r)
		if p == 0 {
			break
		}
	}
	got := byID(pub.Messages())
	if len(got) != 250 {
		t.Fatalf("published %d distinct of 250", len(got))
	}
	for _, id := range ids {
		if got[id] != 1 {
			t.Fatalf("event %s published %d times", id, got[id])
		}
	}
	if c := e.counts(); c.Published != 250 {
		t.Fatalf("after outage: %+v", c)
	}
}

// Three relays run at once over events written while they run: each event is
// published exactly once (no crash, so no duplicates).
func TestRelayThreeConcurrentRelays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := memorypub.New()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var relays []*outbox.Relay
	for range 3 {
		r := e.dbRelay(pub, outbox.RelayConfig{BatchSize: 50, PollInterval: 20 * time.Millisecond})
		e.must(r.Start(ctx))
		relays = append(relays, r)
	}
	const writers, perWriter = 4, 500
	dbw := e.dbob // database clock, as the relays
	var wwg sync.WaitGroup
	for w := range writers {
		wwg.Go(func() {
			for i := 0; i < perWriter; i += 50 {
				evs := make([]outbox.Event, 50)
				for k := range evs {
					evs[k] = event(fmt.Sprintf("w%d-%d", w, k%5), i+k)
				}
				if _, err := dbw.WriteMany(ctx, e.pool, evs); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wwg.Wait()
	wctx, wcancel := context.WithTimeout(e.ctx, time.Minute)
	defer wcancel()
	if err := pub.WaitFor(wctx, writers*perWriter); err != nil {
		t.Fatalf("published %d of %d: %v", pub.Count(), writers*perWriter, err)
	}
	for _, r := range relays {
		e.must(r.Stop(e.ctx))
	}
	got := byID(pub.Messages())
	if len(got) != writers*perWriter || pub.Count() != writers*perWriter {
		t.Fatalf("%d messages, %d distinct, want %d once each", pub.Count(), len(got), writers*perWriter)
	}
	if c := e.counts(); c.Published != writers*perWriter {
		t.Fatalf("counts %+v", c)
	}
}

// Ending Start's context mid-publish is a graceful stop: it still records what was
// published, on a fresh context, and a Stop after it waits for that.
func TestRelayGracefulStopMarksInFlightBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.writeN(e.ob, 10, 2)
	pub := memorypub.New()
	ctx, cancel := context.WithCancel(e.ctx)
	pub.SetHook(func(context.Context, []outbox.Message) { cancel() }) // SIGTERM arrives during the publish
	r := e.relay(pub, outbox.RelayConfig{PollOnly: true})
	e.must(r.Start(ctx))
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(e.ctx, time.Minute)
	defer scancel()
	e.must(r.Stop(sctx))
	if c := e.counts(); c.Published != 10 || pub.Count() != 10 {
		t.Fatalf("after stop: %+v, published %d", c, pub.Count())
	}
}

// Start returns once the relay runs and refuses a second Start with ErrRelayStarted
// (which matches skiplock.ErrClientStarted too); Stop waits for the batch in flight
// to be marked, a second Stop returns nil, and a stopped relay starts again.
func TestRelayStartStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.relay(memorypub.New(), outbox.RelayConfig{PollInterval: 10 * time.Millisecond})
	e.must(r.Stop(e.ctx)) // never started: nil
	cancelled, cancel := context.WithCancel(e.ctx)
	cancel()
	if err := r.Start(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled context: %v", err)
	}
	stopped := make(chan error, 1)
	var once sync.Once
	pub := memorypub.New()
	pub.SetHook(func(ctx context.Context, _ []outbox.Message) {
		once.Do(func() {
			// Stop arrives just after the first publish: it must wait until the
			// batch is marked.
			go func() { stopped <- r.Stop(e.ctx) }()
			<-ctx.Done() // the stop has begun: it cancels the publish's context
		})
	})
	r = e.relay(pub, outbox.RelayConfig{PollInterval: 10 * time.Millisecond, PollOnly: true})
	e.writeN(e.ob, 5, 5)
	e.must(r.Start(e.ctx))
	if err := r.Start(e.ctx); !errors.Is(err, outbox.ErrRelayStarted) || !errors.Is(err, skiplock.ErrClientStarted) {
		t.Fatalf("second Start: %v, want ErrRelayStarted", err)
	}
	e.must(<-stopped)
	if s, c := r.Stats(), e.counts(); s.Published != 5 || c.Published != 5 {
		t.Fatalf("Stop returned before the batch in flight was marked: %+v, %+v", s, c)
	}
	e.must(r.Stop(e.ctx)) // stopped: nil
	// Started again, it publishes what is written next.
	e.must(r.Start(e.ctx))
	defer func() { e.must(r.Stop(e.ctx)) }()
	e.writeN(e.ob, 2, 2)
	r.Wake()
	wctx, wcancel := context.WithTimeout(e.ctx, time.Minute)
	defer wcancel()
	if err := pub.WaitFor(wctx, 7); err != nil {
		t.Fatalf("the restarted relay did not publish: %v, %+v", err, e.counts())
	}
}

// Stop with a context that ends first cancels the marks in flight and returns the
// context's error once the loops have returned.
func TestRelayStopBoundedByContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.writeN(e.ob, 3, 3)
	r := e.relay(memorypub.New(), outbox.RelayConfig{PollOnly: true, PollInterval: 10 * time.Millisecond})
	marking := make(chan struct{})
	outbox.SetBeforeMark(r, func(ctx context.Context) error {
		close(marking)
		<-ctx.Done() // a mark that hangs until it is cancelled
		return ctx.Err()
	})
	e.must(r.Start(e.ctx))
	<-marking
	sctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if err := r.Stop(sctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with an ended context: %v, want context.Canceled", err)
	}
	if c := e.counts(); c.Published != 0 {
		t.Fatalf("a cancelled mark recorded: %+v", c)
	}
	e.must(r.Stop(e.ctx)) // stopped: nil
}

// Cancellation during a publish that then fails gives the events back without
// spending their attempt.
func TestRelayStopReleasesUnpublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 3, 3)
	pub := memorypub.New()
	ctx, cancel := context.WithCancel(e.ctx)
	pub.SetFailure(func(outbox.Message) error { cancel(); return context.Canceled })
	r := e.relay(pub, outbox.RelayConfig{})
	if _, f, err := r.RunOnce(ctx); err != nil || f != 3 {
		t.Fatalf("failed %d, err %v", f, err)
	}
	rec := e.get(ids[0])
	if rec.Attempts != 0 || rec.RelayUntil != nil || !rec.AvailableAt.Equal(t0) || r.Stats().Released != 3 {
		t.Fatalf("released record %+v stats %+v", rec, r.Stats())
	}
}

func TestRelayConfigValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, cfg := range []outbox.RelayConfig{{BatchSize: -1}, {BatchSize: 10001}, {LeaseDuration: -1}, {Concurrency: -2},
		{RetryPolicy: (*skiplock.ExponentialBackoff)(nil)}, {ListenURL: "postgres://db/app", PollOnly: true},
		{ListenURL: "postgres://app:s3cret@db:notaport/app"}} {
		_, err := e.ob.NewRelay(memorypub.New(), cfg)
		if !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("%+v: %v", cfg, err)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%+v: the error shows the password: %v", cfg, err)
		}
	}
}

// A relay on a schema that holds no skiplock tables (a misspelt Config.Schema) stops
// at once with ErrNotMigrated naming the schema, instead of logging a failed claim at
// every poll for ever.
func TestRelayRefusesAnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := skiplock.NewClient(e.pool, skiplock.Config{Schema: e.schema + "_misspelt"})
	e.must(err)
	t.Cleanup(c.Close)
	ob, err := outbox.New(c, outbox.Config{})
	e.must(err)
	r, err := ob.NewRelay(memorypub.New(), outbox.RelayConfig{})
	e.must(err)
	if err := r.Start(e.ctx); !errors.Is(err, skiplock.ErrNotMigrated) || !strings.Contains(err.Error(), e.schema+"_misspelt") {
		t.Fatalf("Start on an unmigrated schema: %v", err)
	}
	e.must(r.Stop(e.ctx)) // not running: nil
	if err := c.CheckSchema(e.ctx); !errors.Is(err, skiplock.ErrNotMigrated) {
		t.Fatalf("CheckSchema on an unmigrated schema: %v", err)
	}
	migrated, err := skiplock.NewClient(e.pool, skiplock.Config{Schema: e.schema})
	e.must(err)
	t.Cleanup(migrated.Close)
	if err := migrated.CheckSchema(e.ctx); err != nil {
		t.Fatalf("CheckSchema on the migrated schema: %v", err)
	}
}
