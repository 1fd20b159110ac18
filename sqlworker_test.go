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
			[]any{skiplock.Permanent(errors.New("bad address")).Error(), true, nil}, "failed"},
		{"snooze", "snooze", 0, skiplock.Snooze(5 * time.Minute), "snooze_job", []any{"5 minutes"}, "pending"},
		{"cancel", "cancel", 0, skiplock.Cancel(errors.New("withdrawn")), "cancel_job",
			[]any{skiplock.Cancel(errors.New("withdrawn")).Error()}, "cancelled"},
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

	// A lease lost to the reclaimer and the job claimed again: the first worker's
	// completion and heartbeat change nothing, the second worker's completion counts.
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
		_, err = m.Reclaim(e.ctx)
		e.must(err)
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
