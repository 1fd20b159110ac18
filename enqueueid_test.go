package skiplock_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// TestEnqueueMakesAPlainJobsID: Enqueue of a job without a deduplication, unique or
// sequence key makes the job's id in the client (a v7 UUID of the host's clock at the
// call) and the insert returns nothing, so it needs no id default: with the column's
// default dropped it still inserts, on the pool and in a caller's transaction, and the
// id it returns is the row's.
func TestEnqueueMakesAPlainJobsID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, err := e.pool.Exec(e.ctx, `ALTER TABLE "`+e.schema+`".jobs ALTER COLUMN id DROP DEFAULT`)
	e.must(err)
	check := func(name string, enqueue func() (skiplock.EnqueueResult, error)) {
		t.Helper()
		before := time.Now().Truncate(time.Millisecond)
		r, err := enqueue()
		after := time.Now()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := scalar[int64](e, `SELECT count(*) FROM "`+e.schema+`".jobs WHERE id = $1`, r.ID); n != 1 || r.Duplicate {
			t.Errorf("%s: %d rows with the returned id %s (duplicate %v), want 1", name, n, r.ID, r.Duplicate)
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
	check("Enqueue", func() (skiplock.EnqueueResult, error) {
		return e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), nil)
	})
	check("EnqueueTx", func() (skiplock.EnqueueResult, error) {
		tx, err := e.pool.Begin(e.ctx)
		if err != nil {
			return skiplock.EnqueueResult{}, err
		}
		defer tx.Rollback(e.ctx)
		r, err := e.client.EnqueueRawTx(e.ctx, tx, "k", []byte(`{"a":1}`), &skiplock.EnqueueOpts{Queue: "q", Priority: 5, Tags: []string{"t"}})
		if err != nil {
			return r, err
		}
		return r, tx.Commit(e.ctx)
	})
}
