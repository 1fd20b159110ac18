package skiplock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
)

// A handler commits its business row, an outbox event and its job's completion in
// one transaction; the runtime then writes nothing more and reports the success.
func TestCompleteTxCommitsEffectsAndCompletionTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, err := e.pool.Exec(e.ctx, "CREATE TABLE "+e.q("invoices")+" (job_id uuid PRIMARY KEY)")
	e.must(err)
	ob := e.outbox()
	ws := skiplock.NewWorkers()
	var c *skiplock.Client
	e.must(ws.AddHandler("invoice", func(ctx context.Context, job *skiplock.Job) error {
		return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+e.q("invoices")+" VALUES ($1)", job.ID); err != nil {
				return err
			}
			if _, err := ob.Write(ctx, tx, outbox.Event{AggregateType: "invoice", AggregateID: job.ID, EventType: "invoice.issued", Payload: []byte(`{}`)}); err != nil {
				return err
			}
			return c.CompleteTx(ctx, tx, job)
		})
	}, nil))
	c = e.newClient(skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 4}}})
	events, unsub := c.Subscribe()
	defer unsub()
	const n = 20
	enqueueKind(e, c, "invoice", n)
	startClient(t, c)
	for i := 0; i < n; i++ {
		if ev := nextEvent(t, events, 30*time.Second); ev.Kind != skiplock.EventSucceeded {
			t.Fatalf("event %d: %s (%v), want succeeded", i, ev.Kind, ev.Err)
		}
	}
	if got := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'succeeded' AND attempts = 1"); got != n {
		t.Errorf("%d jobs succeeded on their first attempt, want %d", got, n)
	}
	if got := scalar[int64](e, "SELECT count(*) FROM "+e.q("invoices")); got != n {
		t.Errorf("%d invoices, want %d", got, n)
	}
	if got := scalar[int64](e, "SELECT count(*) FROM "+e.q("outbox")); got != n {
		t.Errorf("%d outbox events, want %d", got, n)
	}
	if p := c.Counters(); p.LeaseLost != 0 || p.Succeeded != n {
		t.Errorf("counters: %+v", p)
	}
}

// A zombie — a worker whose lease ran out and whose job another worker now holds —
// cannot commit its business write: CompleteTx fails with ErrLeaseLost and leaves its
// transaction aborted, so even a commit the caller insists on writes nothing.
func TestCompleteTxFencesOutAZombie(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{LeaseDuration: 10 * time.Second, HeartbeatInterval: time.Second})
	_, err := e.pool.Exec(e.ctx, "CREATE TABLE "+e.q("invoices")+" (worker text)")
	e.must(err)
	enqueueKind(e, e.client, "invoice", 1)
	zombie := claimOne(e, e.client)
	e.clock.Advance(11 * time.Second) // the zombie's lease runs out
	_, err = e.client.Manual().Reclaim(e.ctx)
	e.must(err)
	e.clock.Advance(time.Hour) // past the retry backoff
	live := claimOne(e, e.client)
	if live.ID != zombie.ID || live.LeaseToken == zombie.LeaseToken {
		t.Fatalf("the job was not taken over: %+v", live)
	}

	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	_, err = tx.Exec(e.ctx, "INSERT INTO "+e.q("invoices")+" VALUES ('zombie')")
	e.must(err)
	if err := e.client.CompleteTx(e.ctx, tx, zombie); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("CompleteTx by the zombie: %v, want ErrLeaseLost", err)
	}
	if err := tx.Commit(e.ctx); err == nil {
		t.Fatal("the zombie's transaction committed")
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("invoices")); n != 0 {
		t.Fatalf("the zombie's business row survived (%d rows)", n)
	}

	// The live worker completes in its own transaction.
	e.must(pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(e.ctx, "INSERT INTO "+e.q("invoices")+" VALUES ('live')"); err != nil {
			return err
		}
		return e.client.CompleteTx(e.ctx, tx, live)
	}))
	if w := scalar[string](e, "SELECT string_agg(worker, ',') FROM "+e.q("invoices")); w != "live" {
		t.Errorf("invoices by %q, want only the live worker's", w)
	}
	if st := scalar[string](e, "SELECT status::text FROM "+e.q("jobs")+" WHERE id = $1", live.ID); st != "succeeded" {
		t.Errorf("job %s after the live worker's CompleteTx", st)
	}
}

// A handler whose transaction rolls back after CompleteTx leaves its job running
// under its lease: what the handler returns is then written as usual.
func TestCompleteTxRolledBackLeavesTheRuntimeOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ws := skiplock.NewWorkers()
	var c *skiplock.Client
	errRolledBack := errors.New("the business write failed")
	e.must(ws.AddHandler("rollback", func(ctx context.Context, job *skiplock.Job) error {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			return err
		}
		if err := c.CompleteTx(ctx, tx, job); err != nil {
			return err
		}
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		return errRolledBack
	}, &skiplock.WorkerOpts{MaxAttempts: 5}))
	c = e.newClient(skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}}})
	events, unsub := c.Subscribe()
	defer unsub()
	enqueueKind(e, c, "rollback", 1)
	startClient(t, c)
	ev := nextEvent(t, events, 30*time.Second)
	if ev.Kind != skiplock.EventRetried || !errors.Is(ev.Err, errRolledBack) {
		t.Fatalf("event %s (%v), want the handler's retry", ev.Kind, ev.Err)
	}
	if st := scalar[string](e, "SELECT status::text || ':' || last_error FROM "+e.q("jobs")); st != "pending:the business write failed" {
		t.Errorf("job after the rolled-back CompleteTx: %s", st)
	}
}

// CompleteTx works through database/sql, and refuses a job that is not running
// under a lease.
func TestCompleteTxThroughDatabaseSQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	enqueueKind(e, e.client, "k", 1)
	job := claimOne(e, e.client)
	_ = stdlib.GetDefaultDriver()
	db, err := sql.Open("pgx", pgtest.URL(t))
	e.must(err)
	defer db.Close()
	tx, err := db.BeginTx(e.ctx, nil)
	e.must(err)
	e.must(e.client.CompleteTx(e.ctx, skiplock.FromSQL(tx), job))
	e.must(tx.Commit())
	if st := scalar[string](e, "SELECT status::text FROM "+e.q("jobs")+" WHERE id = $1", job.ID); st != "succeeded" {
		t.Errorf("job %s after CompleteTx through database/sql", st)
	}
	if err := e.client.CompleteTx(e.ctx, e.pool, &skiplock.Job{ID: job.ID}); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("CompleteTx of a job without a lease: %v", err)
	}
}

// Metadata given at enqueue, and added by an enqueue hook, comes back with the job.
func TestMetadataAndEnqueueHooks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	hook := func(ctx context.Context, p *skiplock.EnqueueParams) error {
		skiplock.SetMetadata(p, "request_id", "r-1")
		return nil
	}
	c := e.newClient(skiplock.Config{EnqueueHooks: []skiplock.EnqueueHook{hook}})
	shared := map[string]string{"tenant": "acme"}
	_, err := c.Enqueue(e.ctx, emailArgs{To: "a"}, &skiplock.EnqueueOpts{Metadata: shared})
	e.must(err)
	params := make([]skiplock.EnqueueParams, 100) // a COPY-sized batch
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: emailArgs{To: "b"}, Opts: skiplock.EnqueueOpts{Metadata: shared}}
	}
	_, err = c.EnqueueManyTx(e.ctx, e.pool, params)
	e.must(err)
	if len(shared) != 1 {
		t.Errorf("the hook wrote into the caller's map: %v", shared)
	}
	jobs, err := c.Manual().Claim(e.ctx, "default", 200)
	e.must(err)
	if len(jobs) != 101 {
		t.Fatalf("claimed %d", len(jobs))
	}
	for _, j := range jobs {
		if j.Metadata["tenant"] != "acme" || j.Metadata["request_id"] != "r-1" || len(j.Metadata) != 2 {
			t.Fatalf("job metadata %v", j.Metadata)
		}
	}
	for name, m := range map[string]map[string]string{
		"NUL value":    {"k": "a\x00b"},
		"control key":  {"k\n": "v"},
		"empty key":    {"": "v"},
		"long value":   {"k": string(make([]byte, skiplock.MaxMetadataValueLen+1))},
		"invalid utf8": {"k": "\xff"},
	} {
		if _, err := e.client.Enqueue(e.ctx, emailArgs{}, &skiplock.EnqueueOpts{Metadata: m}); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	refuse := e.newClient(skiplock.Config{EnqueueHooks: []skiplock.EnqueueHook{func(context.Context, *skiplock.EnqueueParams) error {
		return errors.New("no")
	}}})
	if _, err := refuse.Enqueue(e.ctx, emailArgs{}, nil); err == nil {
		t.Error("a hook's error did not refuse the enqueue")
	}
}

// A handler whose CompleteTx committed and that then returns an error succeeded: the
// completion stands, so the runtime reports a success (the event carries the
// handler's error), not a lost lease. (One whose CompleteTx rolled back is retried:
// TestCompleteTxRolledBackLeavesTheRuntimeOutcome.)
func TestCompleteTxThenAnErrorIsASuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ws := skiplock.NewWorkers()
	var c *skiplock.Client
	late := errors.New("a cleanup after the commit failed")
	e.must(ws.AddHandler("committed", func(ctx context.Context, job *skiplock.Job) error {
		if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { return c.CompleteTx(ctx, tx, job) }); err != nil {
			return err
		}
		return late
	}, nil))
	c = e.newClient(skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 2}}})
	events, unsub := c.Subscribe()
	defer unsub()
	const n = 3
	enqueueKind(e, c, "committed", n)
	startClient(t, c)
	for i := 0; i < n; i++ {
		if ev := nextEvent(t, events, 30*time.Second); ev.Kind != skiplock.EventSucceeded || !errors.Is(ev.Err, late) {
			t.Errorf("a committed CompleteTx, then an error: event %s (%v), want succeeded carrying the handler's error", ev.Kind, ev.Err)
		}
	}
	if p := c.Counters(); p.LeaseLost != 0 || p.Succeeded != n {
		t.Errorf("counters: lease lost %d, succeeded %d; want 0, %d", p.LeaseLost, p.Succeeded, n)
	}
	if got := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'succeeded'"); got != n {
		t.Errorf("%d jobs succeeded, want %d", got, n)
	}
}
