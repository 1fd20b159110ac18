package store

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestSoloInsertLineage: a solo insert (InsertParams.Solo) records no lineage row,
// whether its NOTIFY is inside its statement or follows its commit (withNotifyAfter,
// BEGIN; insert; COMMIT), and whether it inserts or finds its deduplication key held;
// the same insert without Solo records one, and so does a caller's transaction's
// next insert after a solo one on the same connection (the setting is transaction-local).
func TestSoloInsertLineage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := pgtest.Schema(t)
	s := newStore(t, schema)
	pool := pgtest.Pool(t)
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	lineage := func(id string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+s.Table("tx_lineage")+" WHERE job_id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	job := func(solo bool, key string) InsertParams {
		p := InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, Solo: solo}
		if key != "" {
			p.DedupKey = &key
		}
		return p
	}
	after := &Notify{Channel: "solo_" + schema, Queues: []string{"q"}, AfterCommit: true}
	inside := &Notify{Channel: "solo_" + schema, Queues: []string{"q"}}
	for _, c := range []struct {
		name  string
		db    DBTX
		n     *Notify
		solo  bool
		key   string
		rows  int
		dedup bool
	}{
		{"solo, NOTIFY inside", conn, inside, true, "", 0, false},
		{"solo, NOTIFY after its commit", pool, after, true, "", 0, false},
		{"solo with a deduplication key", conn, nil, true, "d", 0, false},
		{"solo, the key held", conn, nil, true, "d", 0, true},
		{"not solo, same connection", conn, nil, false, "", 1, false},
		{"not solo, NOTIFY after its commit", pool, after, false, "", 1, false},
	} {
		r, err := s.Insert(ctx, c.db, nil, job(c.solo, c.key), c.n)
		if err != nil || r.Inserted == c.dedup {
			t.Fatalf("%s: %+v, %v", c.name, r, err)
		}
		if c.dedup {
			continue
		}
		if got := lineage(r.ID); got != c.rows {
			t.Errorf("%s: %d lineage rows, want %d", c.name, got, c.rows)
		}
	}
	// A caller's transaction, after a solo insert on its connection.
	if _, err := s.Insert(ctx, conn, nil, job(true, ""), nil); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Insert(ctx, tx, nil, job(false, ""), inside)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := lineage(r.ID); got != 1 {
		t.Errorf("a caller's transaction after a solo insert: %d lineage rows, want 1", got)
	}
}

// TestBatchLineage: a statement that inserts more than one job records one lineage row
// holding all their ids (migration 0021), by COPY and by the batch insert alike, and
// a one-job statement its job_id; JobsByTx and JobsByTxPage read both forms, also the
// one row per job a schema migrated before 0021 wrote, and an outbox event's row adds
// no job.
func TestBatchLineage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := pgtest.Schema(t)
	s := newStore(t, schema)
	pool := pgtest.Pool(t)
	job := func() InsertParams {
		return InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3}
	}
	var want []string
	var txid int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		one, err := s.Insert(ctx, tx, nil, job(), nil)
		if err != nil {
			return err
		}
		many, err := s.InsertMany(ctx, tx, nil, []InsertParams{job(), job(), job()}, nil)
		if err != nil {
			return err
		}
		ids := make([][16]byte, 70)
		ps := make([]InsertParams, len(ids))
		for i := range ids {
			ids[i] = [16]byte{0xff, byte(i), 1} // after every generated id: pages end with them
			ps[i] = job()
		}
		if err := s.CopyInsert(ctx, tx, ids, ps, false, nil, nil); err != nil {
			return err
		}
		// A row per job, as a schema migrated before 0021 wrote it, and an event's row.
		var legacy string
		if err := tx.QueryRow(ctx, `INSERT INTO `+s.Table("jobs")+` (id, queue, kind, payload) VALUES ('00000000-0000-7000-8000-000000000001', 'q', 'k', '{}') RETURNING id`).Scan(&legacy); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+s.Table("tx_lineage")+` WHERE job_id = $1`, legacy); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.Table("tx_lineage")+` (txid, job_id, created_at) VALUES (pg_current_xact_id(), $1, now()),
			(pg_current_xact_id(), NULL, now())`, legacy); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE `+s.Table("tx_lineage")+` SET event_id = gen_random_uuid() WHERE job_id IS NULL AND job_ids IS NULL`); err != nil {
			return err
		}
		want = append(want, one.ID, legacy)
		for _, r := range many {
			want = append(want, r.ID)
		}
		for _, id := range ids {
			want = append(want, fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16]))
		}
		return tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&txid)
	})
	if err != nil {
		t.Fatal(err)
	}
	var rows, arrays, inArrays int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(job_ids), coalesce(sum(cardinality(job_ids)), 0) FROM `+s.Table("tx_lineage")).Scan(&rows, &arrays, &inArrays); err != nil {
		t.Fatal(err)
	}
	// The one-job insert, the batch, the COPY, the legacy job and the event.
	if rows != 5 || arrays != 2 || inArrays != 73 {
		t.Errorf("lineage: %d rows, %d with job_ids holding %d ids; want 5, 2 holding 73", rows, arrays, inArrays)
	}
	sort.Strings(want)
	jobs, err := s.JobsByTx(ctx, pool, txid)
	if err != nil {
		t.Fatal(err)
	}
	if got := jobIDs(jobs); !slices.Equal(got, want) {
		t.Errorf("JobsByTx: %d jobs %v, want %d %v", len(got), got, len(want), want)
	}
	var paged []string
	after := ""
	for range 100 {
		page, err := s.JobsByTxPage(ctx, pool, txid, after, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, jobIDs(page)...)
		after = page[len(page)-1].ID
	}
	if !slices.Equal(paged, want) {
		t.Errorf("JobsByTxPage in pages of 10: %d jobs, want %d", len(paged), len(want))
	}
}

func jobIDs(jobs []*Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// TestInsertPlainWritesTheSameRow: a job with no deduplication, unique or sequence key
// goes through insert_plain, which names fewer columns than the keyed inserts; its row
// must be the one the batch insert writes for the same job (every column but the id
// and the txid), with a delay, metadata, tags and a concurrency key, and without.
func TestInsertPlainWritesTheSameRow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := pgtest.Schema(t)
	s := newStore(t, schema)
	pool := pgtest.Pool(t)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	runAt := now.Add(time.Hour)
	for _, p := range []InsertParams{
		{Queue: "q", Kind: "k", Payload: []byte(`{"a":1}`), MaxAttempts: 3},
		{Queue: "q2", Kind: "k2", Payload: []byte(`{}`), Priority: 7, MaxAttempts: 5, Delay: 90 * time.Second,
			Metadata: []byte(`{"m":"x"}`), Tags: []string{"t1", "t2"}, ConcurrencyKey: "acme"},
		{Queue: "q3", Kind: "k3", Payload: []byte(`[]`), MaxAttempts: 1, RunAt: &runAt},
	} {
		p.ID = plainID() // the client's plain enqueue: insert_plain
		one, err := s.Insert(ctx, pool, &now, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		many, err := s.InsertMany(ctx, pool, &now, []InsertParams{p, p}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var same bool
		var a, b string
		if err := pool.QueryRow(ctx, `SELECT x.r = y.r, x.r::text, y.r::text FROM
  (SELECT to_jsonb(j) - 'id' - 'txid' AS r FROM `+s.Table("jobs")+` j WHERE id = $1) x,
  (SELECT to_jsonb(j) - 'id' - 'txid' AS r FROM `+s.Table("jobs")+` j WHERE id = $2) y`, one.ID, many[0].ID).Scan(&same, &a, &b); err != nil {
			t.Fatal(err)
		}
		if !same {
			t.Errorf("insert_plain wrote\n%s\nthe batch insert\n%s", a, b)
		}
	}
}
