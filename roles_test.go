package skiplock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// rolePool returns a pool whose sessions run as role (a startup parameter, so every
// statement of the client under test is checked against the role's privileges).
func (e *env) rolePool(role string) *pgxpool.Pool {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(e.t))
	e.must(err)
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["role"] = role
	p, err := pgxpool.NewWithConfig(e.ctx, cfg)
	e.must(err)
	e.t.Cleanup(p.Close)
	return p
}

func (e *env) roleClient(role string) (*skiplock.Client, *pgxpool.Pool) {
	pool := e.rolePool(role)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: e.schema, Clock: e.clock,
		Retention: skiplock.RetentionConfig{Succeeded: time.Minute}})
	e.must(err)
	e.t.Cleanup(c.Close)
	return c, pool
}

func denied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// TestRolesLeastPrivilege creates the five roles, applies RolesSQL and checks that
// each role can do its job and nothing beyond it.
func TestRolesLeastPrivilege(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	names := skiplock.RoleNames{Migrator: e.schema + "_m", Producer: e.schema + "_p", Worker: e.schema + "_w",
		Relay: e.schema + "_r", Dashboard: e.schema + "_d"}
	for _, r := range []string{names.Migrator, names.Producer, names.Worker, names.Relay, names.Dashboard} {
		_, err := e.pool.Exec(e.ctx, `CREATE ROLE "`+r+`" NOLOGIN`)
		e.must(err)
		t.Cleanup(func() { e.pool.Exec(e.ctx, `DROP OWNED BY "`+r+`"; DROP ROLE "`+r+`"`) })
	}
	ddl, err := skiplock.RolesSQL(e.schema, names)
	e.must(err)
	_, err = e.pool.Exec(e.ctx, ddl)
	e.must(err)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		if !denied(err) {
			t.Errorf("%s: %v, want permission denied", what, err)
		}
	}
	exec := func(p *pgxpool.Pool, sql string, args ...any) error {
		_, err := p.Exec(e.ctx, sql, args...)
		return err
	}

	producer, pp := e.roleClient(names.Producer)
	res, err := producer.Enqueue(e.ctx, emailArgs{To: "a"}, &skiplock.EnqueueOpts{DeduplicationKey: "k"})
	must("producer enqueues", err)
	dup, err := producer.Enqueue(e.ctx, emailArgs{To: "a"}, &skiplock.EnqueueOpts{DeduplicationKey: "k"})
	must("producer enqueues a duplicate", err)
	if !dup.Duplicate || dup.ID != res.ID {
		t.Errorf("producer's duplicate: %+v", dup)
	}
	must("producer writes an outbox event", exec(pp, `INSERT INTO `+e.q("outbox")+` (aggregate_type, aggregate_id, event_type, payload)
VALUES ('o', '1', 'e', '{}')`))
	_, err = producer.Manual().Claim(e.ctx, skiplock.DefaultQueue, 1)
	refused("producer claims", err)
	refused("producer reads payloads", exec(pp, "SELECT payload FROM "+e.q("jobs")))
	refused("producer updates jobs", exec(pp, "UPDATE "+e.q("jobs")+" SET status = 'cancelled'"))
	refused("producer reads the outbox", exec(pp, "SELECT payload FROM "+e.q("outbox")))

	worker, wp := e.roleClient(names.Worker)
	jobs, err := worker.Manual().Claim(e.ctx, skiplock.DefaultQueue, 1)
	must("worker claims", err)
	if len(jobs) == 1 {
		_, err = worker.Manual().Heartbeat(e.ctx, jobs[0])
		must("worker heartbeats", err)
		must("worker completes", worker.Manual().Complete(e.ctx, jobs[0]))
	} else {
		t.Error("worker claimed nothing")
	}
	_, err = worker.Manual().Reclaim(e.ctx)
	must("worker reclaims", err)
	e.clock.Advance(time.Hour)
	rr, err := worker.RunRetention(e.ctx)
	must("worker runs retention", err)
	if rr.Succeeded != 1 {
		t.Errorf("worker's retention deleted %+v", rr)
	}
	_, err = worker.Stats(e.ctx, nil)
	must("worker reads stats", err)
	must("worker pauses a queue", worker.QueuePauseAhead(e.ctx, "mail"))
	must("worker resumes a queue", worker.QueueResume(e.ctx, "mail"))
	// Making a queue fair marks its backlog for the fair claim's index and waits for
	// the inserts racing it (migration 0024): SECURITY DEFINER functions, since the
	// worker may not write the mark itself.
	backlog, err := producer.Enqueue(e.ctx, emailArgs{To: "m"}, &skiplock.EnqueueOpts{Queue: "mail"})
	must("producer enqueues into a plain queue", err)
	must("worker makes a queue fair", worker.QueueSetFair(e.ctx, "mail", nil))
	fresh, err := producer.Enqueue(e.ctx, emailArgs{To: "n"}, &skiplock.EnqueueOpts{Queue: "mail"})
	must("producer enqueues into a fair queue", err)
	if backlog.ID != "" && fresh.ID != "" {
		var marked int
		e.must(e.pool.QueryRow(e.ctx, `SELECT count(*) FROM `+e.q("jobs")+` WHERE id IN ($1, $2) AND fair_indexed`, backlog.ID, fresh.ID).Scan(&marked))
		if marked != 2 {
			t.Errorf("%d of a fair queue's 2 jobs (one enqueued before it was made fair) marked for its index", marked)
		}
	}
	must("worker makes a queue plain again", worker.QueueUnsetFair(e.ctx, "mail"))
	ws := skiplock.NewWorkers()
	must("registering a worker", ws.AddHandler("k", func(context.Context, *skiplock.Job) error { return nil }, nil))
	started, err := skiplock.NewClient(worker.Pool(), skiplock.Config{Schema: e.schema, Workers: ws,
		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}}})
	must("worker client", err)
	must("worker starts (reads the schema's migrations)", started.Start(e.ctx))
	must("worker stops", started.Stop(e.ctx))
	// The worker role may insert jobs: the periodic scheduler runs in workers and
	// fires schedules by enqueueing (docs/roles.md).
	_, err = worker.Enqueue(e.ctx, emailArgs{To: "b"}, nil)
	must("worker enqueues (the scheduler fires periodic jobs)", err)
	refused("worker rewrites a payload", exec(wp, "UPDATE "+e.q("jobs")+` SET payload = '{}'`))
	refused("worker drops jobs", exec(wp, "DROP TABLE "+e.q("jobs")))
	refused("worker truncates jobs", exec(wp, "TRUNCATE "+e.q("jobs")))
	refused("worker reads outbox payloads", exec(wp, "SELECT payload FROM "+e.q("outbox")))
	refused("worker creates tables", exec(wp, "CREATE TABLE "+e.q("x")+" (a int)"))

	rp := e.rolePool(names.Relay)
	must("relay claims and marks", exec(rp, `UPDATE `+e.q("outbox")+` SET relay_token = gen_random_uuid(), relay_until = now(), attempts = attempts + 1
WHERE id IN (SELECT id FROM `+e.q("outbox")+` WHERE published_at IS NULL FOR UPDATE SKIP LOCKED) RETURNING payload`))
	must("relay marks published", exec(rp, `UPDATE `+e.q("outbox")+` SET published_at = now(), relay_token = NULL`))
	must("relay prunes", exec(rp, `DELETE FROM `+e.q("outbox")+` WHERE published_at < now() - interval '1 day'`))
	refused("relay reads jobs", exec(rp, "SELECT 1 FROM "+e.q("jobs")))
	refused("relay rewrites an event", exec(rp, "UPDATE "+e.q("outbox")+` SET payload = '{}'`))
	refused("relay inserts events", exec(rp, `INSERT INTO `+e.q("outbox")+` (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', '1', 'e', '{}')`))

	dashboard, dp := e.roleClient(names.Dashboard)
	_, err = dashboard.Stats(e.ctx, nil)
	must("dashboard reads stats", err)
	_, err = dashboard.JobList(e.ctx, skiplock.ListParams{})
	must("dashboard lists jobs", err)
	_, err = dashboard.JobRetry(e.ctx, res.ID)
	refused("dashboard retries a job", err)
	refused("dashboard pauses a queue", dashboard.QueuePauseAhead(e.ctx, "mail"))
	refused("dashboard deletes", exec(dp, "DELETE FROM "+e.q("jobs")))
	refused("dashboard inserts", exec(dp, `INSERT INTO `+e.q("jobs")+` (kind, payload) VALUES ('k', '{}')`))
	refused("dashboard updates the outbox", exec(dp, "UPDATE "+e.q("outbox")+" SET dead_at = now()"))
	// The autoscalers' depth (migration 0015): the read-only role may run it, from Go
	// and from SQL, as the worker may; the producer and the relay, which do not read
	// jobs, may not.
	_, err = dashboard.Depth(e.ctx, "mail")
	must("dashboard reads the depth", err)
	must("dashboard runs queue_depth", exec(dp, "SELECT "+e.q("queue_depth")+"('mail')"))
	must("worker runs queue_depth", exec(wp, "SELECT "+e.q("queue_depth")+"()"))
	refused("producer runs queue_depth", exec(pp, "SELECT "+e.q("queue_depth")+"()"))
	refused("relay runs queue_depth", exec(rp, "SELECT "+e.q("queue_depth")+"()"))

	// The SQL worker protocol (migration 0018): the worker's alone.
	sqlWork, err := e.client.EnqueueRaw(e.ctx, "sqlwork", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "sqlw"})
	must("enqueueing a job for the SQL worker", err)
	claim := "SELECT lease_token::text FROM " + e.q("claim_jobs") + "('sqlw', 'w', now => '" + e.clock.Now().Format(time.RFC3339Nano) + "')"
	for _, p := range []*pgxpool.Pool{pp, rp, dp} {
		refused("a non-worker role claims from SQL", exec(p, claim))
		refused("a non-worker role completes from SQL", exec(p, "SELECT "+e.q("complete_job")+"($1, $1)", sqlWork.ID))
	}
	var tok string
	must("worker claims from SQL", wp.QueryRow(e.ctx, claim).Scan(&tok))
	var st string
	must("worker heartbeats from SQL", wp.QueryRow(e.ctx, "SELECT "+e.q("heartbeat_job")+"($1, $2)", sqlWork.ID, tok).Scan(&st))
	must("worker completes from SQL", wp.QueryRow(e.ctx, "SELECT "+e.q("complete_job")+"($1, $2)", sqlWork.ID, tok).Scan(&st))
	if st != "succeeded" {
		t.Errorf("the worker's complete_job returned %q", st)
	}

	mp := e.rolePool(names.Migrator)
	must("migrator creates tables", exec(mp, "CREATE TABLE "+e.q("migrator_made")+" (a int)"))
}
