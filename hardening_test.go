package skiplock_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// nilCtx is a nil context, as a caller with a bug would pass it.
var nilCtx context.Context

// Every public entry point refuses nil, typed-nil and zero values with an error that
// matches ErrInvalid, without panicking and without writing anything.
func TestNilAndZeroInputsAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	c := e.client
	ctx := e.ctx
	var (
		nilTx   pgx.Tx
		nilPool *pgxpool.Pool
		nilConn *pgx.Conn
		nilSQL  *sql.Tx
		nilJob  *skiplock.Job
		nilWs   *skiplock.Workers
	)
	args := emailArgs{To: "a@example.com"}
	calls := map[string]func() error{
		"EnqueueTx nil DB":               func() error { _, err := c.EnqueueTx(ctx, nil, args, nil); return err },
		"EnqueueTx nil pgx.Tx":           func() error { _, err := c.EnqueueTx(ctx, nilTx, args, nil); return err },
		"EnqueueTx typed-nil pool":       func() error { _, err := c.EnqueueTx(ctx, nilPool, args, nil); return err },
		"EnqueueTx typed-nil conn":       func() error { _, err := c.EnqueueTx(ctx, nilConn, args, nil); return err },
		"EnqueueTx FromSQL(nil *sql.Tx)": func() error { _, err := c.EnqueueTx(ctx, skiplock.FromSQL(nilSQL), args, nil); return err },
		"EnqueueTx FromSQL(nil)":         func() error { _, err := c.EnqueueTx(ctx, skiplock.FromSQL(nil), args, nil); return err },
		"EnqueueTx nil ctx":              func() error { _, err := c.EnqueueTx(nilCtx, e.pool, args, nil); return err },
		"EnqueueTx nil args":             func() error { _, err := c.EnqueueTx(ctx, e.pool, nil, nil); return err },
		"Enqueue nil ctx":                func() error { _, err := c.Enqueue(nilCtx, args, nil); return err },
		"EnqueueRawTx nil DB":            func() error { _, err := c.EnqueueRawTx(ctx, nil, "k", []byte(`{}`), nil); return err },
		"EnqueueRawTx zero kind":         func() error { _, err := c.EnqueueRawTx(ctx, e.pool, "", []byte(`{}`), nil); return err },
		"EnqueueRawTx nil payload":       func() error { _, err := c.EnqueueRawTx(ctx, e.pool, "k", nil, nil); return err },
		"EnqueueManyTx nil DB":           func() error { _, err := c.EnqueueManyTx(ctx, nil, []skiplock.EnqueueParams{{Args: args}}); return err },
		"EnqueueManyTx zero params":      func() error { _, err := c.EnqueueManyTx(ctx, e.pool, []skiplock.EnqueueParams{{}}); return err },
		"Claim nil ctx":                  func() error { _, err := c.Manual().Claim(nilCtx, "default", 1); return err },
		"Claim zero queue":               func() error { _, err := c.Manual().Claim(ctx, "", 1); return err },
		"Claim zero limit":               func() error { _, err := c.Manual().Claim(ctx, "default", 0); return err },
		"Heartbeat nil job":              func() error { _, err := c.Manual().Heartbeat(ctx, nilJob); return err },
		"Complete nil job":               func() error { return c.Manual().Complete(ctx, nil) },
		"Complete nil ctx":               func() error { return c.Manual().Complete(nilCtx, &skiplock.Job{}) },
		"Retry nil job":                  func() error { _, err := c.Manual().Retry(ctx, nil, errors.New("x"), time.Second); return err },
		"Fail nil job":                   func() error { return c.Manual().Fail(ctx, nil, nil) },
		"Snooze nil job":                 func() error { return c.Manual().Snooze(ctx, nil, time.Second) },
		"Cancel nil job":                 func() error { return c.Manual().Cancel(ctx, nil, nil) },
		"JobGet zero id":                 func() error { _, err := c.JobGet(ctx, ""); return err },
		"JobGet nil ctx":                 func() error { _, err := c.JobGet(nilCtx, "0191d0a2-0000-7000-8000-000000000000"); return err },
		"JobRetry bad id":                func() error { _, err := c.JobRetry(ctx, "not-a-uuid"); return err },
		"JobCancel zero id":              func() error { _, err := c.JobCancel(ctx, "", ""); return err },
		"JobDelete zero id":              func() error { _, err := c.JobDelete(ctx, ""); return err },
		"JobList unknown state": func() error {
			_, err := c.JobList(ctx, skiplock.ListParams{States: []skiplock.JobState{"done"}})
			return err
		},
		"JobList nil ctx":    func() error { _, err := c.JobList(nilCtx, skiplock.ListParams{}); return err },
		"Start nil ctx":      func() error { return c.Start(nilCtx) },
		"Stop nil ctx":       func() error { return c.Stop(nilCtx) },
		"NewClient nil pool": func() error { _, err := skiplock.NewClient(nil, skiplock.Config{}); return err },
		"Migrate nil pool":   func() error { _, err := skiplock.Migrate(ctx, nil, ""); return err },
		"Migrate bad schema": func() error { _, err := skiplock.Migrate(ctx, e.pool, "no such;schema"); return err },
		"AddWorker nil workers": func() error {
			return skiplock.AddWorker(nilWs, skiplock.WorkFunc[emailArgs](func(context.Context, *skiplock.Job, emailArgs) error { return nil }), nil)
		},
		"AddWorker nil worker":          func() error { return skiplock.AddWorker[emailArgs](skiplock.NewWorkers(), nil, nil) },
		"AddWorker typed-nil WorkFunc":  func() error { return skiplock.AddWorker(skiplock.NewWorkers(), skiplock.WorkFunc[emailArgs](nil), nil) },
		"AddWorker Kind panics on zero": func() error { return skiplock.AddWorker(skiplock.NewWorkers(), skiplock.WorkFunc[*ptrArgs](nil), nil) },
		"AddHandler nil handler":        func() error { return skiplock.NewWorkers().AddHandler("k", nil, nil) },
		"AddHandler nil workers": func() error {
			return nilWs.AddHandler("k", func(context.Context, *skiplock.Job) error { return nil }, nil)
		},
		"ParseJobState unknown":   func() error { _, err := skiplock.ParseJobState("done"); return err },
		"ValidatePayload nil":     func() error { return skiplock.ValidatePayload(nil, 0) },
		"RolesSQL bad schema":     func() error { _, err := skiplock.RolesSQL("bad schema", skiplock.RoleNames{}); return err },
		"MigrationSQL bad schema": func() error { _, err := skiplock.MigrationSQL("bad schema"); return err },
		"PartitionJobs nil pool": func() error {
			_, err := skiplock.PartitionJobs(ctx, nil, "", skiplock.PartitionOpts{})
			return err
		},
	}
	for name, call := range calls {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panicked: %v", p)
				}
			}()
			return call()
		}()
		if !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("%s: got %v, want an ErrInvalid error", name, err)
		}
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")); n != 0 {
		t.Errorf("bad input wrote %d jobs", n)
	}
	if got := skiplock.JobFromContext(nilCtx); got != nil {
		t.Errorf("JobFromContext(nil) = %v", got)
	}
	if got := skiplock.IdempotencyKey(nilCtx); got != "" {
		t.Errorf("IdempotencyKey(nil) = %q", got)
	}
}

// ptrArgs is a job type whose Kind method dereferences its receiver: its zero value
// (a nil pointer) panics.
type ptrArgs struct{ name string }

func (p *ptrArgs) Kind() string { return p.name }

// Config mistakes are refused by NewClient with the field named.
func TestConfigMistakesNameTheField(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	q := map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}}
	cases := map[string]skiplock.Config{
		"Config.Workers":              {Queues: q},
		"Config.LeaseDuration":        {LeaseDuration: -time.Second},
		"Config.HeartbeatInterval":    {HeartbeatInterval: -time.Second},
		"Config.PollInterval":         {PollInterval: -time.Second},
		"Config.CompletionBatchDelay": {CompletionBatchDelay: -time.Millisecond},
		"Config.ShutdownTimeout":      {ShutdownTimeout: -time.Second},
		"Config.JobTimeout":           {JobTimeout: -time.Second},
		"Config.MaxPayloadBytes":      {MaxPayloadBytes: -1},
		"Config.FetchLimit":           {FetchLimit: -1},
		"Config.Queues":               {Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1, PrefetchWindow: -time.Second}}, Workers: skiplock.NewWorkers()},
		"Config.Retention":            {Retention: skiplock.RetentionConfig{BatchSize: -1}},
		"Config.ListenURL":            {ListenURL: "postgres://app:s3cret@db:notaport/app"},
	}
	for field, cfg := range cases {
		cfg.Schema = e.schema
		_, err := skiplock.NewClient(e.pool, cfg)
		var ve *skiplock.ValidationError
		if !errors.As(err, &ve) || ve.Field != field {
			t.Errorf("%s: got %v, want a ValidationError naming %s", field, err, field)
		}
	}
}

// A ListenURL that does not parse is refused without its password; one set with
// PollOnly, which opens no LISTEN connection, is refused as a contradiction.
func TestConfigListenURLMistakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, err := skiplock.NewClient(e.pool, skiplock.Config{Schema: e.schema, ListenURL: "postgres://app:s3cret@db:notaport/app"})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a ListenURL that does not parse: %v (want an error without the password)", err)
	}
	_, err = skiplock.NewClient(e.pool, skiplock.Config{Schema: e.schema, ListenURL: "postgres://db/app", PollOnly: true})
	var ve *skiplock.ValidationError
	if !errors.As(err, &ve) || ve.Field != "Config.ListenURL" || !strings.Contains(err.Error(), "PollOnly") {
		t.Errorf("ListenURL with PollOnly: %v", err)
	}
}

// Start refuses a cancelled context, an unmigrated (misspelled) schema, and a schema
// migrated by a newer skiplock; a worker never idles silently on the wrong schema.
func TestStartChecksContextAndSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(context.Context, *skiplock.Job) error { return nil }, nil))
	q := map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}}

	cancelled, cancel := context.WithCancel(e.ctx)
	cancel()
	if err := e.newClient(skiplock.Config{Queues: q, Workers: ws}).Start(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a cancelled context: %v", err)
	}

	typo, err := skiplock.NewClient(e.pool, skiplock.Config{Schema: e.schema + "_typo", Queues: q, Workers: ws})
	e.must(err)
	if err := typo.Start(e.ctx); !errors.Is(err, skiplock.ErrNotMigrated) || !strings.Contains(err.Error(), e.schema+"_typo") {
		t.Errorf("Start on a misspelled schema: %v", err)
	}

	_, err = e.pool.Exec(e.ctx, "INSERT INTO "+e.q("schema_migrations")+" (version, name) VALUES (9999, 'from_the_future')")
	e.must(err)
	if err := e.newClient(skiplock.Config{Queues: q, Workers: ws}).Start(e.ctx); !errors.Is(err, skiplock.ErrSchemaNewer) || !strings.Contains(err.Error(), "9999") {
		t.Errorf("Start on a newer schema: %v", err)
	}
}

// Ending the context given to Start drains: the running job keeps its context and
// finishes, and a later Stop returns nil.
func TestStartContextEndIsAGracefulStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(ctx context.Context, job *skiplock.Job) error {
		started <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil))
	c := e.newClient(skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}},
		ShutdownTimeout: time.Minute})
	id, err := c.EnqueueRawTx(e.ctx, e.pool, "k", []byte(`{}`), nil)
	e.must(err)
	ctx, cancel := context.WithCancel(e.ctx)
	e.must(c.Start(ctx))
	<-started
	events, unsub := c.Subscribe()
	defer unsub()
	cancel()
	close(release)
	ev := nextEvent(t, events, 30*time.Second)
	if ev.Kind != skiplock.EventSucceeded || ev.Job.ID != id.ID {
		t.Fatalf("after the Start context ended: event %s for %s, want the running job to succeed", ev.Kind, ev.Job.ID)
	}
	stopCtx, stopCancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer stopCancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Errorf("Stop after a graceful stop: %v", err)
	}
}

// Counters count what their names say: a deduplicated enqueue inserts nothing.
func TestCountersInsertedExcludesDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	opts := &skiplock.EnqueueOpts{DeduplicationKey: "once"}
	for i := 0; i < 3; i++ {
		_, err := e.client.Enqueue(e.ctx, emailArgs{}, opts)
		e.must(err)
	}
	if got := e.client.Counters().Inserted; got != 1 {
		t.Errorf("Inserted = %d after one insert and two duplicates", got)
	}
}

// Admin verbs on a job in the wrong state say which state it is in and why.
func TestAdminVerbsExplainWrongState(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	r, err := e.client.Enqueue(e.ctx, emailArgs{}, nil)
	e.must(err)
	_, err = e.client.JobRetry(e.ctx, r.ID)
	if !errors.Is(err, skiplock.ErrJobState) || !strings.Contains(err.Error(), "it is pending") {
		t.Errorf("JobRetry on a pending job: %v", err)
	}
	_, err = e.client.JobRetry(e.ctx, "0191d0a2-0000-7000-8000-000000000000")
	if !errors.Is(err, skiplock.ErrNotFound) {
		t.Errorf("JobRetry on a missing job: %v", err)
	}
}

// With no Logger configured, failures reach slog's default logger at Warn, and a
// failure that keeps repeating is logged once per interval with a count, not once per
// attempt. Not parallel: it swaps the process-wide default logger.
func TestDefaultLoggerShowsRepeatingFailuresOnce(t *testing.T) {
	buf := &syncWriter{w: &bytes.Buffer{}}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)

	e := newEnv(t, skiplock.Config{})
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(context.Context, *skiplock.Job) error { return nil }, nil))
	c := e.newClient(skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}},
		PollInterval: time.Millisecond})
	startClient(t, c)
	// Take the jobs table away: every claim now fails.
	_, err := e.pool.Exec(e.ctx, "ALTER TABLE "+e.q("jobs")+" RENAME TO jobs_away")
	e.must(err)
	waitFor(t, 30*time.Second, "several failed claims", func() bool { return c.Counters().OperationFailures["claim"] >= 5 })
	_, err = e.pool.Exec(e.ctx, "ALTER TABLE "+e.q("jobs_away")+" RENAME TO jobs")
	e.must(err)
	// The recovery is recorded before it is logged (the log line is written outside
	// the lock), so wait for both.
	waitFor(t, 30*time.Second, "the claims to recover and the recovery to be logged", func() bool {
		ops := c.Operations()
		return len(ops) == 1 && !ops[0].Failing && strings.Contains(buf.String(), "skiplock: claim recovered")
	})
	out := buf.String()
	if n := strings.Count(out, "skiplock: claim failed"); n != 1 {
		t.Errorf("%d 'claim failed' lines for %d failures, want 1 (rate-limited):\n%s", n, c.Counters().OperationFailures["claim"], out)
	}
	if strings.Contains(out, "client started") {
		t.Errorf("routine Info lines reached the default logger:\n%s", out)
	}
}

// syncWriter serialises writes from the client's goroutines into one buffer.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// A refused heartbeat is tried again after a tenth of the interval, doubling, instead
// of a whole interval later: two refusals in a row, which waiting the interval turned
// into a lost lease under the default lease, now cost a fraction of one interval.
func TestHeartbeatRetriesSoonAfterAFailure(t *testing.T) {
	t.Parallel()
	buf := &syncWriter{w: &bytes.Buffer{}}
	e := newEnv(t, skiplock.Config{})
	// The first two heartbeats fail: a trigger refuses an update that keeps a job
	// running under its token, counting in a sequence, which a rollback does not undo.
	_, err := e.pool.Exec(e.ctx, `CREATE SEQUENCE `+e.q("heartbeats")+`;
CREATE FUNCTION `+e.q("refuse_heartbeats")+`() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status = 'running' AND NEW.status = 'running' AND NEW.lease_token = OLD.lease_token
     AND nextval('`+e.q("heartbeats")+`') <= 2 THEN
    RAISE EXCEPTION 'heartbeat refused by the test';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER refuse_heartbeats BEFORE UPDATE ON `+e.q("jobs")+` FOR EACH ROW EXECUTE FUNCTION `+e.q("refuse_heartbeats")+`()`)
	e.must(err)
	release := make(chan struct{})
	started := make(chan struct{})
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(ctx context.Context, job *skiplock.Job) error {
		close(started)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, nil))
	const interval = time.Second
	c := e.newClient(skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}},
		LeaseDuration: 3 * interval, HeartbeatInterval: interval,
		Logger: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	startClient(t, c)
	r, err := c.EnqueueRawTx(e.ctx, e.pool, "k", []byte(`{}`), nil)
	e.must(err)
	<-started
	waitFor(t, 30*time.Second, "a heartbeat to succeed after two refusals", func() bool {
		if c.Counters().OperationFailures["heartbeat"] != 2 {
			return false
		}
		for _, op := range c.Operations() {
			if op.Operation == "heartbeat" {
				// The recovery is logged just after it is recorded.
				return !op.Failing && strings.Contains(buf.String(), "heartbeat recovered")
			}
		}
		return false
	})
	close(release)
	waitFor(t, 30*time.Second, "the job to succeed", func() bool {
		j, err := c.JobGet(e.ctx, r.ID)
		return err == nil && j.State == skiplock.StateSucceeded
	})
	out := buf.String()
	// retry_in is the wait itself: a tenth of the interval, jittered by ±10%.
	first := regexp.MustCompile(`heartbeat failed.*retry_in=(\S+)`).FindStringSubmatch(out)
	if first == nil {
		t.Fatalf("no heartbeat failure logged:\n%s", out)
	}
	if d, err := time.ParseDuration(first[1]); err != nil || d < interval/10*9/10 || d > interval/10*11/10 {
		t.Fatalf("the first failure does not say it is retried in a tenth of the interval (retry_in=%s):\n%s", first[1], out)
	}
	// Retried after ~100 ms and ~200 ms, the heartbeat was failing for ~0.3 s; retried
	// at the interval it was failing for 2 s.
	m := regexp.MustCompile(`heartbeat recovered.*failing_for=(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no recovery line:\n%s", out)
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d >= interval {
		t.Fatalf("the heartbeat was failing for %s (%v), want less than one interval (%s)", m[1], err, interval)
	}
}

// A handler that completed its job with CompleteTx and keeps its transaction open
// holds the job's row lock until it commits. The heartbeat must not wait for that
// lock: it would hold every other lease of the process back with it (invisible,
// uncommitted renewals), and they would expire while their handlers run. Nor is the
// locked job's lease lost: its handler's context stays live.
func TestHeartbeatDoesNotWaitForALockedJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	var c *skiplock.Client
	holding, otherStarted := make(chan struct{}), make(chan struct{})
	releaseHolder, releaseOther := make(chan struct{}), make(chan struct{})
	holderCause := make(chan error, 1)
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("holder", func(ctx context.Context, job *skiplock.Job) error {
		tx, err := e.pool.Begin(e.ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(e.ctx)
		if err := c.CompleteTx(ctx, tx, job); err != nil {
			return err
		}
		close(holding)
		<-releaseHolder
		holderCause <- context.Cause(ctx)
		return tx.Commit(e.ctx)
	}, nil))
	e.must(ws.AddHandler("other", func(ctx context.Context, job *skiplock.Job) error {
		close(otherStarted)
		select {
		case <-releaseOther:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, nil))
	const lease = 2 * time.Second
	c = e.newClient(skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 2}},
		LeaseDuration: lease, HeartbeatInterval: lease / 10})
	startClient(t, c)
	var holderOnce, otherOnce sync.Once
	freeHolder := func() { holderOnce.Do(func() { close(releaseHolder) }) }
	freeOther := func() { otherOnce.Do(func() { close(releaseOther) }) }
	t.Cleanup(func() { freeHolder(); freeOther() }) // before the client stops, on failure too
	holder, err := c.EnqueueRawTx(e.ctx, e.pool, "holder", []byte(`{}`), nil)
	e.must(err)
	<-holding
	other, err := c.EnqueueRawTx(e.ctx, e.pool, "other", []byte(`{}`), nil)
	e.must(err)
	<-otherStarted
	leaseOf := func(id string) time.Time {
		var until time.Time
		e.must(e.pool.QueryRow(e.ctx, `SELECT lease_until FROM `+e.q("jobs")+` WHERE id = $1`, id).Scan(&until))
		return until
	}
	// The injected clock moves on by a quarter of the lease: the next heartbeat renews
	// the other job's lease from there. A heartbeat waiting for the holder's lock
	// renews nothing visible.
	first := leaseOf(other.ID)
	e.clock.Advance(lease / 4)
	waitFor(t, 10*lease, "the other job's lease to be renewed", func() bool {
		return leaseOf(other.ID).Equal(first.Add(lease / 4))
	})
	freeHolder()
	if cause := <-holderCause; cause != nil {
		t.Fatalf("the holder's context was cancelled while its transaction held the row: %v", cause)
	}
	freeOther()
	for _, id := range []string{holder.ID, other.ID} {
		waitFor(t, 30*time.Second, "job "+id+" to succeed", func() bool {
			j, err := c.JobGet(e.ctx, id)
			return err == nil && j.State == skiplock.StateSucceeded
		})
		if j, err := c.JobGet(e.ctx, id); err != nil || j.Attempt != 1 {
			t.Fatalf("job %s: %+v, %v; want one attempt", id, j, err)
		}
	}
}
