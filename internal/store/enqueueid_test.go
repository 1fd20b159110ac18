package store

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/uuidv7"
)

// plainID is an id for InsertParams.ID, made as the client makes it.
func plainID() *string {
	id := uuidv7.String(uuidv7.New(time.Now(), 0))
	return &id
}

// TestInsertPlainTakesTheCallersID: a job with no deduplication, unique or sequence key
// and an InsertParams.ID is inserted with that id (insertPlainSQL's $15), not the
// column's default, on every path the plain insert takes: a solo insert on the pool
// with its NOTIFY inside, one whose NOTIFY follows its commit (withNotifyAfter), none,
// and an insert in a caller's transaction. The schema's jobs.id loses its default, so
// an insert that relied on it fails. Without an ID the general statement runs and the
// default makes the id, as before.
func TestInsertPlainTakesTheCallersID(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := pgtest.Schema(t)
	s := newStore(t, schema)
	pool := pgtest.Pool(t)
	count := func(id string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s.Table("jobs")+` WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Without an ID: the default's id, returned by the statement.
	r, err := s.Insert(ctx, pool, nil, InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, Solo: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !uuidv7.Valid(r.ID) || count(r.ID) != 1 {
		t.Fatalf("without an ID: id %q, %d rows with it", r.ID, count(r.ID))
	}

	if _, err := pool.Exec(ctx, `ALTER TABLE `+s.Table("jobs")+` ALTER COLUMN id DROP DEFAULT`); err != nil {
		t.Fatal(err)
	}
	channel := "idc_" + schema
	check := func(name string, db DBTX, solo bool, n *Notify) {
		t.Helper()
		id := plainID()
		r, err := s.Insert(ctx, db, nil, InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, Solo: solo, ID: id}, n)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !r.Inserted || r.ID != *id {
			t.Fatalf("%s: got %+v, want the id %s inserted", name, r, *id)
		}
		if db == DBTX(pool) && count(*id) != 1 {
			t.Errorf("%s: %d rows with the id %s, want 1", name, count(*id), *id)
		}
	}
	check("solo, NOTIFY inside", pool, true, &Notify{Channel: channel, Queues: []string{"q"}})
	check("solo, NOTIFY after the commit", pool, true, &Notify{Channel: channel, Queues: []string{"q"}, AfterCommit: true})
	check("no NOTIFY", pool, true, nil)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	check("in a caller's transaction", tx, false, &Notify{Channel: channel, Queues: []string{"q"}})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s.Table("jobs")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("%d jobs, want 5", n)
	}
}
