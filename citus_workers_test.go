package skiplock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// citusWorkerConfig is a worker's configuration on the Citus layout: the scheduler and
// the retention service off (these tests are about the workers), a fast reclaimer.
func citusWorkerConfig(schema string, ws *skiplock.Workers, workers int) skiplock.Config {
	return skiplock.Config{Schema: schema, Workers: ws, ID: "citus-worker",
		Queues:            map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: workers}},
		SchedulerInterval: -1, Retention: skiplock.RetentionConfig{Interval: -1},
		ReclaimInterval: 50 * time.Millisecond, PollInterval: 200 * time.Millisecond}
}

func citusJobStates(t *testing.T, pool *pgxpool.Pool, schema string) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT status::text || ':' || attempts, count(*) FROM "`+schema+`".jobs GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		m[k] = n
	}
	return m
}

// TestCitusWorkers runs a started client on the 3-node cluster
// (SKIPLOCK_TEST_CITUS_URL): jobs of several keys run to success, those whose handler
// fails once are retried and succeed at their second attempt, and a job left running
// under an expired lease by a worker that died is reclaimed and run again — every
// statement naming one key (TestCitusStatementPlans asserts their plans).
func TestCitusWorkers(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.CitusSchema(t)
	ctx := context.Background()
	ws := skiplock.NewWorkers()
	var failOnce sync.Map
	ran := atomic.Int64{}
	if err := ws.AddHandler("order_placed", func(ctx context.Context, job *skiplock.Job) error {
		ran.Add(1)
		if _, ok := failOnce.Load(job.ID); ok && job.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}, &skiplock.WorkerOpts{RetryPolicy: skiplock.ExponentialBackoff{Base: time.Millisecond, Max: 5 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	client, err := skiplock.NewClient(pool, citusWorkerConfig(schema, ws, 4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)

	var params []skiplock.EnqueueParams
	for i, key := range []string{"acme", "globex", "initech", ""} {
		for n := 0; n < 10; n++ {
			params = append(params, skiplock.EnqueueParams{Args: orderPlaced{Order: i*100 + n}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: key}})
		}
	}
	res, err := client.EnqueueManyTx(ctx, pool, params)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if i%4 == 0 {
			failOnce.Store(r.ID, true)
		}
	}
	// A job a worker that died left running: its lease expired an hour ago.
	if _, err := pool.Exec(ctx, `INSERT INTO "`+schema+`".jobs (kind, payload, concurrency_key, status, attempts, lease_until, lease_token, worker_id, attempted_at)
		VALUES ('order_placed', '{"order": 999}', 'globex', 'running', 1, now() - interval '1 hour', gen_random_uuid(), 'dead-worker', now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}

	startClient(t, client)
	waitFor(t, 60*time.Second, "every job to succeed", func() bool {
		st := citusJobStates(t, pool, schema)
		return st["succeeded:1"]+st["succeeded:2"] == 41
	})
	st := citusJobStates(t, pool, schema)
	if st["succeeded:2"] != 11 || st["succeeded:1"] != 30 {
		t.Fatalf("job states %v; want 30 succeeded at their first attempt, 10 retried and the reclaimed one at their second", st)
	}
	var lastErr string
	if err := pool.QueryRow(ctx, `SELECT attempt_history->0->>'outcome' FROM "`+schema+`".jobs WHERE payload->>'order' = '999'`).Scan(&lastErr); err != nil || lastErr != "lease_expired" {
		t.Fatalf("the reclaimed job's first attempt: %q, %v; want lease_expired", lastErr, err)
	}
	// Every key's row is gone from the key table once its jobs are done (a claim that
	// found nothing removed it).
	waitFor(t, 30*time.Second, "the key table to empty", func() bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".citus_keys`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

// TestCitusQuietKeyNotBehindBacklog: on the Citus layout a key with one job does not
// wait behind another key's backlog enqueued before it: the claims rotate over keys.
func TestCitusQuietKeyNotBehindBacklog(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.CitusSchema(t)
	ctx := context.Background()
	const backlog = 3000
	ws := skiplock.NewWorkers()
	var bigDone atomic.Int64
	quietAt := make(chan int64, 1)
	if err := ws.AddHandler("order_placed", func(ctx context.Context, job *skiplock.Job) error {
		if job.ConcurrencyKey == "quiet" {
			quietAt <- bigDone.Load()
			return nil
		}
		// The backlog's work: 2 ms a job, cut short when the client stops.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		bigDone.Add(1)
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	client, err := skiplock.NewClient(pool, citusWorkerConfig(schema, ws, 2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	params := make([]skiplock.EnqueueParams, backlog)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: orderPlaced{Order: i}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: "big"}}
	}
	if _, err := client.EnqueueManyTx(ctx, pool, params); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, orderPlaced{Order: -1}, &skiplock.EnqueueOpts{ConcurrencyKey: "quiet"}); err != nil {
		t.Fatal(err)
	}
	startClient(t, client)
	select {
	case n := <-quietAt:
		if n > backlog/10 {
			t.Fatalf("the quiet key's job ran after %d of the backlog's %d jobs; want it among the first claims", n, backlog)
		}
		t.Logf("the quiet key's job ran after %d of the backlog's %d jobs", n, backlog)
	case <-time.After(60 * time.Second):
		t.Fatal("the quiet key's job did not run")
	}
}

// TestCitusStartRefusals: Start on the Citus layout refuses, with ErrNotOnCitus naming
// it, what cannot hold its guarantee there, and starts without it.
func TestCitusStartRefusals(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.CitusSchema(t)
	ctx := context.Background()
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("order_placed", func(context.Context, *skiplock.Job) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	start := func(cfg skiplock.Config) error {
		c, err := skiplock.NewClient(pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		err = c.Start(ctx)
		if err == nil {
			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := c.Stop(stopCtx); err != nil {
				t.Fatal(err)
			}
		}
		return err
	}
	base := citusWorkerConfig(schema, ws, 1)
	for name, mutate := range map[string]func(*skiplock.Config){
		"Config.Limits": func(c *skiplock.Config) {
			c.Limits = []skiplock.Limit{{Queue: skiplock.DefaultQueue, MaxRunning: 1}}
		},
	} {
		cfg := base
		mutate(&cfg)
		if err := start(cfg); !errors.Is(err, skiplock.ErrNotOnCitus) || !strings.Contains(err.Error(), name) {
			t.Errorf("Start with %s: %v; want ErrNotOnCitus naming it", name, err)
		}
	}
	if err := start(base); err != nil {
		t.Fatalf("Start on Citus: %v", err)
	}
	// The scheduler and the retention service run there (TestCitusScheduler,
	// TestCitusRetention): their defaults start.
	withServices := base
	withServices.SchedulerInterval, withServices.Retention.Interval = 0, 0
	withServices.Periodic = []skiplock.PeriodicJob{{Name: "nightly", Spec: "0 3 * * *", Kind: "order_placed"}}
	if err := start(withServices); err != nil {
		t.Fatalf("Start on Citus with the scheduler and the retention service: %v", err)
	}
	// Client.LimitSet refuses by name; a limit set in the schema by SQL is refused at Start.
	lc, err := skiplock.NewClient(pool, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	if err := lc.LimitSet(ctx, skiplock.Limit{Kind: "order_placed", MaxRunning: 2}); !errors.Is(err, skiplock.ErrNotOnCitus) || !strings.Contains(err.Error(), "limits") {
		t.Errorf("LimitSet on Citus: %v; want ErrNotOnCitus naming limits", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO "`+schema+`".limits (scope, target, max_running) VALUES ('kind', 'order_placed', 2)`); err != nil {
		t.Fatal(err)
	}
	if err := start(base); !errors.Is(err, skiplock.ErrNotOnCitus) || !strings.Contains(err.Error(), "limits") {
		t.Errorf("Start with a limit in the schema: %v; want ErrNotOnCitus naming limits", err)
	}
}
