package migrate_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/skiplock/skiplock/internal/migrate"
	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestConcurrentMigratorsApplyOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 20)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, schema) })
	var wg sync.WaitGroup
	applied := make([][]int, 10)
	errs := make([]error, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = migrate.Up(context.Background(), pool, schema)
		}()
	}
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
		total += len(applied[i])
	}
	if want := len(migrate.All()); total != want {
		t.Fatalf("migrations applied %d times in all, want %d (once each)", total, want)
	}
	var rows int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM "`+schema+`".schema_migrations`).Scan(&rows); err != nil || rows != len(migrate.All()) {
		t.Fatalf("schema_migrations has %d rows (%v)", rows, err)
	}
	status, err := migrate.List(context.Background(), pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range status {
		if !s.Applied {
			t.Fatalf("%04d reported not applied", s.Version)
		}
	}
	// idempotent
	again, err := migrate.Up(context.Background(), pool, schema)
	if err != nil || len(again) != 0 {
		t.Fatalf("second run applied %v (%v)", again, err)
	}
}

func TestSQLOutputAppliesAndIsRecorded(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, schema) })
	ddl, err := migrate.SQL(schema)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ddl, `CREATE TABLE "`+schema+`".jobs`) {
		t.Fatalf("DDL does not create the jobs table:\n%s", ddl[:200])
	}
	if _, err := pool.Exec(context.Background(), ddl); err != nil {
		t.Fatalf("applying printed DDL: %v", err)
	}
	applied, err := migrate.Up(context.Background(), pool, schema)
	if err != nil || len(applied) != 0 {
		t.Fatalf("Up after the printed DDL applied %v (%v)", applied, err)
	}
}

func TestStatusOfEmptyDatabase(t *testing.T) {
	t.Parallel()
	status, err := migrate.List(context.Background(), pgtest.Pool(t), pgtest.SchemaName(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(status) == 0 || status[0].Applied {
		t.Fatalf("status %+v", status)
	}
	if _, err := migrate.SQL(`x"; drop`); err == nil {
		t.Fatal("SQL accepted a bad schema name")
	}
}

// TestHandoffColumnsFollowTheWorkersGrant: migration 14 adds columns that every claim
// writes, so a role given UPDATE on the lease under a column grant before the upgrade
// (the worker role of `skiplock roles`) must be able to write them after it.
func TestHandoffColumnsFollowTheWorkersGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, schema) })
	role := schema + "_w"
	if _, err := pool.Exec(ctx, `CREATE ROLE "`+role+`" NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(ctx, `DROP OWNED BY "`+role+`"; DROP ROLE "`+role+`"`) })
	if _, err := pool.Exec(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
		t.Fatal(err)
	}
	for _, m := range migrate.All() {
		if m.Version == 14 {
			if _, err := pool.Exec(ctx, `GRANT UPDATE (status, lease_token) ON "`+schema+`".jobs TO "`+role+`"`); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := pool.Exec(ctx, m.Render(schema)); err != nil {
			t.Fatalf("%04d: %v", m.Version, err)
		}
	}
	for _, col := range []string{"slot_of", "slot_token"} {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT has_column_privilege($1, $2, $3, 'UPDATE')`, role, `"`+schema+`".jobs`, col).Scan(&ok); err != nil || !ok {
			t.Errorf("UPDATE (%s) for the worker after the upgrade: %v (%v)", col, ok, err)
		}
	}
	var other bool
	if err := pool.QueryRow(ctx, `SELECT has_column_privilege('pg_monitor', $1, 'slot_of', 'UPDATE')`, `"`+schema+`".jobs`).Scan(&other); err != nil || other {
		t.Errorf("a role without a grant on the lease got UPDATE (slot_of): %v (%v)", other, err)
	}
}
