package migrate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/migrate"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestCitusRefusedOnPlainPostgreSQL: without the citus extension the layout is
// refused with a CitusError naming it, and the schema keeps its single-node layout.
func TestCitusRefusedOnPlainPostgreSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	did, err := migrate.Citus(ctx, pool, schema)
	var ce *migrate.CitusError
	if did || !errors.As(err, &ce) || !strings.Contains(ce.Reason, "citus extension") {
		t.Fatalf("Citus on plain PostgreSQL: %v, %v; want a CitusError naming the extension", did, err)
	}
	if dist, err := migrate.Distributed(ctx, pool, schema); err != nil || dist {
		t.Errorf("Distributed = %v, %v on plain PostgreSQL", dist, err)
	}
	if _, err := migrate.CitusSQL(`bad"name`); err == nil {
		t.Error("CitusSQL accepted an unsafe schema name")
	}
}

// TestCitusLayout runs on a real Citus cluster (SKIPLOCK_TEST_CITUS_URL): the growing
// tables are distributed by concurrency_key and co-located, the small ones are
// reference tables, the rest stay on the coordinator; every unique constraint of a
// distributed table contains the key; a second run does nothing; a schema with a
// migration missing is refused.
func TestCitusLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.CitusSchema(t)
	q := `"` + schema + `".`

	rows, err := pool.Query(ctx, `SELECT c.relname::text, p.partmethod::text, coalesce(column_to_column_name(p.logicalrelid, p.partkey), ''), p.colocationid
FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	type dist struct {
		method, column string
		colocation     int
	}
	got := map[string]dist{}
	for rows.Next() {
		var name string
		var d dist
		if err := rows.Scan(&name, &d.method, &d.column, &d.colocation); err != nil {
			t.Fatal(err)
		}
		got[name] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	colocation := got["jobs"].colocation
	for _, table := range []string{"jobs", "outbox", "tx_lineage", "job_unique", "citus_keys"} {
		if d := got[table]; d.method != "h" || d.column != "concurrency_key" || d.colocation != colocation {
			t.Errorf("%s: %+v; want hash-distributed by concurrency_key, co-located with jobs (%d)", table, d, colocation)
		}
	}
	for _, table := range []string{"queues", "limits", "limit_windows"} {
		if d := got[table]; d.method != "n" {
			t.Errorf("%s: %+v; want a reference table", table, d)
		}
	}
	for _, table := range []string{"schedules", "batches", "inbox", "partitioning", "job_dedup", "schema_migrations"} {
		if d, ok := got[table]; ok {
			t.Errorf("%s: %+v; want a plain table on the coordinator", table, d)
		}
	}
	if len(got) != 8 {
		t.Errorf("%d tables in Citus' metadata, want 8: %v", len(got), got)
	}

	// Every primary key and unique index of a distributed table contains the key.
	var bad []string
	rows, err = pool.Query(ctx, `SELECT i.indexrelid::regclass::text FROM pg_index i
WHERE i.indisunique AND i.indrelid = ANY($1::regclass[])
  AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attname = 'concurrency_key' AND a.attnum = ANY(i.indkey))`,
		[]string{q + "jobs", q + "outbox", q + "tx_lineage", q + "job_unique"})
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		bad = append(bad, name)
	}
	if err := rows.Err(); err != nil || len(bad) > 0 {
		t.Errorf("unique indexes without the distribution column: %v (%v)", bad, err)
	}

	if dist, err := migrate.Distributed(ctx, pool, schema); err != nil || !dist {
		t.Errorf("Distributed = %v, %v; want true", dist, err)
	}

	// The claim here reads every queue's jobs through jobs_fair_idx (migration 0024
	// narrowed it to the jobs of fair queues, which this layout refuses): it holds
	// every pending job again, and no trigger rewrites job_fair.
	var def, body string
	var triggers int
	if err := pool.QueryRow(ctx, `SELECT pg_get_indexdef($1::regclass),
  (SELECT p.prosrc FROM pg_proc p WHERE p.oid = $2::regprocedure),
  (SELECT count(*) FROM pg_trigger WHERE tgrelid = $3::regclass AND tgname LIKE 'queues_fair_lanes%')`,
		q+"jobs_fair_idx", q+"job_fair(text)", q+"queues").Scan(&def, &body, &triggers); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(def, "fair_indexed") || !strings.Contains(def, "pending") || strings.TrimSpace(body) != "SELECT true" || triggers != 0 {
		t.Errorf("jobs_fair_idx %q, job_fair %q, %d fair triggers on queues; want every pending job indexed, true, none", def, body, triggers)
	}
	if did, err := migrate.Citus(ctx, pool, schema); did || err != nil {
		t.Errorf("Citus again: %v, %v; want nothing done", did, err)
	}

	// A schema that lacks a migration is refused before anything changes.
	behind := pgtest.SchemaName(t)
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+behind+`" CASCADE`) })
	if _, err := migrate.Up(ctx, pool, behind); err != nil {
		t.Fatal(err)
	}
	all := migrate.All()
	last := all[len(all)-1].Version
	if _, err := pool.Exec(ctx, `DELETE FROM "`+behind+`".schema_migrations WHERE version = $1`, last); err != nil {
		t.Fatal(err)
	}
	did, err := migrate.Citus(ctx, pool, behind)
	var ce *migrate.CitusError
	if did || !errors.As(err, &ce) || !strings.Contains(ce.Reason, "lacks migrations") {
		t.Errorf("Citus on a schema behind: %v, %v; want a CitusError naming the missing migration", did, err)
	}
	if dist, err := migrate.Distributed(ctx, pool, behind); err != nil || dist {
		t.Errorf("the refused schema is distributed: %v, %v", dist, err)
	}
}

// TestStatementsSplitsTheCitusLayout: the layout splits into whole statements — each
// dollar-quoted body inside one — and nothing is lost but comments.
func TestStatementsSplitsTheCitusLayout(t *testing.T) {
	t.Parallel()
	ddl, err := migrate.CitusSQL("s")
	if err != nil {
		t.Fatal(err)
	}
	sts := migrate.Statements(ddl)
	if len(sts) < 30 {
		t.Fatalf("%d statements", len(sts))
	}
	var kept strings.Builder
	for _, st := range sts {
		if strings.Count(st, "$$")%2 != 0 || !strings.HasSuffix(strings.TrimSpace(st), ";") {
			t.Errorf("not a whole statement:\n%s", st)
		}
		kept.WriteString(st)
	}
	strip := func(s string) string {
		var b strings.Builder
		for _, l := range strings.Split(s, "\n") {
			if tl := strings.TrimSpace(l); tl != "" && !strings.HasPrefix(tl, "--") {
				b.WriteString(l + "\n")
			}
		}
		return b.String()
	}
	if strip(kept.String()) != strip(ddl) {
		t.Error("the statements do not add up to the layout's SQL (comments aside)")
	}
	if got := migrate.Statements("SELECT 1;\n-- c\nDO $$\nBEGIN\n  PERFORM 1;\nEND\n$$;\nSELECT 2"); len(got) != 3 {
		t.Errorf("Statements: %q", got)
	}
}

// TestCitusLayoutOfAnExistingSchema: a single-node schema with rows is converted: every
// job stays, under its key; its lineage and unique-key rows take the key of their job
// (so they sit beside it); the coordinator keeps no copy; the triggers work again on
// the shards. A schema with an unfinished flow is refused, unchanged.
func TestCitusLayoutOfAnExistingSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.CitusPool(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`) })
	if _, err := migrate.Up(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	q := `"` + schema + `".`
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO ` + q + `jobs (kind, payload, concurrency_key) SELECT 'k', '{}', 'tenant-' || (i % 5) FROM generate_series(1, 100) i`)
	exec(`INSERT INTO ` + q + `jobs (kind, payload, concurrency_key, unique_key, unique_states) VALUES ('u', '{}', 'tenant-1', 'once', '{pending}')`)
	exec(`INSERT INTO ` + q + `jobs (kind, payload, concurrency_key, status, parent_id) VALUES ('child', '{}', 'tenant-2', 'succeeded', gen_random_uuid())`)
	exec(`INSERT INTO ` + q + `outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'placed', '{}')`)
	// A job of a plain queue, out of jobs_fair_idx on one node (migration 0024).
	exec(`INSERT INTO ` + q + `jobs (kind, payload, concurrency_key, fair_indexed) VALUES ('plain', '{}', 'tenant-3', false)`)

	if did, err := migrate.Citus(ctx, pool, schema); !did || err != nil {
		t.Fatalf("Citus on a schema with rows: %v, %v", did, err)
	}
	scalar := func(sql string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	if n := scalar(`SELECT count(*) FROM ` + q + `jobs WHERE concurrency_key LIKE 'tenant-%'`); n != 103 {
		t.Errorf("%d jobs after the conversion, want 103", n)
	}
	if n := scalar(`SELECT count(*) FROM ` + q + `tx_lineage l WHERE l.job_id IS NOT NULL AND l.concurrency_key LIKE 'tenant-%'`); n != 103 {
		t.Errorf("%d lineage rows under their job's key, want 103", n)
	}
	if n := scalar(`SELECT count(*) FROM ` + q + `jobs WHERE NOT fair_indexed`); n != 0 {
		t.Errorf("%d jobs left unmarked fair_indexed by the conversion, want none", n)
	}
	if n := scalar(`SELECT count(*) FROM ` + q + `job_unique WHERE concurrency_key = 'tenant-1' AND unique_key = 'once'`); n != 1 {
		t.Errorf("the unique key's row under its job's key: %d", n)
	}
	if n := scalar(`SELECT count(*) FROM ` + q + `outbox`); n != 1 {
		t.Errorf("%d outbox events, want 1", n)
	}
	for _, table := range []string{"jobs", "outbox", "tx_lineage", "job_unique", "citus_keys"} {
		if n := scalar(`SELECT pg_relation_size('` + q + table + `')::int`); n != 0 {
			t.Errorf("the coordinator keeps %d bytes of %s", n, table)
		}
	}
	exec(`INSERT INTO ` + q + `jobs (kind, payload, concurrency_key) VALUES ('after', '{}', 'tenant-9')`)
	if n := scalar(`SELECT count(*) FROM ` + q + `tx_lineage WHERE concurrency_key = 'tenant-9'`); n != 1 {
		t.Errorf("a job inserted after the conversion has %d lineage rows, want 1", n)
	}

	// An unfinished flow: refused, nothing changed.
	flows := pgtest.SchemaName(t)
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+flows+`" CASCADE`) })
	if _, err := migrate.Up(ctx, pool, flows); err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO "` + flows + `".jobs (kind, payload, parent_id) VALUES ('child', '{}', gen_random_uuid())`)
	did, err := migrate.Citus(ctx, pool, flows)
	var ce *migrate.CitusError
	if did || !errors.As(err, &ce) || !strings.Contains(ce.Reason, "unfinished flows or batches") {
		t.Errorf("Citus with an unfinished flow: %v, %v; want a CitusError naming it", did, err)
	}
	if dist, err := migrate.Distributed(ctx, pool, flows); err != nil || dist {
		t.Errorf("the refused schema is distributed: %v, %v", dist, err)
	}
}
