package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// waitWarmed waits until the working client's warmer has prepared its claim and
// completion on every one of its pool's conns connections (docs/runtime.md,
// "warmer"), as it does by itself in its first idle moments. A latency workload's
// clock starts after it: a steady worker's claims do not meet a cold connection, and
// the warmer's own statements are not part of the measured jobs' time.
func waitWarmed(ctx context.Context, workload string, worker *skiplock.Client, conns int) error {
	deadline := time.Now().Add(30 * time.Second)
	for worker.Counters().WarmedConns < int64(conns) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: warm-up: the worker warmed %d of its %d connections in 30s", workload, worker.Counters().WarmedConns, conns)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// enqueueOnEachConn holds n connections of pool at once and enqueues one no-op job
// through each, so every connection is open and has the insert prepared before a
// latency workload's clock starts (their first use would otherwise land in the tail).
func enqueueOnEachConn(ctx context.Context, workload string, app *skiplock.Client, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("%s: warm-up: acquiring connection %d: %w", workload, i, err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		if _, err := app.EnqueueTx(ctx, c, noop{I: -1 - i}, nil); err != nil {
			return fmt.Errorf("%s: warm-up: enqueueing on connection %d: %w", workload, i, err)
		}
	}
	return nil
}
