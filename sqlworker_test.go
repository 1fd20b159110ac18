package skiplock_test

// The SQL worker protocol (migration 0018, docs/sql_workers.md): claim_jobs,
// heartbeat_job and the fenced outcomes, checked against the Go runtime row for row,
// and on their own (claim order, pause, sequences, kinds, limits, fencing, bad input,
// the caller's transaction).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/skiplocktest"
)

// sqlWorkerID is the worker name of both paths, so worker_id and the history agree.
const sqlWorkerID = "agree-worker"

// sqlClaimed is a row of claim_jobs.
type sqlClaimed struct {
	ID, Kind, Args      string
	Attempt, MaxAttempt int
	Priority            int
	Token               string
	LeaseUntil          time.Time
}

// sqlClaim calls claim_jobs at the test clock's time.
func (e *env) sqlClaim(db queryer, queue string, n int, kinds []string) ([]sqlClaimed, error) {
	rows, err := db.Query(e.ctx, `SELECT id::text, kind, args::text, attempt, max_attempts, priority, lease_token::text, lease_until
FROM `+e.q("claim_jobs")+`($1, $2, n => $3, lease => '30 seconds', kinds => $4, now => $5)`, queue, sqlWorkerID, n, kinds, e.clock.Now())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (sqlClaimed, error) {
		var c sqlClaimed
		err := r.Scan(&c.ID, &c.Kind, &c.Args, &c.Attempt, &c.MaxAttempt, &c.Priority, &c.Token, &c.LeaseUntil)
		return c, err
	})
}

type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// sqlClaimedJob enqueues a job of kind k in the default queue and claims it through
// claim_jobs.
func (e *env) sqlClaimedJob() (skiplock.EnqueueResult, sqlClaimed) {
	e.t.Helper()
	r, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), nil)
	e.must(err)
	c, err := e.sqlClaim(e.pool, skiplock.DefaultQueue, 1, nil)
	e.must(err)
	if len(c) != 1 || c[0].ID != r.ID {
		e.t.Fatalf("claim_jobs took %+v, want job %s", c, r.ID)
	}
	return r, c[0]
}

// sqlCall runs one of the protocol's text-returning functions at the test clock's
// time: fn(job_id, lease_token, args…, now => clock).
func (e *env) sqlCall(db queryer, fn, id, token, args string, params ...any) (string, error) {
	if args != "" {
		args = ", " + args
	}
	var res string
	err := db.QueryRow(e.ctx, "SELECT "+e.q(fn)+"($1, $2"+args+", now => $"+fmt.Sprint(len(params)+3)+")",
		append(append([]any{id, token}, params...), e.clock.Now())...).Scan(&res)
	return res, err
}

func (e *env) mustCall(fn, id, token, args string, params ...any) string {
	e.t.Helper()
	res, err := e.sqlCall(e.pool, fn, id, token, args, params...)
	e.must(err)
	return res
}

// jobRow is a job's row as JSON, without what differs between two jobs by nature: id,
// txid, and the lease token (only whether there is one).
func (e *env) jobRow(id string) string {
	return scalar[string](e, `SELECT (to_jsonb(j) - 'id' - 'txid' - 'lease_token' || jsonb_build_object('leased', j.lease_token IS NOT NULL))::text
FROM `+e.q("jobs")+` j WHERE id = $1`, id)
}

// TestSQLWorkerAgreesWithGo drives a job through the Go runtime and an identical one
// through the SQL functions, at the same clock readings, and compares every column.
func TestSQLWorkerAgreesWithGo(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 9000) + "x" // 18,001 bytes: cut by the text policy mid-way
	noJitter := skiplock.ExponentialBackoff{Jitter: -1}
	cases := []struct {
		name, mode string
		maxAttempt int
		goErr      error  // what the Go handler returns
		sql        string // the SQL outcome: function and its arguments after (id, token)
		params     []any
		want       string // the status both reach
	}{
		{"complete with output", "complete", 0, nil, "complete_job", []any{`{"sent": 3}`}, "succeeded"},
		{"retry", "retry", 0, errors.New("smtp: 451"), "fail_job", []any{"smtp: 451", false, "1 second"}, "pending"},
		{"retry exhausted", "retry", 1, errors.New("smtp: 451"), "fail_job", []any{"smtp: 451", false, "1 second"}, "failed"},
		{"long error", "retry", 0, errors.New(long), "fail_job", []any{long, false, "1 second"}, "pending"},
		{"permanent", "permanent", 0, skiplock.Permanent(errors.New("bad address")), "fail_job",
			[]any{"bad address", true, nil}, "failed"}, // the bare text: docs/sql_workers.md, "Error texts"
		{"snooze", "snooze", 0, skiplock.Snooze(5 * time.Minute), "snooze_job", []any{"5 minutes"}, "pending"},
		{"cancel", "cancel", 0, skiplock.Cancel(errors.New("withdrawn")), "cancel_job",
			[]any{"withdrawn"}, "cancelled"},
		{"permanent wrapped", "permanent", 0, fmt.Errorf("charging: %w", skiplock.Permanent(errors.New("card declined"))), "fail_job",
			[]any{"charging: card declined", true, nil}, "failed"},
		{"cancel without a reason", "cancel", 0, skiplock.Cancel(nil), "cancel_job", []any{nil}, "cancelled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, skiplock.Config{})
			ws := skiplock.NewWorkers()
			e.must(ws.AddHandler("agree", func(ctx context.Context, job *skiplock.Job) error {
				if c.goErr == nil {
					return job.SetOutput(json.RawMessage(c.params[0].(string)))
				}
				return c.goErr
			}, &skiplock.WorkerOpts{RetryPolicy: noJitter}))
			client := e.newClient(skiplock.Config{ID: sqlWorkerID, Workers: ws, ReclaimInterval: -1,
				Queues: map[string]skiplock.QueueConfig{"agree": {MaxWorkers: 1}}})
			opts := &skiplock.EnqueueOpts{Queue: "agree", MaxAttempts: c.maxAttempt}
			payload := []byte(`{"mode": "` + c.mode + `"}`)

			goJob, err := client.EnqueueRaw(e.ctx, "agree", payload, opts)
			e.must(err)
			skiplocktest.Drain(e.ctx, t, client, "agree")

			sqlJob, err := client.EnqueueRaw(e.ctx, "agree", payload, opts)
			e.must(err)
			claimed, err := e.sqlClaim(e.pool, "agree", 10, nil)
			e.must(err)
			if len(claimed) != 1 || claimed[0].ID != sqlJob.ID {
				t.Fatalf("claim_jobs took %+v, want job %s alone", claimed, sqlJob.ID)
			}
			args := make([]string, len(c.params))
			for i := range args {
				args[i] = fmt.Sprintf("$%d", i+3)
			}
			got := e.mustCall(c.sql, sqlJob.ID, claimed[0].Token, strings.Join(args, ", "), c.params...)
			if got != c.want {
				t.Errorf("%s returned %q, want %q", c.sql, got, c.want)
			}
			if g, s := e.jobRow(goJob.ID), e.jobRow(sqlJob.ID); g != s {
				t.Errorf("the rows differ\n go: %s\nsql: %s", g, s)
			}
		})
	}

	// A lease lost to the reclaimer (Go's, reclaim_jobs) and the job claimed again: the
	// first worker's completion and heartbeat change nothing, the second worker's
	// completion counts.
	t.Run("lease loss and a stale completion", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, skiplock.Config{})
		ws := skiplock.NewWorkers()
		e.must(ws.AddHandler("agree", func(context.Context, *skiplock.Job) error { return nil }, &skiplock.WorkerOpts{RetryPolicy: noJitter}))
		client := e.newClient(skiplock.Config{ID: sqlWorkerID, Workers: ws, LeaseDuration: 30 * time.Second})
		m := client.Manual()
		payload := []byte(`{"mode": "stale"}`)
		opts := &skiplock.EnqueueOpts{Queue: "agree"}

		goJob, err := client.EnqueueRaw(e.ctx, "agree", payload, opts)
		e.must(err)
		first, err := m.Claim(e.ctx, "agree", 1)
		e.must(err)
		e.clock.Advance(31 * time.Second)
		_, err = m.Reclaim(e.ctx)
		e.must(err)
		e.clock.Advance(2 * time.Second)
		second, err := m.Claim(e.ctx, "agree", 1)
		e.must(err)
		if len(first) != 1 || len(second) != 1 || first[0].ID != goJob.ID || second[0].ID != goJob.ID {
			t.Fatalf("the Go path claimed %v then %v", first, second)
		}
		if err := m.Complete(e.ctx, first[0]); !errors.Is(err, skiplock.ErrLeaseLost) {
			t.Fatalf("the stale Go completion: %v, want ErrLeaseLost", err)
		}
		e.must(m.Complete(e.ctx, second[0]))

		e.clock.Set(t0)
		sqlJob, err := client.EnqueueRaw(e.ctx, "agree", payload, opts)
		e.must(err)
		c1, err := e.sqlClaim(e.pool, "agree", 1, nil)
		e.must(err)
		e.clock.Advance(31 * time.Second)
		if got := e.mustCall("heartbeat_job", sqlJob.ID, c1[0].Token, ""); got != "lost" {
			t.Errorf("a heartbeat after the lease ran out returned %q, want lost", got)
		}
		// The SQL path's reclaimer, with the delay the Go path's retry policy gave.
		if n := scalar[int](e, `SELECT `+e.q("reclaim_jobs")+`('agree', delay => '1 second', now => $1)`, e.clock.Now()); n != 1 {
			t.Errorf("reclaim_jobs reclaimed %d jobs, want 1", n)
		}
		e.clock.Advance(2 * time.Second)
		c2, err := e.sqlClaim(e.pool, "agree", 1, nil)
		e.must(err)
		if len(c1) != 1 || len(c2) != 1 || c1[0].ID != sqlJob.ID || c2[0].ID != sqlJob.ID || c1[0].Token == c2[0].Token {
			t.Fatalf("the SQL path claimed %+v then %+v", c1, c2)
		}
		before := e.jobRow(sqlJob.ID)
		for _, fn := range []string{"complete_job", "fail_job", "snooze_job", "cancel_job", "heartbeat_job"} {
			args, params := "", []any(nil)
			switch fn {
			case "fail_job", "cancel_job":
				args, params = "$3", []any{"late"}
			case "snooze_job":
				args, params = "$3", []any{"1 minute"}
			}
			if got := e.mustCall(fn, sqlJob.ID, c1[0].Token, args, params...); got != "lost" {
				t.Errorf("stale %s returned %q, want lost", fn, got)
			}
		}
		if after := e.jobRow(sqlJob.ID); after != before {
			t.Errorf("stale calls changed the row\nbefore: %s\n after: %s", before, after)
		}
		if got := e.mustCall("complete_job", sqlJob.ID, c2[0].Token, ""); got != "succeeded" {
			t.Errorf("the live completion returned %q", got)
		}
		if g, s := e.jobRow(goJob.ID), e.jobRow(sqlJob.ID); g != s {
			t.Errorf("the rows differ\n go: %s\nsql: %s", g, s)
		}
	})

	// CompleteTx and complete_job in the caller's transaction, with a business write.
	t.Run("completion in the caller's transaction", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, skiplock.Config{})
		client := e.newClient(skiplock.Config{ID: sqlWorkerID})
		_, err := e.pool.Exec(e.ctx, `CREATE TABLE `+e.q("receipts")+` (job uuid PRIMARY KEY)`)
		e.must(err)
		opts := &skiplock.EnqueueOpts{Queue: "agree"}
		goJob, err := client.EnqueueRaw(e.ctx, "agree", []byte(`{}`), opts)
		e.must(err)
		claimed, err := client.Manual().Claim(e.ctx, "agree", 1)
		e.must(err)
		e.must(pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, `INSERT INTO `+e.q("receipts")+` VALUES ($1)`, goJob.ID); err != nil {
				return err
			}
			return client.CompleteTx(e.ctx, tx, claimed[0])
		}))

		sqlJob, err := client.EnqueueRaw(e.ctx, "agree", []byte(`{}`), opts)
		e.must(err)
		c, err := e.sqlClaim(e.pool, "agree", 1, nil)
		e.must(err)
		e.must(pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, `INSERT INTO `+e.q("receipts")+` VALUES ($1)`, sqlJob.ID); err != nil {
				return err
			}
			res, err := e.sqlCall(tx, "complete_job", sqlJob.ID, c[0].Token, "abort_if_lost => true")
			if err == nil && res != "succeeded" {
				err = fmt.Errorf("complete_job returned %q", res)
			}
			return err
		}))
		if g, s := e.jobRow(goJob.ID), e.jobRow(sqlJob.ID); g != s {
			t.Errorf("the rows differ\n go: %s\nsql: %s", g, s)
		}
		if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("receipts")); n != 2 {
			t.Errorf("%d receipts, want 2", n)
		}

		// A stale completion in a transaction: 'lost', or with abort_if_lost SK409 and
		// the business write gone with the transaction.
		stale, err := client.EnqueueRaw(e.ctx, "agree", []byte(`{}`), opts)
		e.must(err)
		c, err = e.sqlClaim(e.pool, "agree", 1, nil)
		e.must(err)
		_, err = client.JobCancel(e.ctx, stale.ID, "operator")
		e.must(err)
		err = pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, `INSERT INTO `+e.q("receipts")+` VALUES ($1)`, stale.ID); err != nil {
				return err
			}
			res, err := e.sqlCall(tx, "complete_job", stale.ID, c[0].Token, "")
			if err != nil || res != "lost" {
				t.Errorf("a stale complete_job in a transaction: %q, %v; want lost", res, err)
			}
			_, err = e.sqlCall(tx, "complete_job", stale.ID, c[0].Token, "abort_if_lost => true")
			return err
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "SK409" {
			t.Errorf("abort_if_lost on a lost lease: %v, want SQLSTATE SK409", err)
		}
		if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("receipts")); n != 2 {
			t.Errorf("%d receipts after the aborted transaction, want 2", n)
		}
		if st := scalar[string](e, `SELECT status::text FROM `+e.q("jobs")+` WHERE id = $1`, stale.ID); st != "cancelled" {
			t.Errorf("the stale job is %s, want cancelled", st)
		}
	})
}

// TestSQLClaim: claim order, run_at, n, kinds, pause, sequences, and the refusal of a
// queue a limit may govern.
func TestSQLClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	enq := func(kind string, o skiplock.EnqueueOpts) string {
		t.Helper()
		o.Queue = "q"
		r, err := e.client.EnqueueRaw(e.ctx, kind, []byte(`{}`), &o)
		e.must(err)
		return r.ID
	}
	later := enq("a", skiplock.EnqueueOpts{RunAt: t0.Add(time.Minute)})
	low := enq("a", skiplock.EnqueueOpts{Priority: -1})
	first := enq("a", skiplock.EnqueueOpts{})
	second := enq("b", skiplock.EnqueueOpts{})
	high := enq("b", skiplock.EnqueueOpts{Priority: 5})
	seq1 := enq("c", skiplock.EnqueueOpts{Sequence: &skiplock.SequenceOpts{Key: "s"}})
	seq2 := enq("c", skiplock.EnqueueOpts{Sequence: &skiplock.SequenceOpts{Key: "s"}, Priority: 9})

	ids := func(cs []sqlClaimed) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	check := func(what string, got []sqlClaimed, err error, want ...string) {
		t.Helper()
		e.must(err)
		if g := strings.Join(ids(got), ","); g != strings.Join(want, ",") {
			t.Errorf("%s claimed %s, want %s", what, g, strings.Join(want, ","))
		}
	}
	e.must(e.client.QueuePause(e.ctx, "q"))
	got, err := e.sqlClaim(e.pool, "q", 10, nil)
	check("a paused queue", got, err)
	e.must(e.client.QueueResume(e.ctx, "q"))

	got, err = e.sqlClaim(e.pool, "q", 2, []string{"b"})
	check("kinds b", got, err, high, second)
	if got[0].Attempt != 1 || got[0].MaxAttempt != 8 || got[0].Token != got[1].Token || got[0].Kind != "b" ||
		!got[0].LeaseUntil.Equal(t0.Add(30*time.Second)) || got[0].Priority != 5 {
		t.Errorf("claimed row %+v", got[0])
	}
	// seq2 has the higher priority but waits for seq1; later is not due.
	got, err = e.sqlClaim(e.pool, "q", 10, nil)
	check("the rest", got, err, first, seq1, low)
	got, err = e.sqlClaim(e.pool, "q", 10, nil)
	check("with seq1 running", got, err)
	if e.mustCall("complete_job", seq1, scalar[string](e, `SELECT lease_token::text FROM `+e.q("jobs")+` WHERE id = $1`, seq1), "") != "succeeded" {
		t.Fatal("completing seq1")
	}
	got, err = e.sqlClaim(e.pool, "q", 10, nil)
	check("after seq1", got, err, seq2)
	e.clock.Advance(time.Minute)
	got, err = e.sqlClaim(e.pool, "q", 10, nil)
	check("after a minute", got, err, later)

	// Limits: refused, naming the limit; a claim of kinds without one goes ahead.
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Kind: "a", MaxRunning: 1}))
	enq("b", skiplock.EnqueueOpts{})
	_, err = e.sqlClaim(e.pool, "q", 1, nil)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "0A000" || !strings.Contains(pgErr.Message, `kind limit on "a"`) {
		t.Errorf("a claim while kind a has a limit: %v, want 0A000 naming it", err)
	}
	got, err = e.sqlClaim(e.pool, "q", 1, []string{"b"})
	if err != nil || len(got) != 1 {
		t.Errorf("claiming kind b alone while kind a has a limit: %v, %v", got, err)
	}
	_, err = e.sqlClaim(e.pool, "q", 1, []string{"a", "b"})
	if !errors.As(err, &pgErr) || pgErr.Code != "0A000" {
		t.Errorf("claiming kinds a and b: %v, want 0A000", err)
	}
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: "q", Key: skiplock.EachKey, Rate: 5, Per: time.Second}))
	_, err = e.sqlClaim(e.pool, "q", 1, []string{"b"})
	if !errors.As(err, &pgErr) || pgErr.Code != "0A000" || !strings.Contains(pgErr.Message, `queue limit on "q"`) {
		t.Errorf("a claim of a limited queue: %v, want 0A000 naming the limit", err)
	}

	// A fair queue: refused (its rotation is the Go fair claim's), and nothing taken;
	// plain again, claimed again.
	// (Kind b alone: kind a's limit would refuse the claim first.)
	_, err = e.client.EnqueueRaw(e.ctx, "b", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "f", ConcurrencyKey: "acme"})
	e.must(err)
	e.must(e.client.QueueSetFair(e.ctx, "f", nil))
	_, err = e.sqlClaim(e.pool, "f", 1, []string{"b"})
	if !errors.As(err, &pgErr) || pgErr.Code != "0A000" || !strings.Contains(pgErr.Message, `queue "f"`) || !strings.Contains(pgErr.Message, "fair") {
		t.Errorf("a claim of a fair queue: %v, want 0A000 naming the queue", err)
	}
	if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("jobs")+` WHERE queue = 'f' AND status = 'pending'`); n != 1 {
		t.Errorf("%d pending jobs of the fair queue after the refused claim, want 1", n)
	}
	e.must(e.client.QueueUnsetFair(e.ctx, "f"))
	got, err = e.sqlClaim(e.pool, "f", 1, []string{"b"})
	if err != nil || len(got) != 1 {
		t.Errorf("claiming the queue made plain again: %v, %v", got, err)
	}
}

// TestSQLWorkerBadInput: every refused argument raises 22023 naming it, and writes
// nothing.
func TestSQLWorkerBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	r, c := e.sqlClaimedJob()
	tok := c.Token
	before := e.jobRow(r.ID)
	big := `{"x": "` + strings.Repeat("a", 70000) + `"}`
	cases := []struct {
		sql    string
		params []any
		column string
	}{
		{`claim_jobs('', 'w')`, nil, "queue"},
		{`claim_jobs('1q', 'w')`, nil, "queue"},
		{`claim_jobs('default', '')`, nil, "worker"},
		{`claim_jobs('default', E'w\n')`, nil, "worker"},
		{`claim_jobs('default', 'w', n => 0)`, nil, "n"},
		{`claim_jobs('default', 'w', n => 1001)`, nil, "n"},
		{`claim_jobs('default', 'w', lease => '10 ms')`, nil, "lease"},
		{`claim_jobs('default', 'w', kinds => '{}')`, nil, "kinds"},
		{`heartbeat_job(NULL, $1::uuid)`, []any{tok}, "job_id"},
		{`heartbeat_job($1::uuid, $2::uuid, lease => '0')`, []any{r.ID, tok}, "lease"},
		{`complete_job($1::uuid, NULL)`, []any{r.ID}, "lease_token"},
		{`complete_job($1::uuid, $2::uuid, $3::jsonb)`, []any{r.ID, tok, big}, "output"},
		{`fail_job($1::uuid, $2::uuid, 'x', delay => '-1 second')`, []any{r.ID, tok}, "delay"},
		{`snooze_job($1::uuid, $2::uuid, NULL)`, []any{r.ID, tok}, "delay"},
		{`snooze_job($1::uuid, $2::uuid, '87601 hours')`, []any{r.ID, tok}, "delay"},
		{`finish_jobs(ARRAY[$1::uuid], ARRAY[$2::uuid], '{explode}', '{NULL}', '{NULL}', '{NULL}')`, []any{r.ID, tok}, "action"},
		{`finish_jobs(ARRAY[$1::uuid], ARRAY[$2::uuid], '{complete,complete}', '{NULL}', '{NULL}', '{NULL}')`, []any{r.ID, tok}, "job_ids"},
		{`finish_jobs('{}', '{}', '{}', '{}', '{}', '{}')`, nil, "job_ids"},
		{`finish_jobs(ARRAY[$1::uuid, $1::uuid], ARRAY[$2::uuid, NULL], '{complete,complete}', '{NULL,NULL}', '{NULL,NULL}', '{NULL,NULL}')`, []any{r.ID, tok}, "lease_token"},
	}
	for _, tc := range cases {
		_, err := e.pool.Exec(e.ctx, `SELECT * FROM `+e.q(tc.sql), tc.params...)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != tc.column ||
			!strings.HasPrefix(pgErr.Message, "skiplock: invalid "+tc.column) {
			t.Errorf("%s: %v, want 22023 naming %s", tc.sql, err, tc.column)
		}
	}
	if after := e.jobRow(r.ID); after != before {
		t.Errorf("refused calls changed the job\nbefore: %s\n after: %s", before, after)
	}
	if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("jobs")+` WHERE status = 'running'`); n != 1 {
		t.Errorf("%d running jobs, want 1", n)
	}
}

// TestSQLHeartbeat: a renewal extends the lease under the same token; a job locked by
// another transaction is busy, not waited for; the default retry delay is Go's
// default policy's.
func TestSQLHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	r, first := e.sqlClaimedJob()
	c := []sqlClaimed{first}
	e.clock.Advance(10 * time.Second)
	if got := e.mustCall("heartbeat_job", r.ID, c[0].Token, "lease => '1 minute'"); got != "renewed" {
		t.Fatalf("heartbeat: %q", got)
	}
	var until time.Time
	var token string
	e.must(e.pool.QueryRow(e.ctx, `SELECT lease_until, lease_token::text FROM `+e.q("jobs")+` WHERE id = $1`, r.ID).Scan(&until, &token))
	if !until.Equal(t0.Add(70*time.Second)) || token != c[0].Token {
		t.Errorf("after the heartbeat: lease until %s under %s, want %s under %s", until, token, t0.Add(70*time.Second), c[0].Token)
	}

	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	defer tx.Rollback(e.ctx)
	_, err = tx.Exec(e.ctx, `SELECT 1 FROM `+e.q("jobs")+` WHERE id = $1 FOR UPDATE`, r.ID)
	e.must(err)
	if got := e.mustCall("heartbeat_job", r.ID, c[0].Token, ""); got != "busy" {
		t.Errorf("heartbeat of a locked job: %q, want busy", got)
	}
	e.must(tx.Rollback(e.ctx))

	// The default retry delay: 1s·2^(attempt−1) plus up to 10%.
	if got := e.mustCall("fail_job", r.ID, c[0].Token, "$3", "boom"); got != "pending" {
		t.Fatalf("fail_job: %q", got)
	}
	for attempt := 2; attempt <= 4; attempt++ {
		e.clock.Advance(time.Hour)
		c, err = e.sqlClaim(e.pool, skiplock.DefaultQueue, 1, nil)
		e.must(err)
		if len(c) != 1 || c[0].Attempt != attempt {
			t.Fatalf("attempt %d: claimed %+v", attempt, c)
		}
		e.mustCall("fail_job", r.ID, c[0].Token, "$3", "boom")
		delay := scalar[time.Time](e, `SELECT run_at FROM `+e.q("jobs")+` WHERE id = $1`, r.ID).Sub(e.clock.Now())
		base := time.Second << (attempt - 1)
		if delay < base || delay > base+base/10 {
			t.Errorf("attempt %d: retried after %s, want %s plus up to 10%%", attempt, delay, base)
		}
	}
}

// TestSQLReclaim: reclaim_jobs returns expired leases to the queue after the default
// retry delay, fails them at max_attempts, skips a locked job and leaves live leases.
func TestSQLReclaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	retried, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "r"})
	e.must(err)
	failed, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "r", MaxAttempts: 1})
	e.must(err)
	locked, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "r"})
	e.must(err)
	_, err = e.sqlClaim(e.pool, "r", 3, nil)
	e.must(err)
	live, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "r"})
	e.must(err)
	e.clock.Advance(20 * time.Second)
	_, err = e.sqlClaim(e.pool, "r", 1, nil)
	e.must(err)
	e.clock.Advance(11 * time.Second)

	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	defer tx.Rollback(e.ctx)
	_, err = tx.Exec(e.ctx, `SELECT 1 FROM `+e.q("jobs")+` WHERE id = $1 FOR UPDATE`, locked.ID)
	e.must(err)
	if n := scalar[int](e, `SELECT `+e.q("reclaim_jobs")+`(now => $1)`, e.clock.Now()); n != 2 {
		t.Errorf("reclaim_jobs reclaimed %d, want 2", n)
	}
	e.must(tx.Rollback(e.ctx))
	state := func(id string) (st string, delay time.Duration, lastErr string) {
		var runAt time.Time
		var le *string
		e.must(e.pool.QueryRow(e.ctx, `SELECT status::text, run_at, last_error FROM `+e.q("jobs")+` WHERE id = $1`, id).Scan(&st, &runAt, &le))
		if le != nil {
			lastErr = *le
		}
		return st, runAt.Sub(e.clock.Now()), lastErr
	}
	if st, d, le := state(retried.ID); st != "pending" || d < time.Second || d > 1100*time.Millisecond ||
		le != "lease expired on worker "+sqlWorkerID+" (attempt 1)" {
		t.Errorf("the reclaimed job: %s after %s, %q", st, d, le)
	}
	if st, _, _ := state(failed.ID); st != "failed" {
		t.Errorf("the job at max_attempts is %s, want failed", st)
	}
	if st, _, _ := state(locked.ID); st != "running" {
		t.Errorf("the locked job is %s, want still running (skipped)", st)
	}
	if st, _, _ := state(live.ID); st != "running" {
		t.Errorf("the job with a live lease is %s, want running", st)
	}
	if n := scalar[int](e, `SELECT `+e.q("reclaim_jobs")+`(now => $1)`, e.clock.Now()); n != 1 {
		t.Errorf("the second pass reclaimed %d, want the once-locked job", n)
	}
}

// TestSQLWorkerPartitioned: the functions work unchanged in the partitioned layout.
func TestSQLWorkerPartitioned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	e.partition(skiplock.PartitionOpts{Premake: 2})
	r, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), nil)
	e.must(err)
	c, err := e.sqlClaim(e.pool, skiplock.DefaultQueue, 5, nil)
	e.must(err)
	if len(c) != 1 || c[0].ID != r.ID {
		t.Fatalf("claimed %+v", c)
	}
	if got := e.mustCall("heartbeat_job", r.ID, c[0].Token, ""); got != "renewed" {
		t.Errorf("heartbeat: %q", got)
	}
	if got := e.mustCall("complete_job", r.ID, c[0].Token, "$3", `{"ok": true}`); got != "succeeded" {
		t.Errorf("complete: %q", got)
	}
	if got := e.mustCall("cancel_job", r.ID, c[0].Token, ""); got != "lost" {
		t.Errorf("a second outcome: %q, want lost", got)
	}
}

// TestSQLFinishBatch: finish_jobs records many outcomes at once, one result per
// outcome in their order, a stale one among them changing nothing.
func TestSQLFinishBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	var ids []string
	for range 4 {
		r, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), nil)
		e.must(err)
		ids = append(ids, r.ID)
	}
	c, err := e.sqlClaim(e.pool, skiplock.DefaultQueue, 4, nil)
	e.must(err)
	if len(c) != 4 {
		t.Fatalf("claimed %d", len(c))
	}
	tok := c[0].Token
	stale := "00000000-0000-4000-8000-000000000000"
	rows, err := e.pool.Query(e.ctx, `SELECT job_id::text, status FROM `+e.q("finish_jobs")+`($1, $2,
  '{complete,retry,cancel,snooze}', '{NULL,"1 minute",NULL,"2 minutes"}', '{NULL,boom,gone,NULL}', '{"{\"a\": 1}",NULL,NULL,NULL}', $3)`,
		[]string{ids[3], ids[1], ids[2], ids[0]}, []string{tok, tok, stale, tok}, e.clock.Now())
	e.must(err)
	type res struct{ ID, Status string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[res])
	e.must(err)
	want := []res{{ids[3], "succeeded"}, {ids[1], "pending"}, {ids[2], "lost"}, {ids[0], "pending"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("finish_jobs returned %v, want %v", got, want)
	}
	if st := scalar[string](e, `SELECT status::text FROM `+e.q("jobs")+` WHERE id = $1`, ids[2]); st != "running" {
		t.Errorf("the stale outcome's job is %s, want still running", st)
	}
	if out := scalar[string](e, `SELECT output::text FROM `+e.q("jobs")+` WHERE id = $1`, ids[3]); out != `{"a": 1}` {
		t.Errorf("output %s", out)
	}
	if le := scalar[string](e, `SELECT last_error FROM `+e.q("jobs")+` WHERE id = $1`, ids[1]); le != "boom" {
		t.Errorf("last_error %q", le)
	}
}
