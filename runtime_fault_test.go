package skiplock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/migrate"
	"github.com/skiplock/skiplock/internal/pgcluster"
	"github.com/skiplock/skiplock/internal/pgtest"
)

const childWorkerEnv = "SKIPLOCK_TEST_CHILD_WORKER"

// childWorker runs in a re-executed test binary: a client whose handlers never
// finish, so the parent can kill it mid-job.
func childWorker() int {
	if os.Getenv(childWorkerEnv) == "graceful" {
		return gracefulChild()
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("SKIPLOCK_TEST_CHILD_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ws := skiplock.NewWorkers()
	block := func(ctx context.Context, job *skiplock.Job) error {
		fmt.Println("running", job.ID)
		<-ctx.Done()
		return ctx.Err()
	}
	ws.AddHandler("crashy", block, nil)
	ws.AddHandler("seq", block, nil) // TestSequencesNeverOverlap's doomed worker

	c, err := skiplock.NewClient(pool, skiplock.Config{
		Schema: os.Getenv("SKIPLOCK_TEST_CHILD_SCHEMA"), ID: "doomed-child", Workers: ws,
		Queues:        map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 10}},
		LeaseDuration: time.Second, HeartbeatInterval: 200 * time.Millisecond, PollInterval: 50 * time.Millisecond,
	})
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {} // until SIGKILL
}

func TestKilledWorkerProcessJobsAreReclaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}}) // the child runs on the database's clock
	const n = 5
	enqueueKind(e, e.client, "crashy", n)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childWorkerEnv+"=1", "SKIPLOCK_TEST_CHILD_URL="+pgtest.URL(t), "SKIPLOCK_TEST_CHILD_SCHEMA="+e.schema)
	child.Stderr = os.Stderr
	e.must(child.Start())
	defer child.Process.Kill()
	waitFor(t, 30*time.Second, "the child to claim every job", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'running' AND worker_id = 'doomed-child'") == n
	})
	e.must(child.Process.Signal(syscall.SIGKILL))
	child.Wait()

	ws := skiplock.NewWorkers()
	var runs atomic.Int64
	e.must(ws.AddHandler("crashy", func(ctx context.Context, job *skiplock.Job) error { runs.Add(1); return nil }, nil))
	survivor := e.newClient(skiplock.Config{
		ID: "survivor", Workers: ws, Clock: realClock{},
		Queues:          map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 10}},
		ReclaimInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		RetryPolicy: skiplock.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond},
	})
	startClient(t, survivor)
	waitFor(t, 60*time.Second, "reclaimed jobs to finish on the survivor", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'succeeded'") == n
	})
	rows, err := e.pool.Query(e.ctx, "SELECT attempts, last_error FROM "+e.q("jobs"))
	e.must(err)
	type rec struct {
		Attempts  int
		LastError string
	}
	recs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rec])
	e.must(err)
	for _, r := range recs {
		if r.Attempts != 2 || !strings.Contains(r.LastError, "lease expired on worker doomed-child") {
			t.Fatalf("job after crash: %+v", r)
		}
	}
	if runs.Load() != n {
		t.Fatalf("survivor ran %d jobs, want %d", runs.Load(), n)
	}
}

// A private cluster: restarting the shared one would disturb the parallel tests.
func TestDatabaseRestartMidRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"synchronous_commit": "on"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Stop()
	pool, err := pgxpool.New(ctx, cluster.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool, "restart"); err != nil {
		t.Fatal(err)
	}
	ws := skiplock.NewWorkers()
	var runs atomic.Int64
	ws.AddHandler("tick", func(ctx context.Context, job *skiplock.Job) error {
		runs.Add(1)
		select { // a little work, so some jobs are in flight when the server dies
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}, nil)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: "restart", Workers: ws,
		Queues:       map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 8}},
		PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const total = 3000
	params := make([]skiplock.EnqueueParams, total)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Kind: "tick", Payload: []byte(`{}`)}
	}
	if _, err := c.EnqueueManyTx(ctx, pool, params); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	count := func(status string) int64 {
		var n int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM restart.jobs WHERE status = $1", status).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	waitFor(t, 30*time.Second, "work under way", func() bool { return count("succeeded") > 200 })
	if err := cluster.Restart(ctx, pgcluster.Immediate); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "all jobs to finish after the restart", func() bool { return count("succeeded") == total })
	t.Logf("handler runs: %d for %d jobs (re-runs come from leases that expired during the outage)", runs.Load(), total)
}

// behindPgBouncer starts a server of the test's own with PgBouncer in transaction
// pooling in front of it, migrates schema there directly, and returns a pool on the
// server itself, the server's URL and PgBouncer's. It skips the test when PgBouncer is
// not installed (fails with SKIPLOCK_REQUIRE_BROKERS).
func behindPgBouncer(t *testing.T, schema string) (direct *pgxpool.Pool, directURL, bouncerURL string) {
	t.Helper()
	if _, err := pgcluster.FindPgBouncer(); err != nil {
		if os.Getenv("SKIPLOCK_REQUIRE_BROKERS") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Stop() })
	bouncer, err := cluster.StartPgBouncer(ctx, "transaction")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bouncer.Stop)
	direct, err = pgxpool.New(ctx, cluster.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	if _, err := migrate.Up(ctx, direct, schema); err != nil {
		t.Fatal(err)
	}
	return direct, cluster.URL, bouncer.URL
}

func TestPollOnlyBehindPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct, _, bouncerURL := behindPgBouncer(t, "bounced")
	cfg, err := pgxpool.ParseConfig(bouncerURL)
	if err != nil {
		t.Fatal(err)
	}
	// PgBouncer < 1.21 in transaction mode cannot keep named prepared statements.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ws := skiplock.NewWorkers()
	ws.AddHandler("via_bouncer", func(ctx context.Context, job *skiplock.Job) error { return nil }, nil)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: "bounced", Workers: ws, PollOnly: true,
		Queues:       map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 8}},
		PollInterval: 20 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const total = 500
	params := make([]skiplock.EnqueueParams, total)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Kind: "via_bouncer", Payload: []byte(`{"i":` + fmt.Sprint(i) + `}`), Opts: skiplock.EnqueueOpts{DeduplicationKey: fmt.Sprint(i % 400)}}
	}
	res, err := c.EnqueueManyTx(ctx, pool, params)
	if err != nil {
		t.Fatal(err)
	}
	if !res[450].Duplicate {
		t.Fatal("dedup through PgBouncer failed")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	waitFor(t, time.Minute, "jobs through PgBouncer", func() bool {
		var n int64
		direct.QueryRow(ctx, "SELECT count(*) FROM bounced.jobs WHERE status = 'succeeded'").Scan(&n)
		return n == 400
	})
}

// Behind PgBouncer in transaction pooling, LISTEN through the pooler hears nothing;
// Config.ListenURL sends the client's one LISTEN connection to PostgreSQL itself, so
// a job enqueued through the pooler still wakes the worker at once. The poll interval
// is an hour: the second job runs only if its NOTIFY is heard.
func TestListenURLBehindPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct, directURL, bouncerURL := behindPgBouncer(t, "heard")
	// PgBouncer < 1.21 in transaction mode cannot keep named prepared statements.
	pool, err := pgxpool.New(ctx, bouncerURL+"&default_query_exec_mode=exec")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ws := skiplock.NewWorkers()
	ws.AddHandler("heard", func(ctx context.Context, job *skiplock.Job) error { return nil }, nil)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: "heard", Workers: ws,
		ListenURL:    directURL + "&application_name=skiplock-direct-listener",
		Queues:       map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}},
		PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	succeeded := func(n int64) func() bool {
		return func() bool {
			var got int64
			direct.QueryRow(ctx, "SELECT count(*) FROM heard.jobs WHERE status = 'succeeded'").Scan(&got)
			return got == n
		}
	}
	if _, err := c.Enqueue(ctx, heardArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	waitFor(t, time.Minute, "the first job (the start's claim)", succeeded(1))
	waitFor(t, time.Minute, "the LISTEN connection on PostgreSQL itself", func() bool {
		var n int
		direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'skiplock-direct-listener' AND query LIKE 'LISTEN%'").Scan(&n)
		return n == 1
	})
	if _, err := c.Enqueue(ctx, heardArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the second job, woken by its NOTIFY", succeeded(2))
}

type heardArgs struct{}

func (heardArgs) Kind() string { return "heard" }

// gracefulChild runs in a re-executed test binary as a service would: a client
// started with a signal.NotifyContext, so SIGTERM is a graceful stop. Kind "finishes"
// runs until a row appears in the schema's release table (ignoring shutdown); kind
// "long" runs until its context is cancelled.
func gracefulChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(context.Background(), os.Getenv("SKIPLOCK_TEST_CHILD_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	schema := os.Getenv("SKIPLOCK_TEST_CHILD_SCHEMA")
	ws := skiplock.NewWorkers()
	ws.AddHandler("finishes", func(jctx context.Context, job *skiplock.Job) error {
		fmt.Println("started finishes")
		for {
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM "`+schema+`".release`).Scan(&n); err == nil && n > 0 {
				return nil
			}
			select {
			case <-jctx.Done():
				return jctx.Err()
			case <-time.After(10 * time.Millisecond): // polling the release table
			}
		}
	}, nil)
	ws.AddHandler("long", func(jctx context.Context, job *skiplock.Job) error {
		fmt.Println("started long")
		<-jctx.Done()
		return jctx.Err()
	}, nil)
	c, err := skiplock.NewClient(pool, skiplock.Config{
		Schema: schema, ID: "graceful-child", Workers: ws,
		Queues:          map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}},
		PollInterval:    50 * time.Millisecond,
		ShutdownTimeout: 4 * time.Second,
	})
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-ctx.Done()
	fmt.Println("shutdown begun")
	// The client drains on its own; Stop waits for that drain to end.
	if err := c.Stop(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("stopped")
	return 0
}

// A real SIGTERM to a service that passed its signal context to Start: the job in
// flight finishes (its context is not cancelled), the job longer than ShutdownTimeout
// is cancelled and goes back to pending without spending an attempt, nothing is left
// leased to the dead process, and another client runs the interrupted job at once.
func TestSIGTERMDrainsRunningJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	_, err := e.pool.Exec(e.ctx, "CREATE TABLE "+e.q("release")+" (x int)")
	e.must(err)
	fin, err := e.client.EnqueueRawTx(e.ctx, e.pool, "finishes", []byte(`{}`), nil)
	e.must(err)
	long, err := e.client.EnqueueRawTx(e.ctx, e.pool, "long", []byte(`{}`), nil)
	e.must(err)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childWorkerEnv+"=graceful", "SKIPLOCK_TEST_CHILD_URL="+pgtest.URL(t), "SKIPLOCK_TEST_CHILD_SCHEMA="+e.schema)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	e.must(err)
	e.must(child.Start())
	defer child.Process.Kill()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	expectLine := func(want string) {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("child exited before printing %q", want)
				}
				if l == want {
					return
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("child did not print %q", want)
			}
		}
	}
	// Both handlers must have begun (a claimed job whose handler has not started is
	// given back at a stop, rightly: waiting for its row to be 'running' raced that).
	started := map[string]bool{}
	for len(started) < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("child exited before running both jobs")
			}
			if strings.HasPrefix(l, "started ") {
				started[l] = true
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the child did not start both jobs (started: %v)", started)
		}
	}
	e.must(child.Process.Signal(syscall.SIGTERM))
	expectLine("shutdown begun")
	_, err = e.pool.Exec(e.ctx, "INSERT INTO "+e.q("release")+" VALUES (1)")
	e.must(err)
	expectLine("stopped")
	if err := child.Wait(); err != nil {
		t.Fatalf("child exit: %v", err)
	}

	state := func(id string) (st string, attempts int) {
		e.must(e.pool.QueryRow(e.ctx, "SELECT status, attempts FROM "+e.q("jobs")+" WHERE id = $1", id).Scan(&st, &attempts))
		return
	}
	if st, att := state(fin.ID); st != "succeeded" || att != 1 {
		t.Errorf("in-flight job after SIGTERM: %s, attempts %d; want succeeded after 1 attempt", st, att)
	}
	if st, att := state(long.ID); st != "pending" || att != 0 {
		t.Errorf("job cut off by ShutdownTimeout: %s, attempts %d; want pending with the attempt given back", st, att)
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'running'"); n != 0 {
		t.Errorf("%d jobs left leased to the stopped process", n)
	}

	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("long", func(context.Context, *skiplock.Job) error { return nil }, nil))
	survivor := e.newClient(skiplock.Config{ID: "survivor", Workers: ws, Clock: realClock{},
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}, PollInterval: 50 * time.Millisecond})
	startClient(t, survivor)
	waitFor(t, 30*time.Second, "the interrupted job to run on another client", func() bool {
		st, _ := state(long.ID)
		return st == "succeeded"
	})
}
