package bench

// The outbox relay throughput measurement behind workload W8, also used by the broker
// benchmarks in brokers_test.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
)

// RelayOptions shape a relay throughput run. Zero values take the defaults.
type RelayOptions struct {
	// Relays is how many relay loops run at once. Default 2.
	Relays int
	// BatchSize is each relay's claim size. Default 1000.
	BatchSize int
	// Ordered writes with WriterConfig.Ordered and relays with OrderedByAggregate.
	// Default false.
	Ordered bool
	// Aggregates is how many distinct aggregates the events are spread over.
	// Default 1000.
	Aggregates int
	// PayloadBytes is the approximate size of each event's JSON payload. Default 200.
	PayloadBytes int
}

// RelayThroughput writes n events into schema's outbox (untimed, in batches of
// 1000), then times relays publishing all of them to pub, from the first claim to the
// last mark. The schema must be migrated and its outbox empty of unpublished events.
// Events/s is n divided by the returned duration.
func RelayThroughput(ctx context.Context, pool *pgxpool.Pool, schema string, pub outbox.Publisher, n int, o RelayOptions) (time.Duration, error) {
	if o.Relays <= 0 {
		o.Relays = 2
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 1000
	}
	if o.Aggregates <= 0 {
		o.Aggregates = 1000
	}
	if o.PayloadBytes <= 0 {
		o.PayloadBytes = 200
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		return 0, err
	}
	defer client.Close()
	w, err := outbox.New(client, outbox.Config{Ordered: o.Ordered, NoNotify: true})
	if err != nil {
		return 0, err
	}
	pad := make([]byte, max(o.PayloadBytes-40, 0))
	for i := range pad {
		pad[i] = 'x'
	}
	for done := 0; done < n; {
		k := min(1000, n-done)
		evs := make([]outbox.Event, k)
		for i := range evs {
			seq := done + i
			evs[i] = outbox.Event{
				AggregateType: "bench", AggregateID: fmt.Sprint(seq % o.Aggregates), EventType: "bench.event",
				Destination: "bench", Payload: fmt.Appendf(nil, `{"seq":%d,"pad":%q}`, seq, pad),
			}
		}
		if _, err := w.WriteMany(ctx, pool, evs); err != nil {
			return 0, fmt.Errorf("writing benchmark events: %w", err)
		}
		done += k
	}

	var published atomic.Int64
	var firstErr error
	var errOnce sync.Once
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for range o.Relays {
		r, err := w.NewRelay(pub, outbox.RelayConfig{BatchSize: o.BatchSize, OrderedByAggregate: o.Ordered, PollOnly: true})
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			idle := 0
			for rctx.Err() == nil && published.Load() < int64(n) {
				p, f, err := r.RunOnce(rctx)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					cancel()
					return
				}
				if f > 0 {
					errOnce.Do(func() { firstErr = fmt.Errorf("%d publishes failed", f) })
					cancel()
					return
				}
				published.Add(int64(p))
				if p == 0 {
					// Nothing claimable right now (other relays hold the rest, or in
					// ordered mode their predecessors are in flight); yield and retry.
					idle++
					if idle > 100000 {
						errOnce.Do(func() { firstErr = errors.New("relay made no progress") })
						cancel()
						return
					}
				} else {
					idle = 0
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return elapsed, firstErr
	}
	if err := ctx.Err(); err != nil {
		return elapsed, err
	}
	return elapsed, nil
}
