package skiplock_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// An idle client leaves the claim and the completion prepared, with a generic plan,
// on every connection of its pool, not only on the one its claims happened to use.
func TestWarmerPreparesEveryConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const conns = 4
	pool := pgtest.NewPool(t, conns)
	opened := make([]interface{ Release() }, 0, conns)
	for range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		opened = append(opened, c)
	}
	for _, c := range opened {
		c.Release()
	}
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("noop", func(context.Context, *skiplock.Job) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: pgtest.Schema(t), Workers: ws,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	startClient(t, client)

	// warm reports how many of the pool's connections have the claim and the completion
	// prepared with a generic plan; it holds every connection while it looks.
	warm := func() int {
		idle := pool.AcquireAllIdle(ctx)
		defer func() {
			for _, c := range idle {
				c.Release()
			}
		}()
		n := 0
		for _, c := range idle {
			var ready bool
			// (This query is itself a prepared statement whose text matches both.)
			if err := c.QueryRow(ctx, `SELECT
  count(*) FILTER (WHERE statement LIKE '%claimed AS (%' AND generic_plans > 0) > 0
  AND count(*) FILTER (WHERE statement LIKE '%WITH ORDINALITY AS o(id, token, action%' AND generic_plans > 0) > 0
FROM pg_prepared_statements WHERE statement NOT LIKE '%pg_prepared_statements%'`).Scan(&ready); err != nil {
				t.Fatal(err)
			}
			if ready {
				n++
			}
		}
		return n
	}
	waitFor(t, 20*time.Second, "every connection warmed", func() bool { return warm() == conns })
}
