package outboxtest_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest"
)

// memBroker is an in-memory broker that deduplicates on the event id, and
// memPublisher a Publisher for it: the smallest implementation that should pass the
// suite, which checks that the suite and its Harness contract fit together.
type memBroker struct {
	mu   sync.Mutex
	seen map[string]bool
	got  map[string][]outboxtest.Received
}

type memPublisher struct {
	b      *memBroker
	closed atomic.Bool
}

func (p *memPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		switch {
		case p.closed.Load():
			errs[i] = fmt.Errorf("mem: %w", outbox.ErrClosed)
		case ctx.Err() != nil:
			errs[i] = ctx.Err()
		default:
			p.b.mu.Lock()
			if !p.b.seen[m.ID] {
				p.b.seen[m.ID] = true
				p.b.got[m.Destination] = append(p.b.got[m.Destination], outboxtest.Received{
					ID: m.ID, Destination: m.Destination, Payload: append([]byte(nil), m.Payload...),
					Headers: maps.Clone(m.Headers), Key: m.AggregateID,
				})
			}
			p.b.mu.Unlock()
		}
	}
	return errs
}

func (p *memPublisher) Close() error { p.closed.Store(true); return nil }

func TestRunConformanceInMemory(t *testing.T) {
	b := &memBroker{seen: map[string]bool{}, got: map[string][]outboxtest.Received{}}
	var dests atomic.Int64
	outboxtest.RunConformance(t, outboxtest.Harness{
		NewPublisher:   func(*testing.T) outbox.Publisher { return &memPublisher{b: b} },
		NewDestination: func(*testing.T) string { return fmt.Sprintf("d%d", dests.Add(1)) },
		Receive: func(t *testing.T, dest string, deadline time.Time, done func([]outboxtest.Received) bool) []outboxtest.Received {
			var got []outboxtest.Received
			outboxtest.WaitFor(time.Until(deadline), func() bool {
				b.mu.Lock()
				got = append([]outboxtest.Received(nil), b.got[dest]...)
				b.mu.Unlock()
				return done(got)
			})
			return got
		},
		Dedups: true,
		Keyed:  true,
	})
}

func TestNewIDUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 10000 {
		id := outboxtest.NewID()
		if seen[id] || len(id) != 36 {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	if !outboxtest.WaitFor(5*time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("condition that becomes true was not seen")
	}
	start := time.Now()
	if outboxtest.WaitFor(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("false condition reported true")
	}
	if time.Since(start) < 30*time.Millisecond {
		t.Fatal("WaitFor gave up before its deadline")
	}
}
