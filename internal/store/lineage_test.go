package store

import (
	"context"
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
