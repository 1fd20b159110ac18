// Package outboxtest is a conformance suite for outbox.Publisher implementations.
// Its subpackage memorypub is an in-memory Publisher for tests of code that relays.
//
// An adapter's tests describe how to build a Publisher and how to read back what its
// server received in a Harness, then call RunConformance. The suite checks the
// behaviour the relay relies on: one error slot per message, nil only for messages
// the server really holds, ids, payloads and headers carried intact, the event id
// placed where the broker deduplicates, prompt failure on a cancelled context or
// after Close, and safety under concurrent use (run it with -race).
//
// Every case runs in parallel with the others and asks the Harness for a fresh
// destination, so a Harness must hand out destinations that do not share messages.
package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/outbox"
)

// Received is one message as the server under test holds it, read back by a
// Harness.
type Received struct {
	// ID is the event id, read from where the adapter puts it for the broker's
	// deduplication (Nats-Msg-Id, AMQP message-id, the Kafka header
	// skiplock-event-id, the webhook-id header).
	ID string
	// Destination is the destination the message was published to, in the terms of
	// outbox.Message.Destination (queue name, topic, subject, endpoint name).
	Destination string
	// Payload is the message body.
	Payload []byte
	// Headers holds the message's headers. Names must be as the adapter sent them,
	// except that a transport with case-insensitive names (HTTP) reports them in
	// lower case. Headers the adapter adds of its own are allowed.
	Headers map[string]string
	// Key is the record key, for adapters that set one (Kafka); empty otherwise.
	Key string
}

// Harness tells RunConformance how to drive one adapter. NewPublisher,
// NewDestination and Receive are required.
type Harness struct {
	// NewPublisher returns a fresh Publisher connected to the server under test.
	// The suite closes it; the Harness may also register its own cleanup.
	NewPublisher func(t *testing.T) outbox.Publisher

	// NewDestination returns a destination (queue name, topic, subject, endpoint
	// name) that no other case uses, ready to receive messages.
	NewDestination func(t *testing.T) string

	// Receive reads what the server received at dest, in arrival order, until done
	// reports true for everything read so far or deadline passes, and returns what
	// it read. It must not block past the deadline. The suite calls it at most once
	// per destination.
	Receive func(t *testing.T, dest string, deadline time.Time, done func([]Received) bool) []Received

	// Dedups is true when the server discards a second message carrying an event id
	// it has already stored (JetStream's Nats-Msg-Id). The suite then checks that
	// publishing one id twice stores it once.
	Dedups bool

	// Keyed is true when the adapter sets a record key from Message.AggregateID
	// (Kafka); the suite then checks Received.Key.
	Keyed bool

	// Timeout bounds each wait for the server. Zero means 20 seconds.
	Timeout time.Duration
}

// RunConformance runs the conformance cases against h as parallel subtests of t.
func RunConformance(t *testing.T, h Harness) {
	t.Helper()
	if h.NewPublisher == nil || h.NewDestination == nil || h.Receive == nil {
		t.Fatal("outboxtest: Harness needs NewPublisher, NewDestination and Receive")
	}
	if h.Timeout <= 0 {
		h.Timeout = 20 * time.Second
	}
	s := &suite{h: h}
	cases := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"SingleMessage", s.singleMessage},
		{"EmptyBatch", s.emptyBatch},
		{"Batch200", s.batch200},
		{"EventIDCarried", s.eventIDCarried},
		{"CancelledContext", s.cancelledContext},
		{"PublishAfterClose", s.publishAfterClose},
		{"ConcurrentPublish", s.concurrentPublish},
	}
	if h.Dedups {
		cases = append(cases, struct {
			name string
			fn   func(t *testing.T)
		}{"DuplicateIDStoredOnce", s.duplicateStoredOnce})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t)
		})
	}
}

type suite struct {
	h Harness
}

var idSeq atomic.Uint64

// NewID returns an id unique within the process, shaped like a UUID so adapters that
// check ids see a realistic one.
func NewID() string {
	n := idSeq.Add(1)
	now := uint64(hostclock.Now().UnixNano())
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x",
		uint32(now>>32), uint16(now>>16), uint16(now)&0xfff, uint16(n>>48)&0xfff, n&0xffffffffffff)
}

// NewMessage returns a message for dest with a fresh id, a JSON payload that names
// the id and i, and two user headers.
func NewMessage(dest string, i int) outbox.Message {
	id := NewID()
	return outbox.Message{
		ID:            id,
		AggregateType: "order",
		AggregateID:   fmt.Sprintf("order-%d", i%7),
		EventType:     "order.paid",
		Destination:   dest,
		Payload:       fmt.Appendf(nil, `{"id":%q,"n":%d,"note":"caf\u00e9 \"quoted\""}`, id, i),
		Headers:       map[string]string{"x-trace-id": "trace-" + id, "x-tenant": "acme"},
		CreatedAt:     hostclock.Now().UTC().Truncate(time.Second),
		Attempt:       1,
	}
}

func (s *suite) publisher(t *testing.T) outbox.Publisher {
	t.Helper()
	p := s.h.NewPublisher(t)
	if p == nil {
		t.Fatal("Harness.NewPublisher returned nil")
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), s.h.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// publishOK publishes msgs and fails the test unless every slot is nil.
func publishOK(t *testing.T, ctx context.Context, p outbox.Publisher, msgs []outbox.Message) {
	t.Helper()
	errs := p.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d errors for %d messages", len(errs), len(msgs))
	}
	failed := 0
	for i, err := range errs {
		if err != nil {
			if failed < 5 {
				t.Errorf("message %d (%s): %v", i, msgs[i].ID, err)
			}
			failed++
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d messages failed", failed, len(msgs))
	}
}

// receiveIDs waits until every id in want has been received at dest.
func (s *suite) receiveIDs(t *testing.T, dest string, want []outbox.Message) map[string][]Received {
	t.Helper()
	need := make(map[string]bool, len(want))
	for _, m := range want {
		need[m.ID] = true
	}
	got := s.h.Receive(t, dest, hostclock.Now().Add(s.h.Timeout), func(rs []Received) bool {
		seen := 0
		counted := make(map[string]bool, len(rs))
		for _, r := range rs {
			if need[r.ID] && !counted[r.ID] {
				counted[r.ID] = true
				seen++
			}
		}
		return seen == len(need)
	})
	byID := make(map[string][]Received, len(got))
	for _, r := range got {
		byID[r.ID] = append(byID[r.ID], r)
	}
	missing := 0
	for id := range need {
		if len(byID[id]) == 0 {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d messages not received at %q within %v (received %d)", missing, len(need), dest, s.h.Timeout, len(got))
	}
	return byID
}

func (s *suite) checkMessage(t *testing.T, m outbox.Message, r Received) {
	t.Helper()
	if r.ID != m.ID {
		t.Errorf("id: got %q, want %q", r.ID, m.ID)
	}
	if r.Destination != m.Destination {
		t.Errorf("%s: destination: got %q, want %q", m.ID, r.Destination, m.Destination)
	}
	if string(r.Payload) != string(m.Payload) {
		t.Errorf("%s: payload: got %q, want %q", m.ID, r.Payload, m.Payload)
	}
	for k, v := range m.Headers {
		got, ok := r.Headers[k]
		if !ok {
			t.Errorf("%s: header %q missing (got %v)", m.ID, k, r.Headers)
		} else if got != v {
			t.Errorf("%s: header %q: got %q, want %q", m.ID, k, got, v)
		}
	}
	if s.h.Keyed && r.Key != m.AggregateID {
		t.Errorf("%s: key: got %q, want %q", m.ID, r.Key, m.AggregateID)
	}
}

func (s *suite) singleMessage(t *testing.T) {
	p := s.publisher(t)
	dest := s.h.NewDestination(t)
	m := NewMessage(dest, 1)
	publishOK(t, s.ctx(t), p, []outbox.Message{m})
	got := s.receiveIDs(t, dest, []outbox.Message{m})
	if n := len(got[m.ID]); n != 1 {
		t.Fatalf("message received %d times, want 1", n)
	}
	s.checkMessage(t, m, got[m.ID][0])
}

func (s *suite) emptyBatch(t *testing.T) {
	p := s.publisher(t)
	errs := p.Publish(s.ctx(t), nil)
	if len(errs) != 0 {
		t.Fatalf("Publish(nil) returned %d errors, want 0", len(errs))
	}
}

func (s *suite) batch200(t *testing.T) {
	p := s.publisher(t)
	dest := s.h.NewDestination(t)
	msgs := make([]outbox.Message, 200)
	for i := range msgs {
		msgs[i] = NewMessage(dest, i)
	}
	publishOK(t, s.ctx(t), p, msgs)
	got := s.receiveIDs(t, dest, msgs)
	for _, m := range msgs {
		rs := got[m.ID]
		if len(rs) != 1 {
			t.Errorf("%s received %d times, want 1", m.ID, len(rs))
			continue
		}
		s.checkMessage(t, m, rs[0])
	}
}

func (s *suite) eventIDCarried(t *testing.T) {
	p := s.publisher(t)
	dest := s.h.NewDestination(t)
	// Two messages with identical content but different ids: each must arrive
	// under its own id, so the id really comes from Message.ID.
	a := NewMessage(dest, 1)
	b := a
	b.ID = NewID()
	publishOK(t, s.ctx(t), p, []outbox.Message{a, b})
	got := s.receiveIDs(t, dest, []outbox.Message{a, b})
	if len(got[a.ID]) != 1 || len(got[b.ID]) != 1 {
		t.Fatalf("want each id once, got %d × %s and %d × %s", len(got[a.ID]), a.ID, len(got[b.ID]), b.ID)
	}
}

// duplicateStoredOnce publishes one id twice, then a sentinel; once the sentinel has
// arrived, everything published before it has been stored or dropped.
func (s *suite) duplicateStoredOnce(t *testing.T) {
	p := s.publisher(t)
	dest := s.h.NewDestination(t)
	ctx := s.ctx(t)
	m := NewMessage(dest, 1)
	publishOK(t, ctx, p, []outbox.Message{m})
	again := m
	again.Attempt = 2
	// The republish must succeed: the broker already holds the event.
	publishOK(t, ctx, p, []outbox.Message{again})
	sentinel := NewMessage(dest, 2)
	publishOK(t, ctx, p, []outbox.Message{sentinel})
	got := s.receiveIDs(t, dest, []outbox.Message{m, sentinel})
	if n := len(got[m.ID]); n != 1 {
		t.Fatalf("event %s stored %d times, want 1 (broker dedup on the event id)", m.ID, n)
	}
}

func (s *suite) cancelledContext(t *testing.T) {
	p := s.publisher(t)
	dest := s.h.NewDestination(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	msgs := []outbox.Message{NewMessage(dest, 1), NewMessage(dest, 2), NewMessage(dest, 3)}
	errs := callWithin(t, s.h.Timeout, func() []error { return p.Publish(ctx, msgs) })
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d errors for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if err == nil {
			t.Errorf("message %d: nil error with a cancelled context", i)
		}
	}
	// The publisher must still work afterwards.
	m := NewMessage(dest, 4)
	publishOK(t, s.ctx(t), p, []outbox.Message{m})
}

func (s *suite) publishAfterClose(t *testing.T) {
	p := s.h.NewPublisher(t)
	dest := s.h.NewDestination(t)
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	msgs := []outbox.Message{NewMessage(dest, 1), NewMessage(dest, 2)}
	errs := callWithin(t, s.h.Timeout, func() []error { return p.Publish(s.ctx(t), msgs) })
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d errors for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("message %d: got %v, want an error wrapping outbox.ErrClosed", i, err)
		}
	}
	// Close is idempotent.
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func (s *suite) concurrentPublish(t *testing.T) {
	p := s.publisher(t)
	dest := s.h.NewDestination(t)
	ctx := s.ctx(t)
	const workers, each = 8, 25
	all := make([][]outbox.Message, workers)
	for w := range all {
		all[w] = make([]outbox.Message, each)
		for i := range all[w] {
			all[w][i] = NewMessage(dest, w*each+i)
		}
	}
	var wg sync.WaitGroup
	results := make([][]error, workers)
	for w := range workers {
		wg.Go(func() {
			// Two calls per worker so calls overlap with each other's waits.
			half := each / 2
			results[w] = append(p.Publish(ctx, all[w][:half]), p.Publish(ctx, all[w][half:])...)
		})
	}
	wg.Wait()
	var flat []outbox.Message
	for w := range workers {
		if len(results[w]) != each {
			t.Fatalf("worker %d: %d errors for %d messages", w, len(results[w]), each)
		}
		for i, err := range results[w] {
			if err != nil {
				t.Errorf("worker %d message %d: %v", w, i, err)
			}
		}
		flat = append(flat, all[w]...)
	}
	if t.Failed() {
		t.FailNow()
	}
	got := s.receiveIDs(t, dest, flat)
	for _, m := range flat {
		if n := len(got[m.ID]); n != 1 {
			t.Errorf("%s received %d times, want 1", m.ID, n)
		}
	}
}

// callWithin runs fn and fails the test if it has not returned within d.
func callWithin(t *testing.T, d time.Duration, fn func() []error) []error {
	t.Helper()
	done := make(chan []error, 1)
	go func() { done <- fn() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case errs := <-done:
		return errs
	case <-timer.C:
		t.Fatalf("Publish did not return within %v", d)
		return nil
	}
}

// WaitFor polls cond until it returns true or d has passed, and reports whether it
// became true. Harnesses use it to poll a server without sleeping blindly. A nil
// cond is never true.
func WaitFor(d time.Duration, cond func() bool) bool {
	if cond == nil {
		return false
	}
	if cond() {
		return true
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}
