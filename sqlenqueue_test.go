package skiplock_test

// The SQL enqueue function (migration 0005, docs/sql_enqueue.md): called from psql, a
// trigger, the pool; its deduplication, validation, NOTIFY, partitioned layout and
// roles.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type sqlEnqueued struct {
	ID        string
	Duplicate bool
}

// sqlEnqueue calls the schema's enqueue function with args, the SQL text of its
// argument list ($n placeholders bound to params).
func (e *env) sqlEnqueue(db queryRower, args string, params ...any) sqlEnqueued {
	e.t.Helper()
	r, err := e.trySQLEnqueue(db, args, params...)
	e.must(err)
	return r
}

func (e *env) trySQLEnqueue(db queryRower, args string, params ...any) (sqlEnqueued, error) {
	var r sqlEnqueued
	err := db.QueryRow(e.ctx, "SELECT id, duplicate FROM "+e.q("enqueue")+"("+args+")", params...).Scan(&r.ID, &r.Duplicate)
	return r, err
}

// sqlJob is what the function wrote.
type sqlJob struct {
	Kind, Queue, Payload, Status string
	Priority, MaxAttempts        int
	DedupKey                     *string
}

func (e *env) sqlJob(id string) sqlJob {
	e.t.Helper()
	var j sqlJob
	e.must(e.pool.QueryRow(e.ctx, `SELECT kind, queue, payload::text, status::text, priority, max_attempts, deduplication_key
FROM `+e.q("jobs")+` WHERE id = $1`, id).Scan(&j.Kind, &j.Queue, &j.Payload, &j.Status, &j.Priority, &j.MaxAttempts, &j.DedupKey))
	return j
}

func (e *env) jobExists(id string) bool {
	return scalar[bool](e, "SELECT EXISTS (SELECT 1 FROM "+e.q("jobs")+" WHERE id = $1)", id)
}

// TestSQLEnqueueFromPsql runs the function from the psql binary, as a shell script or
// another language would, inside BEGIN/COMMIT and BEGIN/ROLLBACK.
func TestSQLEnqueueFromPsql(t *testing.T) {
	t.Parallel()
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("psql is not installed")
	}
	e := newEnv(t, skiplock.Config{})
	fn := e.q("enqueue")
	run := func(script string) (string, string, error) {
		ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose",
			"-d", pgtest.URL(t), "-f", "-")
		cmd.Env = append(os.Environ(), "PGAPPNAME=sqlenqueue_test")
		cmd.Stdin = strings.NewReader(script)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	out, stderr, err := run(`
BEGIN;
SELECT id FROM ` + fn + `('psql_job', '{"n": 1}', queue => 'mail', priority => 5, deduplication_key => 'psql:1');
COMMIT;
BEGIN;
SELECT id FROM ` + fn + `('psql_job', '{"n": 2}');
ROLLBACK;
SELECT id || ' ' || duplicate FROM ` + fn + `('psql_job', '{"n": 3}', deduplication_key => 'psql:1');
`)
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, stderr)
	}
	lines := strings.Fields(out)
	if len(lines) != 4 {
		t.Fatalf("psql printed %q, want three ids and a flag", out)
	}
	committed, rolledBack := lines[0], lines[1]
	if got := e.sqlJob(committed); got.Kind != "psql_job" || got.Queue != "mail" || got.Priority != 5 ||
		got.Payload != `{"n": 1}` || got.Status != "pending" || got.MaxAttempts != 8 || got.DedupKey == nil || *got.DedupKey != "psql:1" {
		t.Errorf("committed job %+v", got)
	}
	if e.jobExists(rolledBack) {
		t.Error("the job of the rolled-back transaction exists")
	}
	if lines[2] != committed || lines[3] != "true" {
		t.Errorf("autocommit duplicate printed %q %q, want %s true", lines[2], lines[3], committed)
	}
	if n := e.countJobs(); n != 1 {
		t.Errorf("%d jobs, want 1", n)
	}

	// What a psql user sees for a refused argument: SQLSTATE 22023 and its name.
	_, stderr, err = run(`SELECT * FROM ` + fn + `('psql_job', queue => '9lives');`)
	if err == nil || !strings.Contains(stderr, "22023") || !strings.Contains(stderr, "skiplock: invalid queue") {
		t.Errorf("psql with a bad queue: %v\n%s", err, stderr)
	}
}

// TestSQLEnqueueFromTrigger enqueues a job per order from an AFTER INSERT trigger: the
// job commits and rolls back with the order, an invalid enqueue refuses the order,
// and re-inserting an order does not enqueue it twice.
func TestSQLEnqueueFromTrigger(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, err := e.pool.Exec(e.ctx, `
CREATE TABLE `+e.q("orders")+` (id bigint PRIMARY KEY, customer text NOT NULL, queue text NOT NULL DEFAULT 'orders');
CREATE FUNCTION `+e.q("orders_enqueue")+`() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM `+e.q("enqueue")+`('order_placed', jsonb_build_object('order_id', NEW.id, 'customer', NEW.customer),
                             queue => NEW.queue, deduplication_key => 'order:' || NEW.id);
  RETURN NULL;
END
$$;
CREATE TRIGGER orders_enqueue AFTER INSERT ON `+e.q("orders")+` FOR EACH ROW EXECUTE FUNCTION `+e.q("orders_enqueue")+`();`)
	e.must(err)
	orderJobs := func() map[string]string {
		rows, err := e.pool.Query(e.ctx, "SELECT deduplication_key, payload->>'customer' FROM "+e.q("jobs")+
			" WHERE kind = 'order_placed' AND queue = 'orders'")
		e.must(err)
		m := map[string]string{}
		for rows.Next() {
			var k, c string
			e.must(rows.Scan(&k, &c))
			m[k] = c
		}
		e.must(rows.Err())
		return m
	}

	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	_, err = tx.Exec(e.ctx, "INSERT INTO "+e.q("orders")+" (id, customer) VALUES (1, 'ann'), (2, 'bob'), (3, 'cy')")
	e.must(err)
	e.must(tx.Commit(e.ctx))

	tx, err = e.pool.Begin(e.ctx)
	e.must(err)
	_, err = tx.Exec(e.ctx, "INSERT INTO "+e.q("orders")+" (id, customer) VALUES (4, 'dee')")
	e.must(err)
	e.must(tx.Rollback(e.ctx))

	want := map[string]string{"order:1": "ann", "order:2": "bob", "order:3": "cy"}
	if got := orderJobs(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("jobs %v, want %v", got, want)
	}

	// An enqueue the function refuses refuses the order with it.
	_, err = e.pool.Exec(e.ctx, "INSERT INTO "+e.q("orders")+" (id, customer, queue) VALUES (5, 'eve', 'no spaces')")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
		t.Fatalf("order with a bad queue: %v, want SQLSTATE 22023", err)
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("orders")+" WHERE id = 5"); n != 0 {
		t.Error("the refused order was written")
	}

	// The deduplication key makes the trigger idempotent: an order deleted and inserted
	// again finds its job.
	_, err = e.pool.Exec(e.ctx, "DELETE FROM "+e.q("orders")+" WHERE id = 1; INSERT INTO "+e.q("orders")+" (id, customer) VALUES (1, 'ann again')")
	e.must(err)
	if got := orderJobs(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after re-inserting order 1: jobs %v, want %v", got, want)
	}
	if n := e.countJobs(); n != 3 {
		t.Errorf("%d jobs, want 3", n)
	}
}

// TestSQLEnqueueDeduplication: a second call with the same (kind, key) inserts nothing
// and returns the holder's id, whether the holder came from SQL or Go, in the same
// transaction or a concurrent one.
func TestSQLEnqueueDeduplication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	first := e.sqlEnqueue(e.pool, `'dedup', '{"v": 1}', deduplication_key => 'k1'`)
	if first.Duplicate {
		t.Fatal("first call reported a duplicate")
	}
	dup := e.sqlEnqueue(e.pool, `'dedup', '{"v": 2}', queue => 'other', deduplication_key => 'k1'`)
	if dup != (sqlEnqueued{first.ID, true}) {
		t.Fatalf("second call %+v, want duplicate of %s", dup, first.ID)
	}
	if got := e.sqlJob(first.ID); got.Payload != `{"v": 1}` || got.Queue != "default" {
		t.Errorf("the duplicate changed the holder: %+v", got)
	}
	if other := e.sqlEnqueue(e.pool, `'dedup_other_kind', deduplication_key => 'k1'`); other.Duplicate || other.ID == first.ID {
		t.Errorf("another kind with the same key: %+v", other)
	}
	// An empty key means none, as in Go.
	a, b := e.sqlEnqueue(e.pool, `'dedup', deduplication_key => ''`), e.sqlEnqueue(e.pool, `'dedup', deduplication_key => ''`)
	if a.Duplicate || b.Duplicate || a.ID == b.ID {
		t.Errorf("empty keys deduplicated: %+v %+v", a, b)
	}

	// SQL and Go share the keys.
	goHeld, err := e.client.EnqueueRaw(e.ctx, "dedup", []byte(`{}`), &skiplock.EnqueueOpts{DeduplicationKey: "from_go"})
	e.must(err)
	if r := e.sqlEnqueue(e.pool, `'dedup', deduplication_key => 'from_go'`); r != (sqlEnqueued{goHeld.ID, true}) {
		t.Errorf("SQL after Go: %+v, want duplicate of %s", r, goHeld.ID)
	}
	sqlHeld := e.sqlEnqueue(e.pool, `'dedup', deduplication_key => 'from_sql'`)
	goDup, err := e.client.EnqueueRaw(e.ctx, "dedup", []byte(`{}`), &skiplock.EnqueueOpts{DeduplicationKey: "from_sql"})
	e.must(err)
	if !goDup.Duplicate || goDup.ID != sqlHeld.ID {
		t.Errorf("Go after SQL: %+v, want duplicate of %s", goDup, sqlHeld.ID)
	}

	// The same transaction sees its own holder.
	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	in1 := e.sqlEnqueue(tx, `'dedup', deduplication_key => 'same_tx'`)
	in2 := e.sqlEnqueue(tx, `'dedup', deduplication_key => 'same_tx'`)
	e.must(tx.Commit(e.ctx))
	if in1.Duplicate || in2 != (sqlEnqueued{in1.ID, true}) {
		t.Errorf("same transaction: %+v then %+v", in1, in2)
	}

	// A concurrent caller waits for the uncommitted holder, then reports it.
	tx, err = e.pool.Begin(e.ctx)
	e.must(err)
	held := e.sqlEnqueue(tx, `'dedup', deduplication_key => 'race'`)
	done := make(chan sqlEnqueued, 1)
	go func() {
		r, err := e.trySQLEnqueue(e.pool, `'dedup', deduplication_key => 'race'`)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	waitFor(t, 10*time.Second, "the second call to wait on the first", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"+e.schema+"%enqueue%'") > 0
	})
	e.must(tx.Commit(e.ctx))
	if r := <-done; r != (sqlEnqueued{held.ID, true}) {
		t.Errorf("concurrent call %+v, want duplicate of %s", r, held.ID)
	}
	// Under REPEATABLE READ a holder committed after the snapshot is a serialization
	// failure, as in Go.
	rr, err := e.pool.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	e.must(err)
	defer rr.Rollback(e.ctx)
	var one int
	e.must(rr.QueryRow(e.ctx, "SELECT 1").Scan(&one)) // the first statement takes the snapshot
	e.sqlEnqueue(e.pool, `'dedup', deduplication_key => 'rr'`)
	var pgErr *pgconn.PgError
	if _, err := e.trySQLEnqueue(rr, `'dedup', deduplication_key => 'rr'`); !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Errorf("repeatable read, holder committed after the snapshot: %v, want SQLSTATE 40001", err)
	}
	e.must(rr.Rollback(e.ctx))

	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE deduplication_key IS NOT NULL"); n != 7 {
		t.Errorf("%d jobs with keys, want 7", n)
	}
}

// TestSQLEnqueueDefaults: omitted and NULL optional arguments take the Go client's
// defaults.
func TestSQLEnqueueDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	for _, args := range []string{`'k'`, `'k', '{}', NULL, NULL, NULL, NULL, NULL`} {
		tx, err := e.pool.Begin(e.ctx)
		e.must(err)
		r := e.sqlEnqueue(tx, args)
		var queue, payload, status string
		var priority, attempts, maxAttempts int
		var dedup *string
		var runAtIsNow, createdIsNow bool
		e.must(tx.QueryRow(e.ctx, `SELECT queue, payload::text, status::text, priority, attempts, max_attempts, deduplication_key,
       run_at = now(), created_at = now()
FROM `+e.q("jobs")+` WHERE id = $1`, r.ID).Scan(&queue, &payload, &status, &priority, &attempts, &maxAttempts, &dedup, &runAtIsNow, &createdIsNow))
		e.must(tx.Commit(e.ctx))
		if r.Duplicate || queue != skiplock.DefaultQueue || payload != "{}" || status != "pending" || priority != 0 ||
			attempts != 0 || maxAttempts != 8 || dedup != nil || !runAtIsNow || !createdIsNow {
			t.Errorf("enqueue(%s): %+v queue %q payload %s status %s priority %d attempts %d max %d dedup %v run_at=now %v created_at=now %v",
				args, r, queue, payload, status, priority, attempts, maxAttempts, dedup, runAtIsNow, createdIsNow)
		}
	}
}

// TestSQLEnqueueFromSet: one call per row of a set, through LATERAL.
func TestSQLEnqueueFromSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	n := scalar[int64](e, "SELECT count(DISTINCT e.id) FROM generate_series(1, 5) AS g CROSS JOIN LATERAL "+
		e.q("enqueue")+"('lateral', jsonb_build_object('g', g)) AS e WHERE NOT e.duplicate")
	if jobs := e.countJobs(); n != 5 || jobs != 5 {
		t.Errorf("%d ids for %d jobs, want 5 and 5", n, jobs)
	}
}

// TestSQLEnqueueValidation: every rule of the Go path, refused with SQLSTATE 22023
// naming the argument, and nothing written; the values at the limits are accepted.
// Where Go can express the same input, it refuses it on the same field.
func TestSQLEnqueueValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	far := 87601 * time.Hour
	cases := []struct {
		name  string
		args  string // the function's arguments
		field string // the argument refused; "" when the call is valid
		// goEnqueue, if set, is the same input through the Go client.
		goEnqueue func() error
	}{
		{"kind null", `NULL`, "kind", nil},
		{"kind empty", `''`, "kind", func() error { return e.goRaw("", nil) }},
		{"kind 256 bytes", `repeat('k', 256)`, "kind", func() error { return e.goRaw(strings.Repeat("k", 256), nil) }},
		{"kind 256 bytes in 128 characters", `repeat('é', 128)`, "kind", func() error { return e.goRaw(strings.Repeat("é", 128), nil) }},
		{"kind newline", `'a' || chr(10) || 'b'`, "kind", func() error { return e.goRaw("a\nb", nil) }},
		{"kind unit separator", `'a' || chr(31)`, "kind", func() error { return e.goRaw("a\x1f", nil) }},
		{"kind DEL", `'a' || chr(127)`, "kind", func() error { return e.goRaw("a\x7f", nil) }},
		{"kind 255 bytes", `repeat('k', 255)`, "", nil},
		{"kind unicode and punctuation", `'émail.sent/v2 (new)'`, "", nil},

		{"payload null", `'k', NULL`, "payload", nil},
		// {"s": "x…"} prints as 9 bytes plus the string.
		{"payload 1 MiB + 1", `'k', jsonb_build_object('s', repeat('x', 1048576 - 8))`, "payload", nil},
		{"payload 1 MiB", `'k', jsonb_build_object('s', repeat('x', 1048576 - 9))`, "", nil},
		{"payload json null", `'k', 'null'`, "", nil},
		{"payload array", `'k', '[1, 2]'`, "", nil},
		{"payload string", `'k', '"s"'`, "", nil},

		{"queue empty", `'k', queue => ''`, "queue", nil},
		{"queue 64 bytes", `'k', queue => repeat('q', 64)`, "queue", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{Queue: strings.Repeat("q", 64)}) }},
		{"queue starts with a digit", `'k', queue => '1q'`, "queue", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{Queue: "1q"}) }},
		{"queue starts with a dash", `'k', queue => '-q'`, "queue", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{Queue: "-q"}) }},
		{"queue starts with a dot", `'k', queue => '.q'`, "queue", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{Queue: ".q"}) }},
		{"queue space", `'k', queue => 'q q'`, "queue", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{Queue: "q q"}) }},
		{"queue slash", `'k', queue => 'q/q'`, "queue", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{Queue: "q/q"}) }},
		{"queue non-ASCII letter", `'k', queue => 'qé'`, "queue", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{Queue: "qé"}) }},
		{"queue 63 bytes", `'k', queue => repeat('q', 63)`, "", nil},
		{"queue punctuation", `'k', queue => '_a.b-c_9'`, "", nil},

		{"priority -1001", `'k', priority => -1001`, "priority", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{Priority: -1001}) }},
		{"priority 1001", `'k', priority => 1001`, "priority", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{Priority: 1001}) }},
		{"priority min int", `'k', priority => -2147483648`, "priority", nil},
		{"priority -1000", `'k', priority => -1000`, "", nil},
		{"priority 1000", `'k', priority => 1000`, "", nil},

		{"max_attempts 0", `'k', max_attempts => 0`, "max_attempts", nil},
		{"max_attempts -1", `'k', max_attempts => -1`, "max_attempts", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{MaxAttempts: -1}) }},
		{"max_attempts 1001", `'k', max_attempts => 1001`, "max_attempts", func() error { return e.goRaw("k", &skiplock.EnqueueOpts{MaxAttempts: 1001}) }},
		{"max_attempts 1", `'k', max_attempts => 1`, "", nil},
		{"max_attempts 1000", `'k', max_attempts => 1000`, "", nil},

		{"run_at 10 years ahead", `'k', run_at => now() + interval '87601 hours'`, "run_at", func() error {
			return e.goRaw("k", &skiplock.EnqueueOpts{RunAt: e.clock.Now().Add(far)})
		}},
		{"run_at 10 years ago", `'k', run_at => now() - interval '87601 hours'`, "run_at", func() error {
			return e.goRaw("k", &skiplock.EnqueueOpts{RunAt: e.clock.Now().Add(-far)})
		}},
		{"run_at infinity", `'k', run_at => 'infinity'`, "run_at", nil},
		{"run_at -infinity", `'k', run_at => '-infinity'`, "run_at", nil},
		{"run_at almost 10 years ahead", `'k', run_at => now() + interval '87599 hours'`, "", nil},
		{"run_at almost 10 years ago", `'k', run_at => now() - interval '87599 hours'`, "", nil},

		{"deduplication_key 513 bytes", `'k', deduplication_key => repeat('d', 513)`, "deduplication_key", func() error {
			return e.goRaw("k", &skiplock.EnqueueOpts{DeduplicationKey: strings.Repeat("d", 513)})
		}},
		{"deduplication_key 514 bytes in 257 characters", `'k', deduplication_key => repeat('é', 257)`, "deduplication_key", func() error {
			return e.goRaw("k", &skiplock.EnqueueOpts{DeduplicationKey: strings.Repeat("é", 257)})
		}},
		{"deduplication_key 512 bytes", `'k', deduplication_key => repeat('d', 512)`, "", nil},
	}
	valid := int64(0)
	for _, c := range cases {
		_, err := e.trySQLEnqueue(e.pool, c.args)
		if c.field == "" {
			valid++
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.ColumnName != c.field ||
			!strings.HasPrefix(pgErr.Message, "skiplock: invalid "+c.field+": ") {
			t.Errorf("%s: %v (column %q), want SQLSTATE 22023 on %s", c.name, err, columnOf(err), c.field)
			continue
		}
		t.Logf("%s: %s", c.name, pgErr.Message)
		if c.goEnqueue != nil {
			var ve *skiplock.ValidationError
			if err := c.goEnqueue(); !errors.As(err, &ve) || ve.Field != c.field {
				t.Errorf("%s: the Go client says %v, want a refusal on %s", c.name, err, c.field)
			}
		}
	}
	if n := e.countJobs(); n != valid {
		t.Errorf("%d jobs written, want %d (only the valid calls)", n, valid)
	}
}

func (e *env) goRaw(kind string, opts *skiplock.EnqueueOpts) error {
	_, err := e.client.EnqueueRaw(e.ctx, kind, []byte(`{}`), opts)
	return err
}

func columnOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.ColumnName
	}
	return ""
}

// TestSQLEnqueueWakesWorker: a running Go client picks up a job the function enqueued
// at once. Its poll is a minute apart, so only the NOTIFY can wake it within seconds.
func TestSQLEnqueueWakesWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, events := startPingClient(e, time.Minute)
	waitFor(t, 10*time.Second, "listener", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN \""+e.schema+"%'") == 1
	})
	for i := range 3 {
		tx, err := e.pool.Begin(e.ctx)
		e.must(err)
		r := e.sqlEnqueue(tx, `'ping', jsonb_build_object('i', $1::int)`, i)
		e.must(tx.Commit(e.ctx))
		ev := nextEvent(t, events, 10*time.Second)
		if ev.Kind != skiplock.EventSucceeded || ev.Job.ID != r.ID {
			t.Fatalf("job %d: event %s for %s, want success of %s", i, ev.Kind, ev.Job.ID, r.ID)
		}
	}
}

// TestSQLEnqueueNotifies: one notification per committed insert on the client's
// channel (cut to 63 bytes for a long schema name) with the queue as payload; none for
// a rolled-back transaction or a duplicate.
func TestSQLEnqueueNotifies(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := fmt.Sprintf("sqlenq_%d_", os.Getpid())
	schema += strings.Repeat("n", 63-len(schema))
	pool := pgtest.Pool(t)
	_, err := skiplock.Migrate(ctx, pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pgtest.DropSchema(t, schema) })
	e := &env{t: t, ctx: ctx, pool: pool, schema: schema}
	channel := skiplock.Channel(schema)
	if len(channel) != 63 {
		t.Fatalf("channel %q is not cut", channel)
	}
	listener, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, `LISTEN "`+channel+`"`); err != nil {
		t.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	e.must(err)
	e.sqlEnqueue(tx, `'k', queue => 'rolled_back'`)
	e.must(tx.Rollback(ctx))
	e.sqlEnqueue(pool, `'k', queue => 'first', deduplication_key => 'd'`)
	e.sqlEnqueue(pool, `'k', queue => 'duplicate', deduplication_key => 'd'`)
	tx, err = pool.Begin(ctx)
	e.must(err)
	e.sqlEnqueue(tx, `'k', queue => 'batch'`)
	e.sqlEnqueue(tx, `'k', queue => 'batch'`) // PostgreSQL folds equal notifications of a transaction
	e.must(tx.Commit(ctx))
	e.sqlEnqueue(pool, `'k', queue => 'last'`)

	for _, want := range []string{"first", "batch", "last"} {
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
		if n.Channel != channel || n.Payload != want {
			t.Fatalf("notification %q on %q, want %q on %q", n.Payload, n.Channel, want, channel)
		}
	}
}

// TestSQLEnqueuePartitioned: in the partitioned layout deduplication goes through the
// job_dedup table, and the function behaves the same: keys held before the conversion,
// new keys, and a key freed when its job is deleted.
func TestSQLEnqueuePartitioned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	before := e.sqlEnqueue(e.pool, `'part', deduplication_key => 'before'`)
	e.partition(skiplock.PartitionOpts{})
	if !scalar[bool](e, "SELECT EXISTS (SELECT 1 FROM "+e.q("partitioning")+" WHERE table_name = 'jobs')") {
		t.Fatal("not partitioned")
	}
	if r := e.sqlEnqueue(e.pool, `'part', deduplication_key => 'before'`); r != (sqlEnqueued{before.ID, true}) {
		t.Errorf("key held from before the conversion: %+v, want duplicate of %s", r, before.ID)
	}
	after := e.sqlEnqueue(e.pool, `'part', '{"n": 1}', deduplication_key => 'after'`)
	if after.Duplicate {
		t.Fatal("a new key reported a duplicate")
	}
	if r := e.sqlEnqueue(e.pool, `'part', '{"n": 2}', deduplication_key => 'after'`); r != (sqlEnqueued{after.ID, true}) {
		t.Errorf("duplicate after the conversion: %+v, want duplicate of %s", r, after.ID)
	}
	if holder := scalar[string](e, "SELECT job_id::text FROM "+e.q("job_dedup")+" WHERE kind = 'part' AND deduplication_key = 'after'"); holder != after.ID {
		t.Errorf("job_dedup names %s, want %s", holder, after.ID)
	}
	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	in1 := e.sqlEnqueue(tx, `'part', deduplication_key => 'same_tx'`)
	in2 := e.sqlEnqueue(tx, `'part', deduplication_key => 'same_tx'`)
	e.must(tx.Rollback(e.ctx))
	if in2 != (sqlEnqueued{in1.ID, true}) {
		t.Errorf("same transaction: %+v then %+v", in1, in2)
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("job_dedup")+" WHERE deduplication_key = 'same_tx'"); n != 0 {
		t.Error("a rolled-back call left its key in job_dedup")
	}
	_, err = e.client.JobDelete(e.ctx, after.ID)
	e.must(err)
	again := e.sqlEnqueue(e.pool, `'part', deduplication_key => 'after'`)
	if again.Duplicate || again.ID == after.ID {
		t.Errorf("after deleting the holder: %+v, want a new job", again)
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE kind = 'part'"); n != 2 {
		t.Errorf("%d jobs, want 2", n)
	}
}

// TestSQLEnqueueRoles: the producer of RolesSQL may call the function (also for a
// duplicate, and in the partitioned layout); the other roles may not, and EXECUTE
// alone enqueues nothing (SECURITY INVOKER).
func TestSQLEnqueueRoles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	names := skiplock.RoleNames{Producer: e.schema + "_p", Worker: e.schema + "_w", Dashboard: e.schema + "_d"}
	executeOnly := e.schema + "_x"
	for _, r := range []string{names.Producer, names.Worker, names.Dashboard, executeOnly} {
		_, err := e.pool.Exec(e.ctx, `CREATE ROLE "`+r+`" NOLOGIN`)
		e.must(err)
		t.Cleanup(func() { e.pool.Exec(e.ctx, `DROP OWNED BY "`+r+`"; DROP ROLE "`+r+`"`) })
	}
	ddl, err := skiplock.RolesSQL(e.schema, names)
	e.must(err)
	_, err = e.pool.Exec(e.ctx, ddl+`GRANT USAGE ON SCHEMA "`+e.schema+`" TO "`+executeOnly+`";
GRANT EXECUTE ON FUNCTION `+e.q("enqueue")+`(text, jsonb, text, integer, timestamptz, integer, text) TO "`+executeOnly+`";`)
	e.must(err)

	producer := e.rolePool(names.Producer)
	call := func(db queryRower, key string) sqlEnqueued {
		t.Helper()
		r, err := e.trySQLEnqueue(db, `'roles', '{}', deduplication_key => $1`, key)
		if err != nil {
			t.Fatalf("as producer: %v", err)
		}
		return r
	}
	first := call(producer, "k")
	if dup := call(producer, "k"); dup != (sqlEnqueued{first.ID, true}) {
		t.Errorf("producer's duplicate %+v, want duplicate of %s", dup, first.ID)
	}
	for who, role := range map[string]string{"worker": names.Worker, "dashboard": names.Dashboard, "EXECUTE alone": executeOnly} {
		if _, err := e.trySQLEnqueue(e.rolePool(role), `'roles'`); !denied(err) {
			t.Errorf("%s enqueued from SQL: %v, want permission denied", who, err)
		}
	}

	e.partition(skiplock.PartitionOpts{})
	second := call(producer, "k2")
	if dup := call(producer, "k2"); second.Duplicate || dup != (sqlEnqueued{second.ID, true}) {
		t.Errorf("partitioned: producer's calls %+v then %+v", second, dup)
	}
	if r := call(producer, "k"); r != (sqlEnqueued{first.ID, true}) {
		t.Errorf("partitioned: key held from before %+v, want duplicate of %s", r, first.ID)
	}
}
