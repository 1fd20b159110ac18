package bench

// The baselines measured in the same run as the workloads they judge: B0, the
// machine's single-row INSERT commit rate, and B1, the SQL ceiling of claim+complete
// on pre-inserted jobs (preinsert, also used by the work workloads).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/store"
)

// insertRate measures single-row INSERT commits per second over d with conns
// connections, as pgbench's simple insert does.
func insertRate(ctx context.Context, e *Env, conns int, d time.Duration) (float64, error) {
	if _, err := e.Pool.Exec(ctx, `DROP TABLE IF EXISTS bench_b0; CREATE TABLE bench_b0 (id bigserial PRIMARY KEY, v int NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, err
	}
	return rowRate(ctx, e, conns, d, "INSERT INTO bench_b0 (v) VALUES ($1)", func(i int64) []any { return []any{int32(i % 1000)} })
}

func runB0(ctx context.Context, e *Env) (*Result, error) {
	d := time.Duration(float64(3*time.Second) * min(max(e.Scale, 0.1), 1))
	one, err := insertRate(ctx, e, 1, d)
	if err != nil {
		return nil, err
	}
	many, err := insertRate(ctx, e, 16, d)
	if err != nil {
		return nil, err
	}
	e.b0one, e.b0many = one, many
	return &Result{Workload: "B0", JobsPerSec: one, Seconds: d.Seconds() * 2, Settings: e.Settings,
		Extra: map[string]any{"insert_commits_per_sec_1_conn": int(one), "insert_commits_per_sec_16_conns": int(many)}}, nil
}

// preinsert writes n noop jobs with COPY into schema (not timed).
func preinsert(ctx context.Context, e *Env, schema string, n int) error {
	return preinsertKeyed(ctx, e, schema, n, 0)
}

// preinsertKeyed is preinsert with the jobs spread round-robin over keys
// concurrency keys (none when keys is 0).
func preinsertKeyed(ctx context.Context, e *Env, schema string, n, keys int) error {
	return preinsertKeys(ctx, e, schema, n, func(i int) string { return keyName(i, keys) })
}

// preinsertKeys is preinsert with the i-th job under the concurrency key keyOf(i).
func preinsertKeys(ctx context.Context, e *Env, schema string, n int, keyOf func(i int) string) error {
	c, err := skiplock.NewClient(e.Pool, skiplock.Config{Schema: schema, NotifyCoalesce: -1})
	if err != nil {
		return err
	}
	defer c.Close()
	for i := 0; i < n; i += 5000 {
		m := min(5000, n-i)
		ps := make([]skiplock.EnqueueParams, m)
		for k := range ps {
			ps[k] = skiplock.EnqueueParams{Args: noop{I: i + k}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: keyOf(i + k)}}
		}
		if err := e.loadConn(ctx, func(db skiplock.DB) error {
			_, err := c.EnqueueManyTx(ctx, db, ps)
			return err
		}); err != nil {
			return err
		}
	}
	return settleBacklog(ctx, e, schema)
}

// settleBacklog vacuums and analyzes schema's jobs and checkpoints, before a clock
// starts on a backlog just written.
func settleBacklog(ctx context.Context, e *Env, schema string) error {
	if _, err := e.Pool.Exec(ctx, `VACUUM ANALYZE "`+schema+`".jobs`); err != nil {
		return err
	}
	// The backlog's WAL is checkpointed before the clock starts. Otherwise the
	// checkpoint it calls for (W7's million jobs write more WAL than max_wal_size)
	// lands in the measured run, and only the pages touched after it pay full-page
	// writes: W7's first tenth ran at ~56k jobs/s without them and its last at ~44k
	// with them, a difference that came from the setup, not from the queue. A role
	// that may not CHECKPOINT (it needs pg_checkpoint or superuser) runs without.
	_, _ = e.Pool.Exec(ctx, `CHECKPOINT`)
	return nil
}

func runB1(ctx context.Context, e *Env) (*Result, error) {
	schema, err := e.schema(ctx, "bench_b1")
	if err != nil {
		return nil, err
	}
	n := e.n(100000)
	if err := preinsert(ctx, e, schema, n); err != nil {
		return nil, err
	}
	st, err := store.New(schema)
	if err != nil {
		return nil, err
	}
	pool, err := e.pool(ctx, 2)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	var done atomic.Int64
	stop := e.progress("B1", n, done.Load)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				jobs, err := st.Claim(ctx, pool, nil, store.ClaimParams{Queue: skiplock.DefaultQueue, WorkerID: fmt.Sprint("b1-", w), Limit: 1000, Lease: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					return
				}
				outs := make([]store.Outcome, len(jobs))
				for i, j := range jobs {
					outs[i] = store.Outcome{Lease: store.Lease{ID: j.ID, Token: *j.LeaseToken, Key: j.ConcurrencyKey}, Action: store.ActionComplete}
				}
				res, err := st.Finish(ctx, pool, nil, outs)
				if err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(res)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stop()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	if done.Load() != int64(n) {
		return nil, fmt.Errorf("B1 completed %d of %d", done.Load(), n)
	}
	e.b1 = float64(n) / elapsed.Seconds()
	return &Result{Workload: "B1", N: n, Seconds: elapsed.Seconds(), JobsPerSec: e.b1, Settings: e.Settings}, nil
}
