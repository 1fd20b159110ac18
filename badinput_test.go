package skiplock_test

// Bad inputs and bad collaborators that enqueue_test.go and runtime_test.go do not
// already cover: each expects a typed error (or a fenced, harmless outcome), quickly,
// and nothing lost or half-written.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/migrate"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
	"github.com/skiplock/skiplock/outbox/webhookpub"
)

// injections are hostile names tried wherever a name is accepted.
var injections = []string{
	`x"; DROP TABLE jobs; --`,
	`x'; DROP TABLE jobs; --`,
	`has space`,
	`semi;colon`,
	`back\slash`,
	strings.Repeat("n", 64), // over PostgreSQL's 63-byte identifier limit
}

func requireInvalid(t *testing.T, what string, err error) {
	t.Helper()
	var ve *skiplock.ValidationError
	if !errors.Is(err, skiplock.ErrInvalid) || !errors.As(err, &ve) {
		t.Errorf("%s: got %v, want a *skiplock.ValidationError", what, err)
	}
}

func TestBadEnqueueOptionsNotCoveredElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	cases := []struct {
		name  string
		opts  skiplock.EnqueueOpts
		field string
	}{
		{"delay beyond the schedule horizon", skiplock.EnqueueOpts{Delay: skiplock.MaxSchedule + time.Second}, "delay"},
		{"dedup key not UTF-8", skiplock.EnqueueOpts{DeduplicationKey: "k\xff"}, "deduplication_key"},
		{"priority far out of range", skiplock.EnqueueOpts{Priority: 1 << 40}, "priority"},
		{"max_attempts far out of range", skiplock.EnqueueOpts{MaxAttempts: 1 << 40}, "max_attempts"},
	}
	for _, tc := range cases {
		_, err := e.client.EnqueueRawTx(e.ctx, e.pool, "k", []byte(`{}`), &tc.opts)
		var ve *skiplock.ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("%s: got %v, want a ValidationError on %s", tc.name, err, tc.field)
		}
	}
	if n := e.countJobs(); n != 0 {
		t.Fatalf("%d jobs written by refused enqueues", n)
	}
	// At the limits exactly, everything is accepted.
	_, err := e.client.EnqueueRawTx(e.ctx, e.pool, strings.Repeat("k", skiplock.MaxKindLen), []byte(`{}`), &skiplock.EnqueueOpts{
		Priority: skiplock.MaxPriority, MaxAttempts: skiplock.MaxMaxAttempts, Delay: skiplock.MaxSchedule,
		DeduplicationKey: strings.Repeat("d", skiplock.MaxDedupKeyLen)})
	e.must(err)
}

// Kinds, deduplication keys and outbox fields are data: hostile text is stored
// verbatim and never reaches SQL as text. Names that become identifiers (schema,
// queue) are refused.
func TestBadNamesInjectionEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ob, err := outbox.New(e.client, outbox.Config{})
	e.must(err)
	for i, bad := range injections {
		// identifiers: refused with a typed error before any SQL runs
		_, err := skiplock.NewClient(e.pool, skiplock.Config{Schema: bad})
		requireInvalid(t, "schema "+bad, err)
		_, err = skiplock.NewClient(e.pool, skiplock.Config{Schema: e.schema,
			Queues: map[string]skiplock.QueueConfig{bad: {MaxWorkers: 1}}, Workers: skiplock.NewWorkers()})
		requireInvalid(t, "queue in Config.Queues "+bad, err)
		_, err = e.client.Manual().Claim(e.ctx, bad, 1)
		requireInvalid(t, "queue in Claim "+bad, err)
		_, err = e.client.Enqueue(e.ctx, emailArgs{}, &skiplock.EnqueueOpts{Queue: bad})
		requireInvalid(t, "queue in Enqueue "+bad, err)
		if _, err := skiplock.MigrationSQL(bad); err == nil {
			t.Errorf("MigrationSQL accepted schema %q", bad)
		}

		// data: stored as given (the 64-byte name is a fine kind or key)
		kind := "kind " + bad
		payload, err := json.Marshal(map[string]string{"v": bad})
		e.must(err)
		res, err := e.client.EnqueueRawTx(e.ctx, e.pool, kind, payload, &skiplock.EnqueueOpts{DeduplicationKey: bad})
		e.must(err)
		j, err := e.client.JobGet(e.ctx, res.ID)
		e.must(err)
		var stored map[string]string
		if err := json.Unmarshal(j.Payload, &stored); err != nil || j.Kind != kind || j.DeduplicationKey != bad || stored["v"] != bad {
			t.Errorf("job %d stored kind %q key %q", i, j.Kind, j.DeduplicationKey)
		}
		id, err := ob.Write(e.ctx, e.pool, outbox.Event{AggregateType: bad, AggregateID: bad, EventType: bad, Destination: bad,
			Headers: map[string]string{"x-name": bad}, Payload: []byte(`{}`)})
		e.must(err)
		rec, err := ob.Admin().Get(e.ctx, e.pool, id)
		e.must(err)
		if rec.AggregateType != bad || rec.EventType != bad || rec.Destination != bad || rec.Headers["x-name"] != bad {
			t.Errorf("event %d stored %+v", i, rec.Event)
		}
		first, err := ob.Inbox().Claim(e.ctx, e.pool, bad, bad)
		if err != nil || !first {
			t.Errorf("inbox claim with consumer %q: %v, %v", bad, first, err)
		}
	}
	_, err = ob.Inbox().Claim(e.ctx, e.pool, strings.Repeat("c", outbox.MaxNameLen+1), "id")
	requireInvalid(t, "overlong inbox consumer", err)
	if n := e.countJobs(); n != int64(len(injections)) {
		t.Fatalf("%d jobs, want %d", n, len(injections))
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("outbox")); n != int64(len(injections)) {
		t.Fatalf("%d events, want %d", n, len(injections))
	}
}

// A schema name of the full 63 bytes makes "<schema>.jobs" too long for a NOTIFY
// channel; Channel cuts it to the limit, and LISTEN and NOTIFY agree on the cut name.
func TestBadLongSchemaNotifyChannel(t *testing.T) {
	t.Parallel()
	schema := fmt.Sprintf("long_%d_", os.Getpid())
	schema += strings.Repeat("x", 63-len(schema))
	if len(skiplock.Channel(schema)) > 63 || len(outbox.Channel(schema)) > 63 {
		t.Fatalf("channels %q and %q exceed 63 bytes", skiplock.Channel(schema), outbox.Channel(schema))
	}
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := migrate.Up(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pgtest.DropSchema(t, schema) })
	ws := skiplock.NewWorkers()
	ran := make(chan string, 2)
	if err := ws.AddHandler("ping", func(ctx context.Context, job *skiplock.Job) error { ran <- job.ID; return nil }, nil); err != nil {
		t.Fatal(err)
	}
	// Polling once an hour: only the listener's connect and NOTIFY wake the producer.
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Workers: ws, PollInterval: time.Hour,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	startClient(t, c)
	for i := 0; i < 2; i++ { // the first may be found on connect; the second needs NOTIFY
		res, err := c.EnqueueRawTx(ctx, pool, "ping", []byte(`{}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-ran:
			if id != res.ID {
				t.Fatalf("ran %s, want %s", id, res.ID)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("job %d not run: NOTIFY on the cut channel name did not wake the producer", i)
		}
	}
}

// A handler that ignores its context past its timeout is no longer heartbeated; its
// lease expires, the job is reclaimed, and what the handler returns later is fenced
// out: nothing is written for it.
func TestBadHandlerIgnoringContextIsFencedOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan *skiplock.Job, 1)
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("deaf", func(ctx context.Context, job *skiplock.Job) error {
		started <- job
		<-release // deaf to ctx
		return nil
	}, &skiplock.WorkerOpts{Timeout: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, skiplock.Config{})
	c := e.newClient(skiplock.Config{Workers: ws, ReclaimInterval: -1, PollInterval: 20 * time.Millisecond,
		LeaseDuration: 2 * time.Second, HeartbeatInterval: 50 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}})
	events, unsubscribe := c.Subscribe()
	defer unsubscribe()
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	startClient(t, c)
	res, err := c.EnqueueRawTx(e.ctx, e.pool, "deaf", []byte(`{}`), nil)
	e.must(err)
	var job *skiplock.Job
	select {
	case job = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
	e.clock.Advance(time.Minute) // the lease is long expired by the injected clock
	rec, err := c.Manual().Reclaim(e.ctx)
	e.must(err)
	if rec.Requeued != 1 {
		t.Fatalf("reclaim: %+v, want 1 requeued", rec)
	}
	close(release) // the handler finally returns nil
	ev := nextEvent(t, events, 10*time.Second)
	if ev.Kind != skiplock.EventLeaseLost || ev.Job.ID != res.ID {
		t.Fatalf("event %s for %s, want lease_lost for %s", ev.Kind, ev.Job.ID, res.ID)
	}
	got, err := c.JobGet(e.ctx, res.ID)
	e.must(err)
	if got.State != skiplock.StatePending || got.Attempt != 1 || got.LeaseToken != "" || !strings.Contains(got.LastError, "lease expired") {
		t.Fatalf("after the late return: %+v", got)
	}
	// The late success, replayed through the low-level API, is refused too.
	if err := c.Manual().Complete(e.ctx, job); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("late Complete: %v, want ErrLeaseLost", err)
	}
}

// Stop does not hang on a handler that never returns: it gives up when its context
// ends, and the job keeps its lease, to expire and be reclaimed.
func TestBadHandlerNeverReturnsStopIsBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	started := make(chan struct{}, 1)
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("stuck", func(ctx context.Context, job *skiplock.Job) error {
		started <- struct{}{}
		<-release
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, skiplock.Config{})
	c := e.newClient(skiplock.Config{Workers: ws, PollInterval: 20 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		LeaseDuration: time.Second, Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}})
	res, err := c.EnqueueRawTx(e.ctx, e.pool, "stuck", []byte(`{}`), nil)
	e.must(err)
	e.must(c.Start(e.ctx))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = c.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: %v, want DeadlineExceeded", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("Stop took %s with a stuck handler", took)
	}
	j, err := c.JobGet(e.ctx, res.ID)
	e.must(err)
	if j.State != skiplock.StateRunning || j.LeaseToken == "" || j.Attempt != 1 {
		t.Fatalf("job after abandoned stop: %+v", j)
	}
}

// blockingPublisher hangs in Publish: until ctx ends, or (deaf) until released.
type blockingPublisher struct {
	deaf    bool
	release chan struct{}
	entered chan struct{}
	calls   atomic.Int64
}

func (p *blockingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	p.calls.Add(1)
	select {
	case p.entered <- struct{}{}:
	default:
	}
	errs := make([]error, len(msgs))
	if p.deaf {
		<-p.release
		return errs // claims success, far too late
	}
	<-ctx.Done()
	for i := range errs {
		errs[i] = ctx.Err()
	}
	return errs
}

func (p *blockingPublisher) Close() error { return nil }

// outbox returns the Outbox of the test's client.
func (e *env) outbox() *outbox.Outbox {
	e.t.Helper()
	ob, err := outbox.New(e.client, outbox.Config{})
	e.must(err)
	return ob
}

func writeEvent(e *env) string {
	e.t.Helper()
	id, err := e.outbox().Write(e.ctx, e.pool, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.paid", Payload: []byte(`{}`)})
	e.must(err)
	return id
}

func TestBadPublisherHangingIsBoundedByTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	id := writeEvent(e)
	pub := &blockingPublisher{entered: make(chan struct{}, 1)}
	r, err := e.outbox().NewRelay(pub, outbox.RelayConfig{LeaseDuration: 300 * time.Millisecond})
	e.must(err)
	began := time.Now()
	published, failed, err := r.RunOnce(e.ctx)
	e.must(err)
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("RunOnce took %s with a hanging publisher and a 300ms lease", took)
	}
	if published != 0 || failed != 1 {
		t.Fatalf("published %d failed %d, want 0 and 1", published, failed)
	}
	rec, err := e.outbox().Admin().Get(e.ctx, e.pool, id)
	e.must(err)
	if rec.PublishedAt != nil || rec.DeadAt != nil || rec.RelayUntil != nil || rec.Attempts != 1 ||
		!rec.AvailableAt.After(e.clock.Now()) || !strings.Contains(rec.LastError, "deadline") {
		t.Fatalf("event after a timed-out publish: %+v", rec)
	}
}

// A publisher deaf to its context hangs its relay, but not the outbox: once the lease
// expires another relay publishes the event, and the hung relay's late mark changes
// nothing.
func TestBadPublisherDeafIsFencedOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	id := writeEvent(e)
	deaf := &blockingPublisher{deaf: true, release: make(chan struct{}), entered: make(chan struct{}, 1)}
	hung, err := e.outbox().NewRelay(deaf, outbox.RelayConfig{LeaseDuration: time.Second})
	e.must(err)
	type result struct {
		published, failed int
		err               error
	}
	done := make(chan result, 1)
	go func() {
		p, f, err := hung.RunOnce(e.ctx)
		done <- result{p, f, err}
	}()
	select {
	case <-deaf.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the deaf publisher was never called")
	}
	e.clock.Advance(time.Minute)
	good := memorypub.New()
	healthy, err := e.outbox().NewRelay(good, outbox.RelayConfig{})
	e.must(err)
	if p, _, err := healthy.RunOnce(e.ctx); err != nil || p != 1 {
		t.Fatalf("healthy relay: published %d, %v", p, err)
	}
	close(deaf.release)
	res := <-done
	if res.err != nil || res.published != 0 {
		t.Fatalf("hung relay's late run: %+v, want nothing marked", res)
	}
	if hung.Stats().LeaseLost != 1 {
		t.Fatalf("hung relay stats %+v, want one lost lease", hung.Stats())
	}
	rec, err := e.outbox().Admin().Get(e.ctx, e.pool, id)
	e.must(err)
	if rec.PublishedAt == nil || rec.Attempts != 2 || good.Count() != 1 {
		t.Fatalf("event %+v, healthy relay published %d", rec, good.Count())
	}
}

// A webhook target that redirects is refused permanently (the event is parked, never
// marked published); one that answers too slowly is retried later.
func TestBadWebhookTargetsThroughTheRelay(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices when the client gives up
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/slow":
			select { // answers only after the publisher has given up
			case <-r.Context().Done():
			case <-release:
			}
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close, which waits for handlers
	for _, tc := range []struct {
		path      string
		dead      bool
		errorPart string
	}{
		{"/redirect", true, "redirect"},
		{"/slow", false, "deadline"},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			e := newEnv(t, skiplock.Config{})
			id := writeEvent(e)
			pub, err := webhookpub.New(webhookpub.Config{DefaultURL: srv.URL + tc.path, Secrets: []string{"s3cret"}, Timeout: 300 * time.Millisecond})
			e.must(err)
			defer pub.Close()
			r, err := e.outbox().NewRelay(pub, outbox.RelayConfig{})
			e.must(err)
			began := time.Now()
			published, failed, err := r.RunOnce(e.ctx)
			e.must(err)
			if published != 0 || failed != 1 || time.Since(began) > 5*time.Second {
				t.Fatalf("published %d failed %d in %s", published, failed, time.Since(began))
			}
			rec, err := e.outbox().Admin().Get(e.ctx, e.pool, id)
			e.must(err)
			if rec.PublishedAt != nil || (rec.DeadAt != nil) != tc.dead || !strings.Contains(strings.ToLower(rec.LastError), tc.errorPart) {
				t.Fatalf("event after %s: dead %v last_error %q published %v", tc.path, rec.DeadAt, rec.LastError, rec.PublishedAt)
			}
		})
	}
}

func TestBadClosedPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	pool := pgtest.NewPool(t, 2)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: e.schema})
	e.must(err)
	defer c.Close()
	pool.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	began := time.Now()
	_, err = c.Enqueue(ctx, emailArgs{}, nil)
	if err == nil || errors.Is(err, skiplock.ErrInvalid) || !strings.Contains(err.Error(), "closed pool") || !strings.Contains(err.Error(), "enqueueing") {
		t.Fatalf("enqueue on a closed pool: %v", err)
	}
	if _, err := c.Manual().Claim(ctx, skiplock.DefaultQueue, 1); err == nil || !strings.Contains(err.Error(), "closed pool") {
		t.Fatalf("claim on a closed pool: %v", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("closed pool took %s to report", took)
	}
	if n := e.countJobs(); n != 0 {
		t.Fatalf("%d jobs", n)
	}
}

// A database that refuses connections: NewClient succeeds (it does not connect),
// Enqueue and Migrate fail fast with a *pgconn.ConnectError, and a started worker
// keeps retrying without hanging its Stop.
func TestBadDatabaseRefusesConnections(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	cfg, err := pgxpool.ParseConfig(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool.New should not connect: %v", err)
	}
	defer pool.Close()
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("k", func(context.Context, *skiplock.Job) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Workers: ws, PollInterval: 50 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	var connErr *pgconn.ConnectError
	if _, err := c.Enqueue(ctx, emailArgs{}, nil); !errors.As(err, &connErr) {
		t.Fatalf("enqueue: %v, want a *pgconn.ConnectError", err)
	}
	if _, err := skiplock.Migrate(ctx, pool, "anything"); !errors.As(err, &connErr) {
		t.Fatalf("migrate: %v, want a *pgconn.ConnectError", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("refused connections took %s to report", took)
	}
	// Start checks the schema, so an unreachable database is reported at once
	// rather than by a worker that starts and silently does nothing.
	if err := c.Start(ctx); !errors.As(err, &connErr) {
		t.Fatalf("Start with an unreachable database: %v, want a *pgconn.ConnectError", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop on a client that never started: %v", err)
	}
}
