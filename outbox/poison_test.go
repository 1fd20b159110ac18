package outbox_test

// Poison: nothing one event or one publisher result can do may stop a relay or hold
// up the other events of its batch. Each test puts one bad thing among good events
// and checks that the good ones are published and the bad one ends in the state
// RunOnce documents.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock/internal/safetext"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
)

// nilDerefError's Error method dereferences a nil pointer, as many hand-written
// error types do when returned as a typed nil.
type nilDerefError struct{ msg *string }

func (e *nilDerefError) Error() string { return *e.msg }

// panickyAsError panics when errors.As or errors.Is inspects it.
type panickyAsError struct{}

func (panickyAsError) Error() string { return "as panics" }
func (panickyAsError) As(any) bool   { panic("As exploded") }
func (panickyAsError) Is(error) bool { panic("Is exploded") }

// failing returns a memorypub failure function that fails the events in bad with
// the given errors and accepts every other event.
func failing(bad map[string]error) func(outbox.Message) error {
	return func(m outbox.Message) error { return bad[m.ID] }
}

// drain runs the relay until a batch claims nothing, returning the last error.
func (e *env) drain(r *outbox.Relay) (published, failed int, last error) {
	e.t.Helper()
	for range 100 {
		p, f, err := r.RunOnce(e.ctx)
		published, failed = published+p, failed+f
		if err != nil {
			last = err
		}
		if p+f == 0 && err == nil {
			return
		}
	}
	e.t.Fatal("relay did not drain in 100 batches")
	return
}

func checkStorable(t *testing.T, what, s string) {
	t.Helper()
	if s == "" || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 || len(s) > safetext.MaxBytes {
		t.Errorf("%s: last_error not storable text: %.100q (%d bytes)", what, s, len(s))
	}
}

// Error values whose text is hostile or whose methods panic are recorded as safe
// text; the relay neither crashes nor stalls, and the good events are published.
// Before the fix, an Error method that panicked (or a panicking As/Is) took the
// relay's goroutine, and with it the process, down.
func TestPoisonPublisherErrorValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 40, 40)
	var typedNil *nilDerefError
	bad := map[string]error{
		ids[3]:  errors.New("gateway said \xff\xfe\x00 and stopped"),
		ids[7]:  errors.New(strings.Repeat("megabytes of error ", 1<<16)),
		ids[11]: &nilDerefError{},
		ids[13]: typedNil, // a non-nil error interface holding a nil pointer
		ids[17]: panickyAsError{},
		ids[19]: fmt.Errorf("wrapped: %w", &nilDerefError{}),
	}
	pub := memorypub.New()
	pub.SetFailure(failing(bad))
	r := e.relay(pub, outbox.RelayConfig{})

	p, f, err := r.RunOnce(e.ctx)
	e.must(err)
	if p != 40-len(bad) || f != len(bad) {
		t.Fatalf("published %d failed %d, want %d and %d", p, f, 40-len(bad), len(bad))
	}
	for id := range bad {
		rec := e.get(id)
		if rec.PublishedAt != nil || rec.DeadAt != nil || rec.Attempts != 1 || !rec.AvailableAt.After(t0) {
			t.Errorf("%s: want a scheduled retry, got %+v", id, rec)
		}
		checkStorable(t, id, rec.LastError)
	}
	if got := e.get(ids[3]).LastError; got != "gateway said \uFFFD\uFFFD and stopped" {
		t.Errorf("invalid UTF-8 and NUL: %q", got)
	}
	if got := e.get(ids[11]).LastError; !strings.Contains(got, "panicked") {
		t.Errorf("panicking Error method: %q", got)
	}
	if got := e.get(ids[17]).LastError; !strings.Contains(got, "panicked") {
		t.Errorf("panicking As: %q", got)
	}
}

// A Publisher that panics with a value that is not an error, or that returns no
// result slice at all, fails its whole batch with a retryable error; the next batch
// is published normally.
func TestPoisonPublisherPanicsAndNilResults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context, msgs []outbox.Message) []error
		want string
	}{
		{"panic with a struct", func(context.Context, []outbox.Message) []error {
			panic(struct{ Code int }{Code: 7})
		}, "panicked"},
		{"panic with nil", func(context.Context, []outbox.Message) []error { panic(nil) }, "panicked"},
		{"panic with an error whose Error panics", func(context.Context, []outbox.Message) []error {
			panic(&nilDerefError{})
		}, "panicked"},
		{"nil result", func(context.Context, []outbox.Message) []error { return nil }, "returned 0 results for 5 messages"},
		{"short result", func(context.Context, []outbox.Message) []error { return make([]error, 2) }, "returned 2 results for 5 messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ids := e.writeN(e.ob, 5, 5)
			r := e.relay(funcPublisher(tc.fn), outbox.RelayConfig{})
			p, f, err := r.RunOnce(e.ctx)
			if err != nil || p != 0 || f != 5 {
				t.Fatalf("published %d failed %d err %v, want 0, 5, nil", p, f, err)
			}
			for _, id := range ids {
				rec := e.get(id)
				if rec.Attempts != 1 || rec.DeadAt != nil || !strings.Contains(rec.LastError, tc.want) {
					t.Fatalf("event after a broken publisher: %+v", rec)
				}
				checkStorable(t, id, rec.LastError)
			}
			// The relay is fine: once the events are due, a good publisher takes them.
			e.clock.Advance(10 * time.Second)
			good := memorypub.New()
			if p, _ := e.runOnce(e.relay(good, outbox.RelayConfig{})); p != 5 || good.Count() != 5 {
				t.Fatalf("after the broken batch: published %d", p)
			}
		})
	}
}

type funcPublisher func(ctx context.Context, msgs []outbox.Message) []error

func (f funcPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	return f(ctx, msgs)
}
func (funcPublisher) Close() error { return nil }

// A Publisher that rewrites the messages it was given (here: every id, to text that
// is not a uuid) changes nothing the relay records. Before the fix the relay read
// the ids back from the slice, the mark statement failed on the bad uuid, and the
// batch was never marked: republished after every lease, forever.
func TestPoisonPublisherMutatesMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 20, 4)
	r := e.relay(funcPublisher(func(_ context.Context, msgs []outbox.Message) []error {
		for i := range msgs {
			msgs[i].ID, msgs[i].Attempt = "not-a-uuid", -1
		}
		return make([]error, len(msgs))
	}), outbox.RelayConfig{})
	p, f, err := r.RunOnce(e.ctx)
	if err != nil || p != 20 || f != 0 {
		t.Fatalf("published %d failed %d err %v, want 20, 0, nil", p, f, err)
	}
	for _, id := range ids {
		if rec := e.get(id); rec.PublishedAt == nil {
			t.Fatalf("event %s not marked published: %+v", id, rec)
		}
	}
}

// A RetryPolicy that panics for one attempt number does not take the relay down;
// the event is retried after the poll interval.
func TestPoisonRetryPolicyPanics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 3, 3)
	pub := memorypub.New()
	pub.SetFailure(failing(map[string]error{ids[1]: errors.New("try again")}))
	r := e.relay(pub, outbox.RelayConfig{PollInterval: 7 * time.Second, RetryPolicy: panickyPolicy{}})
	p, f, err := r.RunOnce(e.ctx)
	if err != nil || p != 2 || f != 1 {
		t.Fatalf("published %d failed %d err %v", p, f, err)
	}
	if rec := e.get(ids[1]); !rec.AvailableAt.Equal(t0.Add(7*time.Second)) || !strings.Contains(rec.LastError, "panicked") {
		t.Fatalf("event after a panicking RetryPolicy: %+v", rec)
	}
}

type panickyPolicy struct{}

func (panickyPolicy) Delay(int) time.Duration { panic("no delay for you") }

// addConstraint adds a CHECK constraint to the test schema's outbox, as an operator
// might, that one outcome of the batch violates.
func (e *env) addConstraint(name, check string) {
	e.t.Helper()
	_, err := e.pool.Exec(e.ctx, "ALTER TABLE "+e.q("outbox")+" ADD CONSTRAINT "+name+" CHECK ("+check+") NOT VALID")
	e.must(err)
}

// 1,000 good events and one whose publisher error the database refuses to store (a
// constraint on last_error): the mark statement is split, the 1,000 are marked
// published, and the poison event is scheduled for retry with the plain fallback
// text. Before the fix the whole batch's mark failed, every time: nothing was ever
// marked, and the 1,000 events were republished after every lease.
func TestPoisonMarkRefusedTextIsSplitOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 1001, 50)
	poison := ids[500]
	e.addConstraint("no_poison_text", "last_error IS NULL OR last_error NOT LIKE '%poison%'")
	pub := memorypub.New()
	pub.SetFailure(failing(map[string]error{poison: errors.New("poison pill from the gateway")}))
	r := e.relay(pub, outbox.RelayConfig{BatchSize: 2000})

	p, f, err := r.RunOnce(e.ctx)
	if err != nil || p != 1000 || f != 1 {
		t.Fatalf("published %d failed %d err %v, want 1000, 1, nil", p, f, err)
	}
	if c := e.counts(); c.Published != 1000 || c.Pending != 1 {
		t.Fatalf("counts %+v", c)
	}
	rec := e.get(poison)
	if rec.PublishedAt != nil || rec.DeadAt != nil || rec.RelayUntil != nil || rec.Attempts != 1 ||
		!rec.AvailableAt.Equal(t0.Add(10*time.Second)) || !strings.Contains(rec.LastError, "SQLSTATE 23514") {
		t.Fatalf("poison event: %+v", rec)
	}
	if s := r.Stats(); s.Published != 1000 || s.Retried != 1 || s.Errors != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// An outcome the database refuses whatever its text (here: marking one event
// published) is left unrecorded: the others are marked, RunOnce reports the refused
// one, and the event keeps its lease until it expires and is claimed again — as
// after a crash, so it is published again once the cause is gone.
func TestPoisonMarkRefusedForGoodLeavesEventLeased(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 1001, 50)
	poison := ids[321]
	e.addConstraint("never_publish_one", fmt.Sprintf("id <> '%s' OR published_at IS NULL", poison))
	pub := memorypub.New()
	r := e.relay(pub, outbox.RelayConfig{BatchSize: 2000})

	p, f, err := r.RunOnce(e.ctx)
	if p != 1000 || f != 0 || err == nil || !strings.Contains(err.Error(), poison) || !strings.Contains(err.Error(), "23514") {
		t.Fatalf("published %d failed %d err %v, want 1000, 0 and an error naming %s", p, f, err, poison)
	}
	rec := e.get(poison)
	if rec.PublishedAt != nil || rec.RelayUntil == nil || rec.Attempts != 1 {
		t.Fatalf("refused event: want it still leased, got %+v", rec)
	}
	if c := e.counts(); c.Published != 1000 || c.Pending != 1 {
		t.Fatalf("counts %+v", c)
	}
	if s := r.Stats(); s.Published != 1000 || s.Errors != 1 || s.LeaseLost != 0 {
		t.Fatalf("stats %+v", s)
	}

	// Still leased: not claimed. Once the lease expires and the cause is fixed, it
	// is published again (at least once).
	if p, f, _ := r.RunOnce(e.ctx); p+f != 0 {
		t.Fatal("claimed an event under a live lease")
	}
	_, err = e.pool.Exec(e.ctx, "ALTER TABLE "+e.q("outbox")+" DROP CONSTRAINT never_publish_one")
	e.must(err)
	e.clock.Advance(31 * time.Second)
	if p, f := e.runOnce(r); p != 1 || f != 0 {
		t.Fatalf("after the lease: published %d failed %d", p, f)
	}
	if n := byID(pub.Messages())[poison]; n != 2 {
		t.Fatalf("poison event published %d times, want 2", n)
	}
}

// Several refused outcomes, and a constraint every row violates, cost a bounded
// number of statements and still record everything that can be recorded.
func TestPoisonMarkRefusedEverywhereIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 300, 10)
	e.addConstraint("nothing_published", "published_at IS NULL")
	r := e.relay(memorypub.New(), outbox.RelayConfig{BatchSize: 300})
	p, f, err := r.RunOnce(e.ctx)
	if p != 0 || f != 0 || err == nil || !strings.Contains(err.Error(), "not split further") {
		t.Fatalf("published %d failed %d err %v", p, f, err)
	}
	for _, id := range ids[:3] {
		if rec := e.get(id); rec.RelayUntil == nil || rec.PublishedAt != nil {
			t.Fatalf("event %s: %+v", id, rec)
		}
	}
}

// A drained relay with poison in every batch still publishes everything else: the
// refused-text event is retried until parked, never blocking the rest.
func TestPoisonDrainsAroundRepeatedPoison(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := event("p", 0)
	ev.MaxAttempts = 2
	poison, err := e.ob.Write(e.ctx, e.pool, ev)
	e.must(err)
	ids := e.writeN(e.ob, 250, 5)
	e.addConstraint("no_poison_text", "last_error IS NULL OR last_error NOT LIKE '%poison%'")
	pub := memorypub.New()
	pub.SetFailure(failing(map[string]error{poison: errors.New("poison")}))
	r := e.relay(pub, outbox.RelayConfig{BatchSize: 64})
	if _, _, err := e.drain(r); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(10 * time.Second)
	if _, _, err := e.drain(r); err != nil {
		t.Fatal(err)
	}
	if c := e.counts(); c.Published != int64(len(ids)) || c.Dead != 1 {
		t.Fatalf("counts %+v", c)
	}
	if rec := e.get(poison); rec.DeadAt == nil || rec.Attempts != 2 || !strings.Contains(rec.LastError, "refused") {
		t.Fatalf("poison event: %+v", rec)
	}
}
