package memorypub_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
)

func TestConformance(t *testing.T) {
	var (
		mu   sync.Mutex
		pubs []*memorypub.Publisher
		seq  atomic.Int64
	)
	outboxtest.RunConformance(t, outboxtest.Harness{
		NewPublisher: func(*testing.T) outbox.Publisher {
			p := memorypub.New()
			mu.Lock()
			pubs = append(pubs, p)
			mu.Unlock()
			return p
		},
		NewDestination: func(*testing.T) string { return fmt.Sprint("dest-", seq.Add(1)) },
		// Publish is synchronous: whatever was accepted is already recorded.
		Receive: func(_ *testing.T, dest string, _ time.Time, _ func([]outboxtest.Received) bool) []outboxtest.Received {
			mu.Lock()
			defer mu.Unlock()
			var got []outboxtest.Received
			for _, p := range pubs {
				for _, m := range p.Messages() {
					if m.Destination == dest {
						got = append(got, outboxtest.Received{ID: m.ID, Destination: m.Destination, Payload: m.Payload, Headers: m.Headers})
					}
				}
			}
			return got
		},
	})
}
