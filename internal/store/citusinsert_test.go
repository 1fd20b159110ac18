package store

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// recordingDB is a DBTX that records the SQL of the statements run through it.
type recordingDB struct {
	DBTX
	mu  sync.Mutex
	sql []string
}

func (r *recordingDB) note(sql string) {
	r.mu.Lock()
	r.sql = append(r.sql, sql)
	r.mu.Unlock()
}

func (r *recordingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.note(sql)
	return r.DBTX.Exec(ctx, sql, args...)
}

func (r *recordingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.note(sql)
	return r.DBTX.Query(ctx, sql, args...)
}

func (r *recordingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r.note(sql)
	return r.DBTX.QueryRow(ctx, sql, args...)
}

// last returns the last statement recorded and forgets them all.
func (r *recordingDB) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sql) == 0 {
		return ""
	}
	s := r.sql[len(r.sql)-1]
	r.sql = nil
	return s
}

// TestCitusRouterInsert enqueues single jobs on the Citus layout of the real cluster
// (SKIPLOCK_TEST_CITUS_URL) and checks that each runs the router insert meant for it
// (citusinsert.go), with every semantic of the single-node insert: the injected
// clock's created_at and run_at, the NOTIFY heard on the coordinator at commit (or
// announced after it), the lineage row beside the job, a duplicate deduplication key
// answered with its holder (per concurrency key), a unique key with a period, a
// rolled-back transaction leaving nothing, and a sequence key keeping its INSERT …
// SELECT.
func TestCitusRouterInsert(t *testing.T) {
	t.Parallel()
	pool, s, t0, at := citusStore(t)
	ctx := context.Background()
	channel := s.Schema + ".crouter"
	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, `LISTEN "`+channel+`"`); err != nil {
		t.Fatal(err)
	}
	heard := func(what string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := listener.Conn().WaitForNotification(wctx)
		if err != nil || n.Channel != channel || n.Payload != "default" {
			t.Fatalf("%s: the NOTIFY on the coordinator: %+v, %v", what, n, err)
		}
	}
	notify := &Notify{Channel: channel, Queues: []string{"default"}}
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	job := func(key string) InsertParams {
		return InsertParams{Queue: "default", Kind: "k", Payload: []byte(`{"a":1}`), MaxAttempts: 3, ConcurrencyKey: key,
			Tags: []string{"t1"}, Metadata: []byte(`{"m":2}`)}
	}

	// A plain job in a transaction: the plain router insert with its NOTIFY.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingDB{DBTX: tx}
	p := job("acme")
	p.Delay = time.Minute
	r, err := s.Insert(ctx, rec, at(0), p, notify)
	if err != nil || !r.Inserted {
		t.Fatalf("Insert(plain) = %+v, %v", r, err)
	}
	if got := rec.last(); got != s.enqueue.citus.plain[1].sql {
		t.Fatalf("the plain insert ran %q; want citus_insert_plain_notify", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	heard("plain")
	var queue, kind, key string
	var created, runAt time.Time
	var tags []string
	var meta map[string]int
	if err := pool.QueryRow(ctx, `SELECT queue, kind, concurrency_key, created_at, run_at, tags, metadata FROM `+s.Table("jobs")+`
		WHERE id = $1 AND concurrency_key = 'acme'`, r.ID).Scan(&queue, &kind, &key, &created, &runAt, &tags, &meta); err != nil {
		t.Fatal(err)
	}
	if queue != "default" || kind != "k" || key != "acme" || !created.Equal(t0) || !runAt.Equal(*at(time.Minute)) ||
		len(tags) != 1 || tags[0] != "t1" || meta["m"] != 2 {
		t.Fatalf("the plain job: queue %q kind %q key %q created %v run_at %v tags %v metadata %v", queue, kind, key, created, runAt, tags, meta)
	}
	if n := count(`SELECT count(*) FROM `+s.Table("tx_lineage")+` WHERE job_id = $1 AND concurrency_key = 'acme'`, r.ID); n != 1 {
		t.Fatalf("the plain job's lineage rows: %d", n)
	}
	// The key table lists the key: a worker finds the job.
	if keys, err := s.CitusKeys(ctx, pool, at(time.Minute), "default", nil, 10); err != nil || len(keys) != 1 || keys[0] != "acme" {
		t.Fatalf("CitusKeys = %q, %v", keys, err)
	}

	// A deduplication key, no NOTIFY: the dedup router insert; the duplicate names its
	// holder; the same key string under another concurrency key is another job's.
	rec = &recordingDB{DBTX: pool}
	d := job("acme")
	dk := "order-1"
	d.DedupKey = &dk
	first, err := s.Insert(ctx, rec, at(0), d, nil)
	if err != nil || !first.Inserted {
		t.Fatalf("Insert(dedup) = %+v, %v", first, err)
	}
	if got := rec.last(); got != s.enqueue.citus.insert[1][0].sql {
		t.Fatalf("the dedup insert ran %q; want citus_insert_dedup", got)
	}
	dup, err := s.Insert(ctx, pool, at(time.Second), d, notify)
	if err != nil || dup.Inserted || dup.ID != first.ID {
		t.Fatalf("the duplicate = %+v, %v; want the holder %s", dup, err, first.ID)
	}
	other := d
	other.ConcurrencyKey = "globex"
	if o, err := s.Insert(ctx, pool, at(0), other, nil); err != nil || !o.Inserted || o.ID == first.ID {
		t.Fatalf("the key under globex = %+v, %v; want a job of its own", o, err)
	}

	// A unique key with a period: its stored key is the period's, from the injected
	// clock; a second job in the period is answered with the holder.
	u := job("acme")
	uk := "nightly"
	u.UniqueKey, u.UniqueStates, u.UniquePeriod = &uk, []string{"pending", "running"}, time.Hour
	rec = &recordingDB{DBTX: pool}
	held, err := s.Insert(ctx, rec, at(0), u, notify)
	if err != nil || !held.Inserted {
		t.Fatalf("Insert(unique) = %+v, %v", held, err)
	}
	if got := rec.last(); got != s.enqueue.citus.insert[0][1].sql {
		t.Fatalf("the unique insert ran %q; want citus_insert_notify", got)
	}
	heard("unique")
	var stored string
	if err := pool.QueryRow(ctx, `SELECT unique_key FROM `+s.Table("jobs")+` WHERE id = $1 AND concurrency_key = 'acme'`, held.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := "nightly@" + strconv.FormatInt(t0.UnixMicro()/time.Hour.Microseconds(), 10); stored != want {
		t.Fatalf("the stored unique key %q; want %q", stored, want)
	}
	if again, err := s.Insert(ctx, pool, at(time.Minute), u, nil); err != nil || again.Inserted || again.ID != held.ID {
		t.Fatalf("the unique job again = %+v, %v; want the holder %s", again, err, held.ID)
	}

	// A rolled-back transaction leaves neither the job nor its lineage row.
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := s.Insert(ctx, tx, at(0), job("initech"), notify)
	if err != nil || !gone.Inserted {
		t.Fatalf("Insert in the rolled-back transaction = %+v, %v", gone, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(`SELECT count(*) FROM `+s.Table("jobs")+` WHERE concurrency_key = 'initech'`) +
		count(`SELECT count(*) FROM `+s.Table("tx_lineage")+` WHERE concurrency_key = 'initech'`); n != 0 {
		t.Fatalf("after the rollback: %d rows of initech", n)
	}

	// On the pool with the NOTIFY after the commit: the insert carries none, the
	// announcement follows. A solo insert still writes its lineage row on the layout.
	solo := job("hooli")
	solo.Solo = true
	an := &Notify{Channel: channel, Queues: []string{"default"}, AfterCommit: true}
	sr, err := s.Insert(ctx, pool, at(0), solo, an)
	if err != nil || !sr.Inserted {
		t.Fatalf("Insert(after commit) = %+v, %v", sr, err)
	}
	heard("after commit")
	if n := count(`SELECT count(*) FROM `+s.Table("tx_lineage")+` WHERE job_id = $1 AND concurrency_key = 'hooli'`, sr.ID); n != 1 {
		t.Fatalf("the solo job's lineage rows: %d; the layout always writes one", n)
	}

	// A sequence key keeps the INSERT … SELECT (its lock comes before its id).
	sq := job("acme")
	sk := "seq"
	sq.SequenceKey = &sk
	rec = &recordingDB{DBTX: pool}
	if r, err := s.Insert(ctx, rec, at(0), sq, nil); err != nil || !r.Inserted {
		t.Fatalf("Insert(sequence) = %+v, %v", r, err)
	}
	if got := rec.last(); got != s.enqueue.insert[1][0].sql {
		t.Fatalf("the sequence insert ran %q; want insert_sequence", got)
	}

	// A bad row is refused with the node's error, nothing inserted.
	bad := job("acme")
	bad.Payload = []byte(`not json`)
	var pgErr *pgconn.PgError
	if _, err := s.Insert(ctx, pool, at(0), bad, nil); !errors.As(err, &pgErr) || pgErr.Code != "22P02" {
		t.Fatalf("Insert(bad payload) = %v; want invalid_text_representation", err)
	}
}
