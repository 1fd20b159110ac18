// Package migrate applies skiplock's embedded, versioned schema migrations.
//
// Each migration runs in its own transaction together with the row that records it.
// All migrators of one schema serialise on a session-level advisory lock, so any
// number of processes may call Up at once: the first applies what is missing, the
// others find it applied. The DDL is a template whose {{schema}} placeholder is
// replaced by the quoted schema name.
package migrate

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/ident"
)

//go:embed sql/*.sql
var files embed.FS

// Migration is one versioned step.
type Migration struct {
	Version int
	Name    string
	SQL     string // the template, with {{schema}} placeholders
}

// All returns the embedded migrations in version order.
func All() []Migration {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		panic(err) // embedded at build time; cannot fail
	}
	var out []Migration
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		num, rest, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic("migrate: bad migration file name " + e.Name())
		}
		body, _ := files.ReadFile("sql/" + e.Name())
		out = append(out, Migration{Version: v, Name: rest, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// Render returns m's DDL for the given (already validated) schema.
func (m Migration) Render(schema string) string {
	return strings.ReplaceAll(m.SQL, "{{schema}}", ident.Quote(schema))
}

// SQL returns the complete DDL of every migration for schema, for teams that apply
// schema changes with their own tool. It includes the bookkeeping table, so a later
// Up sees the versions as applied.
func SQL(schema string) (string, error) {
	if err := ident.Validate("schema", schema); err != nil {
		return "", err
	}
	var b strings.Builder
	q := ident.Quote(schema)
	fmt.Fprintf(&b, "-- skiplock schema %s\nBEGIN;\nCREATE SCHEMA IF NOT EXISTS %s;\n%s;\n", q, q, bookkeeping(q))
	for _, m := range All() {
		fmt.Fprintf(&b, "\n-- migration %04d_%s\n%s\nINSERT INTO %s.schema_migrations (version, name) VALUES (%d, '%s');\n",
			m.Version, m.Name, m.Render(schema), q, m.Version, m.Name)
	}
	b.WriteString("COMMIT;\n")
	return b.String(), nil
}

func bookkeeping(q string) string {
	return "CREATE TABLE IF NOT EXISTS " + q + ".schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
}

// Status describes one migration's state in a database.
type Status struct {
	Migration
	Applied bool
}

// lockKey is the advisory lock all migrators of a schema take.
const lockSQL = `SELECT pg_advisory_lock(hashtextextended('skiplock.migrate.' || $1, 0))`
const unlockSQL = `SELECT pg_advisory_unlock(hashtextextended('skiplock.migrate.' || $1, 0))`

// Up applies every missing migration to schema and returns the versions it applied.
func Up(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error) {
	if err := ident.Validate("schema", schema); err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquiring connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, lockSQL, schema); err != nil {
		return nil, fmt.Errorf("migrate: taking advisory lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must be released even when ctx has ended.
		if _, err := conn.Exec(context.Background(), unlockSQL, schema); err != nil {
			conn.Conn().Close(context.Background()) // closing the session releases it
		}
	}()
	q := ident.Quote(schema)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q); err != nil {
		return nil, fmt.Errorf("migrate: creating schema %s: %w", q, err)
	}
	if _, err := conn.Exec(ctx, bookkeeping(q)); err != nil {
		return nil, fmt.Errorf("migrate: creating %s.schema_migrations: %w", q, err)
	}
	applied, err := appliedVersions(ctx, conn.Conn(), q)
	if err != nil {
		return nil, err
	}
	var done []int
	for _, m := range All() {
		if applied[m.Version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.Render(schema)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+q+".schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("migrate: applying %04d_%s to %s: %w", m.Version, m.Name, q, err)
		}
		done = append(done, m.Version)
	}
	return done, nil
}

func appliedVersions(ctx context.Context, conn *pgx.Conn, q string) (map[int]bool, error) {
	rows, err := conn.Query(ctx, "SELECT version FROM "+q+".schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrate: reading applied versions: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("migrate: reading applied versions: %w", err)
	}
	m := make(map[int]bool, len(versions))
	for _, v := range versions {
		m[v] = true
	}
	return m, nil
}

// Applied returns the migration versions schema records as applied, and whether
// schema has skiplock's bookkeeping table at all.
func Applied(ctx context.Context, pool *pgxpool.Pool, schema string) (map[int]bool, bool, error) {
	if err := ident.Validate("schema", schema); err != nil {
		return nil, false, err
	}
	q := ident.Quote(schema)
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q+".schema_migrations").Scan(&exists); err != nil {
		return nil, false, fmt.Errorf("migrate: checking %s: %w", q, err)
	}
	if !exists {
		return map[int]bool{}, false, nil
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("migrate: acquiring connection: %w", err)
	}
	defer conn.Release()
	applied, err := appliedVersions(ctx, conn.Conn(), q)
	return applied, true, err
}

// Drift compares what schema has applied with what this build embeds: Missing are
// known migrations not applied yet, Unknown are applied versions this build does not
// know (the schema was migrated by a newer skiplock).
func Drift(applied map[int]bool) (missing, unknown []int) {
	known := map[int]bool{}
	for _, m := range All() {
		known[m.Version] = true
		if !applied[m.Version] {
			missing = append(missing, m.Version)
		}
	}
	for v := range applied {
		if !known[v] {
			unknown = append(unknown, v)
		}
	}
	sort.Ints(unknown)
	return missing, unknown
}

// List reports every embedded migration and whether schema has it.
func List(ctx context.Context, pool *pgxpool.Pool, schema string) ([]Status, error) {
	applied, _, err := Applied(ctx, pool, schema)
	if err != nil {
		return nil, err
	}
	var out []Status
	for _, m := range All() {
		out = append(out, Status{Migration: m, Applied: applied[m.Version]})
	}
	return out, nil
}

//go:embed citus.sql
var citusSQL string

// CitusSQL returns the DDL of the Citus layout (citus.sql) for schema: run it in one
// transaction on the coordinator, after every numbered migration.
func CitusSQL(schema string) (string, error) {
	if err := ident.Validate("schema", schema); err != nil {
		return "", err
	}
	return strings.ReplaceAll(citusSQL, "{{schema}}", ident.Quote(schema)), nil
}

// citusRefusal begins the message of citus.sql's own refusals (SQLSTATE 0A000).
const citusRefusal = "skiplock: the Citus layout: "

// CitusError is returned by Citus when the database cannot take the Citus layout.
type CitusError struct{ Reason string }

func (e *CitusError) Error() string { return "migrate: the Citus layout: " + e.Reason }

// Distributed reports whether schema's jobs table is distributed by Citus (false on
// a database without the citus extension).
func Distributed(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) (bool, error) {
	if err := ident.Validate("schema", schema); err != nil {
		return false, err
	}
	var citus bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL`).Scan(&citus); err != nil {
		return false, fmt.Errorf("migrate: looking for Citus: %w", err)
	}
	if !citus {
		return false, nil // the catalog is named below only where it exists
	}
	var dist bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = to_regclass($1))`,
		ident.Quote(schema)+".jobs").Scan(&dist)
	if err != nil {
		return false, fmt.Errorf("migrate: checking whether %s is distributed: %w", ident.Quote(schema), err)
	}
	return dist, nil
}

// Citus lays schema out for a Citus cluster (citus.sql) and reports whether it did:
// false when the schema already has the layout. It must run on the coordinator, after
// Up: it refuses, with a *CitusError, a database without the citus extension, a
// schema with migrations missing, and the partitioned jobs layout. It takes the
// migrators' advisory lock, so it may race Up and other Citus calls.
func Citus(ctx context.Context, pool *pgxpool.Pool, schema string) (bool, error) {
	ddl, err := CitusSQL(schema)
	if err != nil {
		return false, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("migrate: acquiring connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, lockSQL, schema); err != nil {
		return false, fmt.Errorf("migrate: taking advisory lock: %w", err)
	}
	defer func() {
		if _, err := conn.Exec(context.Background(), unlockSQL, schema); err != nil {
			conn.Conn().Close(context.Background())
		}
	}()
	q := ident.Quote(schema)
	var citus bool
	var relkind string
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus'),
  coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)), '')`, q+".jobs").Scan(&citus, &relkind)
	if err != nil {
		return false, fmt.Errorf("migrate: inspecting %s: %w", q, err)
	}
	if !citus {
		return false, &CitusError{Reason: "the citus extension is not installed in this database (CREATE EXTENSION citus on the coordinator of a Citus cluster; docs/citus.md)"}
	}
	applied, err := appliedVersions(ctx, conn.Conn(), q)
	if err != nil {
		return false, err
	}
	if missing, _ := Drift(applied); len(missing) > 0 {
		return false, &CitusError{Reason: fmt.Sprintf("schema %s lacks migrations %v: apply them first (Up)", q, missing)}
	}
	switch relkind {
	case "p":
		return false, &CitusError{Reason: "the partitioned jobs layout (skiplock partitions) cannot be distributed; distribute a plain schema"}
	case "r":
	default:
		return false, &CitusError{Reason: fmt.Sprintf("%s.jobs is not a table (relkind %q)", q, relkind)}
	}
	if dist, err := Distributed(ctx, conn, schema); err != nil || dist {
		return false, err
	}
	// One statement at a time: Citus propagates some DDL to the worker nodes by its
	// text, and a multi-statement string then fails there ("cannot insert multiple
	// commands into a prepared statement").
	//
	// The layout is one transaction, tried again when Citus cancels it to break a
	// distributed deadlock (40P01): distributing two schemas at once (tests, or an
	// application's schemas migrated side by side) takes locks on the cluster's
	// metadata on every node, in an order neither transaction chose. The rollback
	// leaves nothing behind, so the next try starts clean.
	for try := 1; ; try++ {
		err = pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			for _, st := range Statements(ddl) {
				if _, err := tx.Exec(ctx, st, pgx.QueryExecModeSimpleProtocol); err != nil {
					return fmt.Errorf("%w\n%s", err, st)
				}
			}
			return nil
		})
		var dl *pgconn.PgError
		if try == layoutTries || !errors.As(err, &dl) || dl.Code != "40P01" {
			break
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("migrate: applying the Citus layout to %s: %w (after a distributed deadlock: %v)", q, ctx.Err(), err)
		case <-time.After(time.Duration(try) * 100 * time.Millisecond):
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "0A000" && strings.HasPrefix(pgErr.Message, citusRefusal) {
		return false, &CitusError{Reason: strings.TrimPrefix(pgErr.Message, citusRefusal)}
	}
	if err != nil {
		return false, fmt.Errorf("migrate: applying the Citus layout to %s: %w", q, err)
	}
	return true, nil
}

// layoutTries bounds the tries of the Citus layout's transaction when Citus cancels
// it to break a distributed deadlock.
const layoutTries = 5

// Statements splits DDL into its statements: a statement ends with a line ending in
// ";" outside a dollar-quoted body ($$ … $$). Lines of comments alone are dropped.
// It is made for skiplock's own DDL files, which keep to that shape.
func Statements(ddl string) []string {
	var out []string
	var cur strings.Builder
	inBody := false
	for _, line := range strings.Split(ddl, "\n") {
		trimmed := strings.TrimSpace(line)
		if !inBody && cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.Count(line, "$$")%2 == 1 {
			inBody = !inBody
		}
		if !inBody && strings.HasSuffix(trimmed, ";") {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, cur.String())
	}
	return out
}
