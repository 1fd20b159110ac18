package skiplock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

func (e *env) countJobs() int64 {
	return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs"))
}

func TestEnqueueExistsIffCommitted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, err := e.pool.Exec(e.ctx, "CREATE TABLE "+e.q("orders")+" (id int PRIMARY KEY)")
	e.must(err)

	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	_, err = tx.Exec(e.ctx, "INSERT INTO "+e.q("orders")+" VALUES (1)")
	e.must(err)
	_, err = e.client.EnqueueTx(e.ctx, tx, emailArgs{To: "x"}, nil)
	e.must(err)
	e.must(tx.Rollback(e.ctx))
	if n := e.countJobs(); n != 0 {
		t.Fatalf("rolled back: %d jobs", n)
	}

	tx, err = e.pool.Begin(e.ctx)
	e.must(err)
	_, err = tx.Exec(e.ctx, "INSERT INTO "+e.q("orders")+" VALUES (1)")
	e.must(err)
	res, err := e.client.EnqueueTx(e.ctx, tx, emailArgs{To: "x"}, nil)
	e.must(err)
	e.must(tx.Commit(e.ctx))
	j, err := e.client.JobGet(e.ctx, res.ID)
	e.must(err)
	if j.Kind != "email" || string(j.Payload) != `{"to": "x"}` || j.State != skiplock.StatePending || j.MaxAttempts != 8 || j.Queue != "default" {
		t.Fatalf("committed job: %+v payload %s", j, j.Payload)
	}
	// ids are UUIDv7: version nibble 7
	if res.ID[14] != '7' {
		t.Fatalf("id %s is not a version-7 UUID", res.ID)
	}
}

func TestEnqueueDeduplication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	opts := &skiplock.EnqueueOpts{DeduplicationKey: "book:42"}
	first, err := e.client.Enqueue(e.ctx, emailArgs{To: "a"}, opts)
	e.must(err)
	second, err := e.client.Enqueue(e.ctx, emailArgs{To: "b"}, opts)
	e.must(err)
	if first.Duplicate || !second.Duplicate || second.ID != first.ID {
		t.Fatalf("first %+v second %+v", first, second)
	}
	other, err := e.client.Enqueue(e.ctx, otherArgs{}, opts) // same key, another kind
	e.must(err)
	if other.Duplicate || other.ID == first.ID {
		t.Fatalf("same key under another kind: %+v", other)
	}
	if n := e.countJobs(); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}

	// a batch with a key already taken, and the same key twice inside the batch
	res, err := e.client.EnqueueManyTx(e.ctx, e.pool, []skiplock.EnqueueParams{
		{Args: emailArgs{To: "c"}, Opts: skiplock.EnqueueOpts{DeduplicationKey: "book:42"}},
		{Args: emailArgs{To: "d"}, Opts: skiplock.EnqueueOpts{DeduplicationKey: "book:43"}},
		{Args: emailArgs{To: "e"}, Opts: skiplock.EnqueueOpts{DeduplicationKey: "book:43"}},
		{Args: emailArgs{To: "f"}},
	})
	e.must(err)
	if !res[0].Duplicate || res[0].ID != first.ID || res[1].Duplicate || !res[2].Duplicate || res[2].ID != res[1].ID || res[3].Duplicate {
		t.Fatalf("batch results %+v", res)
	}
	if n := e.countJobs(); n != 4 {
		t.Fatalf("%d jobs, want 4", n)
	}
}

func TestEnqueueDuplicateWaitsForConcurrentHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	held, err := e.client.EnqueueTx(e.ctx, tx, emailArgs{}, &skiplock.EnqueueOpts{DeduplicationKey: "k"})
	e.must(err)
	done := make(chan skiplock.EnqueueResult)
	go func() {
		r, err := e.client.Enqueue(e.ctx, emailArgs{}, &skiplock.EnqueueOpts{DeduplicationKey: "k"})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	// the second insert blocks on the uncommitted key; wait until PostgreSQL shows it waiting
	deadline := time.Now().Add(10 * time.Second)
	for scalar[int64](e, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"+e.schema+"%'") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("second enqueue never waited on the first")
		}
		runtimeGosched()
	}
	e.must(tx.Commit(e.ctx))
	r := <-done
	if !r.Duplicate || r.ID != held.ID {
		t.Fatalf("second enqueue %+v, want duplicate of %s", r, held.ID)
	}
}

func TestEnqueueThroughDatabaseSQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	db, err := sql.Open("pgx", pgtest.URL(t))
	e.must(err)
	defer db.Close()
	_ = stdlib.GetDefaultDriver()

	tx, err := db.BeginTx(e.ctx, nil)
	e.must(err)
	_, err = e.client.EnqueueTx(e.ctx, skiplock.FromSQL(tx), emailArgs{To: "rolled"}, nil)
	e.must(err)
	e.must(tx.Rollback())
	if n := e.countJobs(); n != 0 {
		t.Fatalf("rolled back sql.Tx left %d jobs", n)
	}

	tx, err = db.BeginTx(e.ctx, nil)
	e.must(err)
	r1, err := e.client.EnqueueTx(e.ctx, skiplock.FromSQL(tx), emailArgs{To: "kept"}, &skiplock.EnqueueOpts{DeduplicationKey: "k", RunAt: t0.Add(time.Hour)})
	e.must(err)
	r2, err := e.client.EnqueueTx(e.ctx, skiplock.FromSQL(tx), emailArgs{To: "dup"}, &skiplock.EnqueueOpts{DeduplicationKey: "k"})
	e.must(err)
	many, err := e.client.EnqueueManyTx(e.ctx, skiplock.FromSQL(tx), []skiplock.EnqueueParams{{Args: otherArgs{1}}, {Args: otherArgs{2}}})
	e.must(err)
	e.must(tx.Commit())
	if !r2.Duplicate || r2.ID != r1.ID || len(many) != 2 || many[0].ID == "" {
		t.Fatalf("database/sql results: %+v %+v %+v", r1, r2, many)
	}
	j, err := e.client.JobGet(e.ctx, r1.ID)
	e.must(err)
	if !j.RunAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("run_at %s", j.RunAt)
	}
	_, err = e.client.EnqueueTx(e.ctx, skiplock.FromSQL(db), emailArgs{To: "db"}, nil)
	e.must(err)
	if n := e.countJobs(); n != 4 {
		t.Fatalf("%d jobs, want 4", n)
	}
}

type badArgs struct{ C chan int }

func (badArgs) Kind() string { return "bad" }

type emptyKind struct{}

func (emptyKind) Kind() string { return "" }

func TestEnqueueRejectsBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{MaxPayloadBytes: 1024})
	big := `{"x":"` + strings.Repeat("a", 2000) + `"}`
	cases := []struct {
		name    string
		kind    string
		payload string
		args    skiplock.JobArgs
		opts    skiplock.EnqueueOpts
		field   string
	}{
		{name: "invalid JSON", kind: "k", payload: `{"a":`, field: "payload"},
		{name: "NUL escape", kind: "k", payload: `{"a":"x\u0000y"}`, field: "payload"},
		{name: "NUL escape in key", kind: "k", payload: `{"\u0000":1}`, field: "payload"},
		{name: "empty payload", kind: "k", payload: ``, field: "payload"},
		{name: "oversized payload", kind: "k", payload: big, field: "payload"},
		{name: "unencodable args", args: badArgs{}, field: "payload"},
		{name: "empty kind", kind: "", payload: `{}`, field: "kind"},
		{name: "empty kind from args", args: emptyKind{}, field: "kind"},
		{name: "overlong kind", kind: strings.Repeat("k", 256), payload: `{}`, field: "kind"},
		{name: "control char in kind", kind: "a\nb", payload: `{}`, field: "kind"},
		{name: "priority too high", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{Priority: 1001}, field: "priority"},
		{name: "priority too low", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{Priority: -1001}, field: "priority"},
		{name: "max_attempts negative", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{MaxAttempts: -1}, field: "max_attempts"},
		{name: "max_attempts huge", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{MaxAttempts: 1001}, field: "max_attempts"},
		{name: "negative delay", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{Delay: -time.Second}, field: "delay"},
		{name: "run_at far future", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{RunAt: t0.AddDate(50, 0, 0)}, field: "run_at"},
		{name: "run_at far past", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{RunAt: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)}, field: "run_at"},
		{name: "dedup key too long", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{DeduplicationKey: strings.Repeat("d", 513)}, field: "deduplication_key"},
		{name: "queue injection", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{Queue: `a"; DROP SCHEMA public CASCADE; --`}, field: "queue"},
		{name: "queue with space", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{Queue: "a b"}, field: "queue"},
		{name: "queue too long", kind: "k", payload: `{}`, opts: skiplock.EnqueueOpts{Queue: strings.Repeat("q", 64)}, field: "queue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.args != nil {
				_, err = e.client.EnqueueTx(e.ctx, e.pool, tc.args, &tc.opts)
			} else {
				_, err = e.client.EnqueueRawTx(e.ctx, e.pool, tc.kind, []byte(tc.payload), &tc.opts)
			}
			var ve *skiplock.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, skiplock.ErrInvalid) || ve.Field != tc.field {
				t.Fatalf("got %v, want a ValidationError on %s", err, tc.field)
			}
		})
	}
	// a batch with one bad job writes nothing
	_, err := e.client.EnqueueManyTx(e.ctx, e.pool, []skiplock.EnqueueParams{{Args: otherArgs{}}, {Kind: "k", Payload: []byte("nope")}})
	if !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("bad batch: %v", err)
	}
	// literal backslash-u text (escaped) is fine
	_, err = e.client.EnqueueRawTx(e.ctx, e.pool, "k", []byte(`{"a":"\\u0000"}`), nil)
	e.must(err)
	if n := e.countJobs(); n != 1 {
		t.Fatalf("%d jobs written, want only the valid one", n)
	}
}

func TestBadSchemaNames(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, name := range []string{`a"; DROP SCHEMA public CASCADE; --`, "has space", "1abc", strings.Repeat("s", 64), "pg_catalog", "semi;colon"} {
		if _, err := skiplock.NewClient(pool, skiplock.Config{Schema: name}); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("schema %q: %v, want ErrInvalid", name, err)
		}
		if _, err := skiplock.Migrate(context.Background(), pool, name); err == nil {
			t.Errorf("migrate accepted schema %q", name)
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = 'public'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("public schema: %d %v", n, err)
	}
}

func TestEnqueueUnmigratedSchema(t *testing.T) {
	t.Parallel()
	c, err := skiplock.NewClient(pgtest.Pool(t), skiplock.Config{Schema: "never_migrated"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Enqueue(context.Background(), emailArgs{}, nil)
	if !errors.Is(err, skiplock.ErrNotMigrated) {
		t.Fatalf("got %v, want ErrNotMigrated", err)
	}
}

func TestBulkEnqueueWithCopy(t *testing.T) {
	t.Parallel()
	for _, clock := range []string{"fake", "database"} {
		t.Run(clock, func(t *testing.T) {
			t.Parallel()
			cfg := skiplock.Config{}
			if clock == "database" {
				cfg.Clock = realClock{} // replaced below: nil means the database's now()
			}
			e := newEnv(t, cfg)
			c := e.client
			if clock == "database" {
				var err error
				c, err = skiplock.NewClient(e.pool, skiplock.Config{Schema: e.schema})
				e.must(err)
				defer c.Close()
			}
			params := make([]skiplock.EnqueueParams, 500)
			for i := range params {
				params[i] = skiplock.EnqueueParams{Args: otherArgs{N: i}, Opts: skiplock.EnqueueOpts{Priority: i % 3, Queue: "bulk"}}
			}
			tx, err := e.pool.Begin(e.ctx)
			e.must(err)
			_, err = c.EnqueueManyTx(e.ctx, tx, params)
			e.must(err)
			e.must(tx.Rollback(e.ctx))
			if n := e.countJobs(); n != 0 {
				t.Fatalf("rolled-back COPY left %d jobs", n)
			}
			tx, err = e.pool.Begin(e.ctx)
			e.must(err)
			res, err := c.EnqueueManyTx(e.ctx, tx, params)
			e.must(err)
			e.must(tx.Commit(e.ctx))
			rows, err := e.pool.Query(e.ctx, "SELECT id::text, (payload->>'n')::int, priority, queue, max_attempts, run_at <= now() + interval '1 second' FROM "+e.q("jobs")+" ORDER BY id")
			e.must(err)
			i := 0
			for rows.Next() {
				var id, queue string
				var n, prio, maxAtt int
				var due bool
				e.must(rows.Scan(&id, &n, &prio, &queue, &maxAtt, &due))
				if id != res[i].ID || n != i || prio != i%3 || queue != "bulk" || maxAtt != 8 || (clock == "database" && !due) {
					t.Fatalf("row %d: id %s n %d prio %d queue %s max %d due %v; want id %s", i, id, n, prio, queue, maxAtt, due, res[i].ID)
				}
				i++
			}
			e.must(rows.Err())
			if i != len(params) {
				t.Fatalf("%d rows, want %d", i, len(params))
			}
		})
	}
}

// Ids made in SQL (single inserts, batches, the SQL enqueue function) and in Go (COPY)
// alike are RFC 9562 version 7 with variant 10, and stay in insertion order.
func TestJobIDsAreVersion7Variant10(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	var ids []string
	r, err := e.client.Enqueue(e.ctx, emailArgs{}, nil)
	e.must(err)
	ids = append(ids, r.ID)
	for _, n := range []int{10, 100} { // insert_many, then COPY
		params := make([]skiplock.EnqueueParams, n)
		for i := range params {
			params[i] = skiplock.EnqueueParams{Args: emailArgs{}}
		}
		rs, err := e.client.EnqueueManyTx(e.ctx, e.pool, params)
		e.must(err)
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
	}
	for i, id := range ids {
		if id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("id %d %s is not version 7, variant 10", i, id)
		}
		if i > 0 && id <= ids[i-1] {
			t.Fatalf("id %d %s does not sort after %s", i, id, ids[i-1])
		}
	}
}

// An enqueue whose own transaction has committed reports its jobs even when the
// NOTIFY after it fails (a second enqueue would duplicate them); one whose NOTIFY is
// part of its transaction fails whole, and leaves nothing.
func TestEnqueueReportsCommittedJobsWhenTheirNotifyFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{NotifyCoalesce: -1})
	e.client.SetChannelForTest(strings.Repeat("c", 100)) // over NAMEDATALEN: every NOTIFY fails
	batch := make([]skiplock.EnqueueParams, 64)          // COPY, committed before its NOTIFY
	for i := range batch {
		batch[i] = skiplock.EnqueueParams{Args: emailArgs{To: "x"}}
	}
	res, err := e.client.EnqueueMany(e.ctx, batch)
	if err != nil || len(res) != 64 {
		t.Fatalf("EnqueueMany on the pool: %d results, %v; want 64 and no error", len(res), err)
	}
	if n := e.countJobs(); n != 64 {
		t.Fatalf("%d jobs, want 64", n)
	}

	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	if _, err := e.client.EnqueueManyTx(e.ctx, tx, batch); err == nil {
		t.Fatal("EnqueueManyTx with a failing NOTIFY: no error")
	}
	e.must(tx.Rollback(e.ctx))
	if _, err := e.client.Enqueue(e.ctx, emailArgs{To: "x"}, nil); err == nil {
		t.Fatal("Enqueue alone, its NOTIFY inside its transaction: no error")
	}
	if n := e.countJobs(); n != 64 {
		t.Fatalf("%d jobs after the failed enqueues, want 64", n)
	}
}
