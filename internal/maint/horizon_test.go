package maint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/skiplocktest"
)

// newHorizonWatch returns a watch on a database of the test's own (the horizon is
// the database's: other tests' transactions would be older than the test's pin), its
// connection string and pool, and its log.
func newHorizonWatch(t *testing.T, after time.Duration) (*maint.HorizonWatch, string, *pgxpool.Pool, *skiplocktest.FakeClock, *bytes.Buffer) {
	t.Helper()
	url, pool := pgtest.MigratedDatabase(t, "skiplock")
	s, err := store.New("skiplock")
	if err != nil {
		t.Fatal(err)
	}
	clock := skiplocktest.NewFakeClock(t0)
	var buf bytes.Buffer
	w := &maint.HorizonWatch{Store: s, Log: slog.New(slog.NewJSONHandler(&buf, nil)), Every: time.Minute,
		After: after, Clock: clock}
	return w, url, pool, clock, &buf
}

// look runs one pass of w, as the runner does: in a transaction.
func look(t *testing.T, w *maint.HorizonWatch, pool *pgxpool.Pool) maint.HorizonResult {
	t.Helper()
	ctx := context.Background()
	var res maint.Result
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		res, err = w.RunOnce(ctx, tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.(maint.HorizonResult)
}

// logLines decodes the JSON log lines written so far.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// The horizon watch names a session that holds the horizon, once, when it has held
// it for After by the watcher's clock, and says when it ends.
func TestHorizonWatchWarnsOnceAboutAPin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, url, pool, clock, buf := newHorizonWatch(t, 5*time.Minute)

	if res := look(t, w, pool); res.Holder != "" {
		t.Fatalf("no session holds the horizon, the watch reports %+v", res)
	}
	pid, release := pgtest.HoldHorizon(t, url)
	for range 3 { // transactions begun after the pin's
		if _, err := pool.Exec(ctx, "SELECT txid_current()"); err != nil {
			t.Fatal(err)
		}
	}
	if res := look(t, w, pool); res.Holder != store.HolderSession || res.PID != pid || res.XIDAge < 3 {
		t.Fatalf("with session %d pinned, the watch reports %+v; want that session, 3 or more xids behind", pid, res)
	}
	clock.Advance(4 * time.Minute)
	look(t, w, pool)
	if lines := logLines(t, buf); len(lines) != 0 {
		t.Fatalf("after 4 of 5 minutes the watch logged %v", lines)
	}
	clock.Advance(time.Minute)
	look(t, w, pool)
	clock.Advance(time.Minute)
	look(t, w, pool)
	lines := logLines(t, buf)
	if len(lines) != 1 || lines[0]["level"] != "WARN" || int(lines[0]["pid"].(float64)) != pid ||
		lines[0]["state"] != "idle in transaction" || lines[0]["held_for"] != float64(5*time.Minute) {
		t.Fatalf("after 5 and 6 minutes the watch logged %v; want one warning naming session %d, idle in transaction, held 5m0s", lines, pid)
	}

	release()
	look(t, w, pool)
	lines = logLines(t, buf)
	if len(lines) != 2 || lines[1]["level"] != "WARN" || !strings.Contains(lines[1]["msg"].(string), "moved on") ||
		lines[1]["seen_for"] != float64(6*time.Minute) {
		t.Fatalf("after the pin ended the watch logged %v; want a line that it moved on after 6m0s", lines)
	}
}

// A holding PostgreSQL reports as older than After is named at the first look, and a
// prepared transaction is named by its gid.
func TestHorizonWatchUsesTheReportedStartAndNamesPreparedTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _, pool, _, buf := newHorizonWatch(t, time.Nanosecond)
	var maxPrepared int
	if err := pool.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&maxPrepared); err != nil {
		t.Fatal(err)
	}
	if maxPrepared == 0 {
		t.Skip("max_prepared_transactions is 0 on this server")
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "PREPARE TRANSACTION 'horizon-test'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "ROLLBACK PREPARED 'horizon-test'") })
	tx.Rollback(ctx) // the connection's transaction is already gone

	look(t, w, pool)
	lines := logLines(t, buf)
	if len(lines) != 1 || lines[0]["holder"] != store.HolderPrepared || lines[0]["name"] != "horizon-test" {
		t.Fatalf("the watch logged %v; want one warning naming the prepared transaction horizon-test", lines)
	}
}
