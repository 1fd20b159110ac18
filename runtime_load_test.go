package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"go.uber.org/goleak"
)

type effectArgs struct {
	N int `json:"n"`
}

func (effectArgs) Kind() string { return "effect" }

// effectWorkers records a side-effect row per run, in the handler's own statement.
func effectWorkers(t *testing.T, e *env, runs *atomic.Int64) *skiplock.Workers {
	_, err := e.pool.Exec(e.ctx, "CREATE TABLE IF NOT EXISTS "+e.q("effects")+" (job_id uuid NOT NULL, worker text NOT NULL)")
	e.must(err)
	ws := skiplock.NewWorkers()
	e.must(skiplock.AddWorker(ws, skiplock.WorkFunc[effectArgs](func(ctx context.Context, job *skiplock.Job, _ effectArgs) error {
		runs.Add(1)
		_, err := e.pool.Exec(ctx, "INSERT INTO "+e.q("effects")+" VALUES ($1, $2)", job.ID, job.WorkerID)
		return err
	}), nil))
	return ws
}

func TestThreeClientsWorkEachJobExactlyOnce(t *testing.T) {
	t.Parallel()
	const total = 20000
	e := newEnv(t, skiplock.Config{})
	var runs atomic.Int64
	ws := effectWorkers(t, e, &runs)
	params := make([]skiplock.EnqueueParams, total)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: effectArgs{N: i}}
	}
	for i := 0; i < total; i += 1000 {
		_, err := e.client.EnqueueManyTx(e.ctx, e.pool, params[i:i+1000])
		e.must(err)
	}
	for i := 0; i < 3; i++ {
		c := e.newClient(skiplock.Config{
			ID:           fmt.Sprintf("client-%d", i),
			Queues:       map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 16}},
			Workers:      ws,
			PollInterval: 50 * time.Millisecond,
		})
		startClient(t, c)
	}
	waitFor(t, 3*time.Minute, "all jobs to succeed", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'succeeded'") == total
	})
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("effects")); n != total {
		t.Fatalf("%d side effects, want %d", n, total)
	}
	if n := scalar[int64](e, "SELECT count(*) FROM (SELECT job_id FROM "+e.q("effects")+" GROUP BY job_id HAVING count(*) > 1) d"); n != 0 {
		t.Fatalf("%d jobs ran more than once", n)
	}
	if n := scalar[int64](e, "SELECT count(DISTINCT worker) FROM "+e.q("effects")); n != 3 {
		t.Fatalf("work spread over %d clients, want 3", n)
	}
	if runs.Load() != total {
		t.Fatalf("handler ran %d times, want %d", runs.Load(), total)
	}
}

func TestLeaseLostCancelsJobAndDropsOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	started := make(chan struct{})
	var cause atomic.Value
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("slow", func(ctx context.Context, job *skiplock.Job) error {
		close(started)
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return nil // would be "success" — it must not be written
	}, nil))
	c := e.newClient(skiplock.Config{
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}, Workers: ws,
		LeaseDuration: 2 * time.Second, HeartbeatInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond,
	})
	lost, unsub := c.Subscribe(skiplock.EventLeaseLost)
	defer unsub()
	startClient(t, c)
	r, err := c.EnqueueRawTx(e.ctx, e.pool, "slow", []byte(`{}`), nil)
	e.must(err)
	<-started
	before, err := c.JobGet(e.ctx, r.ID)
	e.must(err)
	e.clock.Advance(5 * time.Second) // past the lease: the next heartbeat fails
	ev := nextEvent(t, lost, 10*time.Second)
	if ev.Job.ID != r.ID {
		t.Fatalf("lease lost for %s, want %s", ev.Job.ID, r.ID)
	}
	if got, _ := cause.Load().(error); !errors.Is(got, skiplock.ErrLeaseLost) {
		t.Fatalf("handler's context cause %v, want ErrLeaseLost", got)
	}
	after, err := c.JobGet(e.ctx, r.ID)
	e.must(err)
	if after.State != skiplock.StateRunning || after.LeaseToken != before.LeaseToken || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("the lost job's outcome was written: %+v", after)
	}
}

// Not parallel: goleak must see only this test's goroutines.
func TestStopWaitsAndStopAndCancelCancels(t *testing.T) {
	e := newEnv(t, skiplock.Config{})
	pgtest.Pool(t) // the shared pool's goroutines predate the check
	// pgx's background reader of a pooled connection (pgconn starts it while it
	// writes a large message, to avoid a deadlock) stays blocked in its last read
	// after it is stopped, until the connection next receives data or closes: pgx's,
	// held by a connection of the shared pool, not one of skiplock's (one CI run).
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead"))

	release := make(chan struct{})
	var started, finished, cancelled atomic.Int64
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("wait", func(ctx context.Context, job *skiplock.Job) error {
		started.Add(1)
		select {
		case <-release:
			finished.Add(1)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil))
	e.must(ws.AddHandler("block", func(ctx context.Context, job *skiplock.Job) error {
		started.Add(1)
		<-ctx.Done()
		cancelled.Add(1)
		return ctx.Err()
	}, nil))
	cfg := skiplock.Config{Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 3}}, Workers: ws, PollInterval: 20 * time.Millisecond}

	// Stop waits for running jobs and writes their outcomes.
	c := e.newClient(cfg)
	e.must(c.Start(e.ctx))
	enqueueKind(e, c, "wait", 3)
	// The handlers' own count: a job the database shows running may still wait in
	// the client's local queue, not yet started.
	waitFor(t, 10*time.Second, "3 running handlers", func() bool { return started.Load() == 3 })
	stopped := make(chan error)
	go func() { stopped <- c.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while jobs were running", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	e.must(<-stopped)
	if finished.Load() != 3 || scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'succeeded'") != 3 {
		t.Fatalf("after Stop: %d finished, want 3 succeeded", finished.Load())
	}

	// StopAndCancel cancels them; they go back to pending, due now, without
	// spending an attempt.
	c2 := e.newClient(cfg)
	e.must(c2.Start(e.ctx))
	enqueueKind(e, c2, "block", 2)
	waitFor(t, 10*time.Second, "2 running handlers", func() bool { return started.Load() == 5 })
	e.must(c2.StopAndCancel(context.Background()))
	if cancelled.Load() != 2 {
		t.Fatalf("%d handlers saw cancellation, want 2", cancelled.Load())
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE kind = 'block' AND status = 'pending' AND attempts = 0 AND last_error IS NULL"); n != 2 {
		t.Fatalf("%d interrupted jobs pending with their attempt given back, want 2", n)
	}
	e.client.Close()
}

func enqueueKind(e *env, c *skiplock.Client, kind string, n int) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		_, err := c.EnqueueRawTx(e.ctx, e.pool, kind, []byte(`{}`), nil)
		e.must(err)
	}
}

func TestNotifyWakesProducerFast(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	c, events := startPingClient(e, 5*time.Second)
	waitFor(t, 10*time.Second, "listener", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN \""+e.schema+"%'") == 1
	})
	var worst time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		tx, err := e.pool.Begin(e.ctx)
		e.must(err)
		_, err = c.EnqueueRawTx(e.ctx, tx, "ping", []byte(`{}`), nil)
		e.must(err)
		e.must(tx.Commit(e.ctx))
		nextEvent(t, events, 4*time.Second) // the poll would take 5s
		worst = max(worst, time.Since(start))
	}
	t.Logf("NOTIFY pickup: worst of 5 enqueue→done %s", worst)
	if worst > time.Second {
		t.Fatalf("enqueue→done took %s with a 5s poll interval; NOTIFY did not wake the producer", worst)
	}
}

// startPingClient starts a client with a no-op "ping" worker on the host's clock and
// returns it with a subscription to its successes.
func startPingClient(e *env, poll time.Duration) (*skiplock.Client, <-chan *skiplock.Event) {
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("ping", func(ctx context.Context, job *skiplock.Job) error { return nil }, nil))
	c := e.newClient(skiplock.Config{
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}}, Workers: ws,
		PollInterval: poll, Clock: realClock{},
	})
	events, unsub := c.Subscribe(skiplock.EventSucceeded)
	e.t.Cleanup(unsub)
	startClient(e.t, c)
	return c, events
}

// realClock is an injected clock that reads the host's time (so NOTIFY latency
// tests do not depend on a frozen fake clock).
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func TestListenerKilledJobsStillFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	c, events := startPingClient(e, 100*time.Millisecond)
	listenerPID := func() int64 {
		var pid int64
		err := e.pool.QueryRow(e.ctx, "SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE query LIKE 'LISTEN \""+e.schema+"%'").Scan(&pid)
		e.must(err)
		return pid
	}
	waitFor(t, 10*time.Second, "listener", func() bool { return listenerPID() != 0 })
	old := listenerPID()
	_, err := e.pool.Exec(e.ctx, "SELECT pg_terminate_backend($1)", old)
	e.must(err)
	enqueueKind(e, c, "ping", 3)
	for i := 0; i < 3; i++ {
		nextEvent(t, events, 10*time.Second)
	}
	waitFor(t, 20*time.Second, "listener to reconnect", func() bool { p := listenerPID(); return p != 0 && p != old })
	// after reconnecting, NOTIFY works again
	enqueueKind(e, c, "ping", 1)
	nextEvent(t, events, 10*time.Second)
}

func TestConnectionsBoundedAtConcurrency200(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	cfg := e.pool.Config().ConnConfig.Copy()
	_ = cfg
	pool := pgtest.NewPool(t, 50)
	app := "conncount_" + e.schema
	_, err := pool.Exec(e.ctx, "SELECT 1")
	e.must(err)
	pool.Close()
	pcfg := e.pool.Config().Copy()
	pcfg.MaxConns = 50
	pcfg.ConnConfig.RuntimeParams["application_name"] = app
	own, err := pgxNewPool(pcfg)
	e.must(err)
	defer own.Close()
	release := make(chan struct{})
	var running atomic.Int64
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("hold", func(ctx context.Context, job *skiplock.Job) error {
		running.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, nil))
	c, err := skiplock.NewClient(own, skiplock.Config{
		Schema: e.schema, Clock: e.clock, Workers: ws,
		Queues:            map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 200}},
		HeartbeatInterval: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond,
	})
	e.must(err)
	enqueueKind(e, e.client, "hold", 400)
	e.must(c.Start(e.ctx))
	waitFor(t, 30*time.Second, "200 running handlers", func() bool { return running.Load() == 200 })
	var maxConns int64
	for i := 0; i < 20; i++ { // sample across several heartbeats
		maxConns = max(maxConns, scalar[int64](e, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app))
		<-time.After(25 * time.Millisecond)
	}
	close(release)
	e.must(c.Stop(e.ctx))
	// The pool keeps every connection it opened, so this is the most the client ever
	// held at once. Usually 2; when its components happen to run together (all start
	// at once, and a loaded machine stretches each run) one connection each.
	components := c.ComponentsForTest()
	t.Logf("connections held by a client running 200 jobs: %d (components: %d)", maxConns, components)
	if maxConns > int64(components) {
		t.Fatalf("a client at concurrency 200 held %d connections; want at most one per component (%d)", maxConns, components)
	}
}

var _ = pgx.ErrNoRows

// A bulk enqueue of 10,000 jobs in one transaction sends one notification.
func TestBulkEnqueueSendsOneNotify(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{NotifyCoalesce: -1})
	conn, err := pgx.Connect(e.ctx, pgtest.URL(t))
	e.must(err)
	defer conn.Close(e.ctx)
	_, err = conn.Exec(e.ctx, `LISTEN "`+skiplock.Channel(e.schema)+`"`)
	e.must(err)
	for _, size := range []int{10000, 10} { // the COPY path and the statement path
		params := make([]skiplock.EnqueueParams, size)
		for i := range params {
			params[i] = skiplock.EnqueueParams{Args: otherArgs{N: i}}
			if size == 10 {
				params[i].Opts.DeduplicationKey = fmt.Sprint(i)
			}
		}
		tx, err := e.pool.Begin(e.ctx)
		e.must(err)
		_, err = e.client.EnqueueManyTx(e.ctx, tx, params[:size/2])
		e.must(err)
		_, err = e.client.EnqueueManyTx(e.ctx, tx, params[size/2:])
		e.must(err)
		e.must(tx.Commit(e.ctx))
		got := 0
		for {
			ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
			n, err := conn.WaitForNotification(ctx)
			cancel()
			if err != nil {
				break // no further notification within 300ms
			}
			if n.Payload != skiplock.DefaultQueue {
				t.Fatalf("payload %q", n.Payload)
			}
			got++
		}
		if got != 1 {
			t.Fatalf("bulk enqueue of %d jobs in one transaction sent %d notifications, want 1", size, got)
		}
	}
}
