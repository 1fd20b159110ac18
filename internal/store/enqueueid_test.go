package store

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestInsertPlainIDFromClient: a job with no deduplication, unique or sequence key
// gets its id from the client (insertPlainSQL's $15), not from the column's default,
// and the id Insert returns is the row's, on every path the plain insert takes: a
// solo insert on the pool with its NOTIFY inside, one whose NOTIFY follows its commit
// (withNotifyAfter), and an insert in a caller's transaction. The schema's jobs.id
// loses its default, so an insert that relied on it fails; the id's time is the
// host's clock at the call (a v7 UUID, as a COPY's ids).
func TestInsertPlainIDFromClient(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := pgtest.Schema(t)
	s := newStore(t, schema)
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `ALTER TABLE `+s.Table("jobs")+` ALTER COLUMN id DROP DEFAULT`); err != nil {
		t.Fatal(err)
	}
	channel := "idc_" + schema
	p := InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3}
	check := func(name string, insert func() (InsertResult, error)) {
		t.Helper()
		before := time.Now().Truncate(time.Millisecond)
		r, err := insert()
		after := time.Now()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !r.Inserted {
			t.Fatalf("%s: not inserted", name)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s.Table("jobs")+` WHERE id = $1`, r.ID).Scan(&n); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n != 1 {
			t.Errorf("%s: %d rows with the returned id %s, want 1", name, n, r.ID)
		}
		b, err := hex.DecodeString(strings.ReplaceAll(r.ID, "-", ""))
		if err != nil || len(b) != 16 {
			t.Fatalf("%s: id %q is not a UUID", name, r.ID)
		}
		if b[6]>>4 != 7 || b[8]>>6 != 2 {
			t.Errorf("%s: id %s is not a v7 UUID of RFC 9562's variant", name, r.ID)
		}
		var ms int64
		for _, x := range b[:6] {
			ms = ms<<8 | int64(x)
		}
		if at := time.UnixMilli(ms); at.Before(before) || at.After(after) {
			t.Errorf("%s: id %s made at %s, outside the call (%s to %s)", name, r.ID, at, before, after)
		}
	}
	solo := p
	solo.Solo = true
	check("solo, NOTIFY inside", func() (InsertResult, error) {
		return s.Insert(ctx, pool, nil, solo, &Notify{Channel: channel, Queues: []string{"q"}})
	})
	check("solo, NOTIFY after the commit", func() (InsertResult, error) {
		return s.Insert(ctx, pool, nil, solo, &Notify{Channel: channel, Queues: []string{"q"}, AfterCommit: true})
	})
	check("no NOTIFY", func() (InsertResult, error) { return s.Insert(ctx, pool, nil, solo, nil) })
	check("in a caller's transaction", func() (InsertResult, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return InsertResult{}, err
		}
		defer tx.Rollback(ctx)
		r, err := s.Insert(ctx, tx, nil, p, &Notify{Channel: channel, Queues: []string{"q"}})
		if err != nil {
			return InsertResult{}, err
		}
		return r, tx.Commit(ctx)
	})
}
