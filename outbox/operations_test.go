package outbox_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
)

func op(ops []skiplock.OperationStatus, name string) (skiplock.OperationStatus, bool) {
	for _, o := range ops {
		if o.Operation == name {
			return o, true
		}
	}
	return skiplock.OperationStatus{}, false
}

// A claim that keeps failing is logged once (not once per batch), counted and
// reported failing by Operations, as the client's claims are; the recovery clears it.
func TestRelayOperationsClaimFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var buf bytes.Buffer // RunOnce reports on its own goroutine: no lock needed
	r := e.relay(memorypub.New(), outbox.RelayConfig{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if ops := r.Operations(); len(ops) != 0 {
		t.Fatalf("operations of a fresh relay: %+v", ops)
	}
	_, err := e.pool.Exec(e.ctx, "ALTER TABLE "+e.q("outbox")+" RENAME TO outbox_away")
	e.must(err)
	for range 3 {
		if _, _, err := r.RunOnce(e.ctx); err == nil {
			t.Fatal("RunOnce without the outbox table succeeded")
		}
	}
	claim, ok := op(r.Operations(), "relay:claim")
	if !ok || claim.Failures != 3 || !claim.Failing || claim.FailingSince.IsZero() || claim.LastError == "" {
		t.Fatalf("relay:claim after 3 failed claims: %+v", r.Operations())
	}
	if n := strings.Count(buf.String(), "skiplock: relay:claim failed"); n != 1 {
		t.Fatalf("%d 'relay:claim failed' lines for 3 failures, want 1:\n%s", n, buf.String())
	}
	_, err = e.pool.Exec(e.ctx, "ALTER TABLE "+e.q("outbox_away")+" RENAME TO outbox")
	e.must(err)
	if _, _, err := r.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if claim, _ := op(r.Operations(), "relay:claim"); claim.Failing || claim.Failures != 3 {
		t.Fatalf("relay:claim after a good claim: %+v", claim)
	}
	if !strings.Contains(buf.String(), "skiplock: relay:claim recovered") {
		t.Errorf("the recovery was not logged:\n%s", buf.String())
	}
}

// A batch the publisher accepts none of is a failing relay:publish; one accepted
// message is a success. Events refused one at a time are not.
func TestRelayOperationsPublishFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := memorypub.New()
	pub.SetFailure(func(outbox.Message) error { return errors.New("broker unreachable") })
	r := e.relay(pub, outbox.RelayConfig{})
	e.writeN(e.ob, 3, 3)
	if _, f, err := r.RunOnce(e.ctx); err != nil || f != 3 {
		t.Fatalf("failed %d, err %v", f, err)
	}
	pubOp, ok := op(r.Operations(), "relay:publish")
	if !ok || !pubOp.Failing || pubOp.Failures != 1 || !strings.Contains(pubOp.LastError, "broker unreachable") {
		t.Fatalf("relay:publish after a batch none of which was accepted: %+v", r.Operations())
	}
	if _, ok := op(r.Operations(), "relay:mark"); ok {
		t.Errorf("the marks of failed publishes were reported failing: %+v", r.Operations())
	}
	e.clock.Advance(time.Minute) // past the retry delay
	var mu sync.Mutex
	first := true
	pub.SetFailure(func(outbox.Message) error { // one accepted, the rest refused
		mu.Lock()
		defer mu.Unlock()
		if first {
			first = false
			return nil
		}
		return errors.New("422")
	})
	if p, f, err := r.RunOnce(e.ctx); err != nil || p != 1 || f != 2 {
		t.Fatalf("published %d, failed %d, err %v", p, f, err)
	}
	if pubOp, _ := op(r.Operations(), "relay:publish"); pubOp.Failing {
		t.Fatalf("relay:publish still failing after an accepted message: %+v", pubOp)
	}
}

// The outbox's sentinels match their root twins with errors.Is, and still match
// themselves; they match no other root sentinel.
func TestOutboxErrorsMatchRootSentinels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.admin.Get(e.ctx, e.pool, "0190a6f4-0000-7000-8000-000000000000")
	if !errors.Is(err, outbox.ErrNotFound) || !errors.Is(err, skiplock.ErrNotFound) {
		t.Fatalf("Get of a missing event: %v, want both ErrNotFound", err)
	}
	if errors.Is(err, skiplock.ErrLeaseLost) || errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("Get of a missing event matches an unrelated sentinel: %v", err)
	}
	if err := e.admin.Requeue(e.ctx, e.pool, "not-an-id"); !errors.Is(err, skiplock.ErrNotFound) {
		t.Fatalf("Requeue of a bad id: %v, want skiplock.ErrNotFound", err)
	}
	if !errors.Is(outbox.ErrRelayStarted, skiplock.ErrClientStarted) || errors.Is(outbox.ErrRelayStarted, skiplock.ErrNotFound) {
		t.Fatal("ErrRelayStarted does not match skiplock.ErrClientStarted alone")
	}
	if _, err := e.ob.NewRelay(nil, outbox.RelayConfig{}); !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("NewRelay(nil): %v, want skiplock.ErrInvalid", err)
	}
}
