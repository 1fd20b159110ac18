package store

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// A role without pg_read_all_stats still learns which session holds the horizon and
// how far behind it is, though not its state or how long it has been open.
func TestHorizonWithoutPrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	role := pgtest.SchemaName(t)
	if _, err := pgtest.Pool(t).Exec(ctx, `CREATE ROLE "`+role+`" NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	// Registered before the database, so it runs after the database is dropped.
	t.Cleanup(func() { pgtest.Pool(t).Exec(context.Background(), `DROP ROLE "`+role+`"`) })
	url, pool := pgtest.MigratedDatabase(t, "skiplock")
	if _, err := pool.Exec(ctx, `GRANT USAGE ON SCHEMA skiplock TO "`+role+`"`); err != nil {
		t.Fatal(err)
	}
	s, err := New("skiplock")
	if err != nil {
		t.Fatal(err)
	}
	watcher, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(ctx)
	pid, _ := pgtest.HoldHorizon(t, url)
	if _, err := pool.Exec(ctx, "SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}

	full, err := s.Horizon(ctx, watcher)
	if err != nil {
		t.Fatal(err)
	}
	if full.Kind != HolderSession || full.PID != pid || full.State != "idle in transaction" || !full.Known || full.XIDAge < 1 {
		t.Fatalf("as superuser: %+v; want session %d, idle in transaction, its time known, 1 or more xids behind", full, pid)
	}
	if _, err := watcher.Exec(ctx, `SET ROLE "`+role+`"`); err != nil {
		t.Fatal(err)
	}
	h, err := s.Horizon(ctx, watcher)
	if err != nil {
		t.Fatal(err)
	}
	if h.Kind != HolderSession || h.PID != pid || h.XID != full.XID || h.XIDAge < 1 || h.State != "" || h.Known {
		t.Fatalf("as %s: %+v; want session %d (xid %d), 1 or more xids behind, its state and time hidden", role, h, pid, full.XID)
	}
}
