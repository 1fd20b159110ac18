package skiplock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/migrate"
)

// Migrate applies skiplock's missing schema migrations to schema ("" means
// DefaultSchema). Concurrent callers serialise on an advisory lock; each migration
// runs in its own transaction. It returns the versions it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error) {
	return MigrateWith(ctx, pool, schema, MigrateOpts{})
}

// MigrateOpts configure MigrateWith.
type MigrateOpts struct {
	// Citus lays the schema out for a Citus cluster once the migrations are applied
	// (docs/citus.md): jobs, the outbox and their side tables distributed by
	// concurrency_key, co-located, and the small tables as reference tables. pool must
	// reach the coordinator, with the citus extension installed. A schema that has
	// the layout already is left as it is; the single-node layout never changes
	// without this option.
	Citus bool
}

// ErrCitusLayout is returned (wrapped, with the reason) by MigrateWith with
// MigrateOpts.Citus when the database cannot take the Citus layout: no citus
// extension, or the partitioned jobs layout.
var ErrCitusLayout = errors.New("skiplock: the Citus layout cannot be applied")

// ErrNotOnCitus is returned (wrapped, naming the feature) for what cannot keep its
// guarantee on the Citus layout: Client.Start with limits, fair weights or bypass
// priorities, Client.LimitSet, and a manual claim under them (docs/citus.md lists
// what works).
var ErrNotOnCitus = errors.New("skiplock: not supported on the Citus layout yet")

// MigrateWith is Migrate with options. It returns the versions it applied; the Citus
// layout is not a version (Distributed reports it).
func MigrateWith(ctx context.Context, pool *pgxpool.Pool, schema string, opts MigrateOpts) ([]int, error) {
	if ctx == nil || pool == nil {
		return nil, invalid("pool", "ctx and pool must not be nil")
	}
	if schema == "" {
		schema = DefaultSchema
	}
	done, err := migrate.Up(ctx, pool, schema)
	if err != nil || !opts.Citus {
		return done, schemaError(err)
	}
	if _, err := migrate.Citus(ctx, pool, schema); err != nil {
		var ce *migrate.CitusError
		if errors.As(err, &ce) {
			return done, fmt.Errorf("%w: %s", ErrCitusLayout, ce.Reason)
		}
		return done, err
	}
	return done, nil
}

// Distributed reports whether schema ("" means DefaultSchema) has the Citus layout of
// MigrateOpts.Citus.
func Distributed(ctx context.Context, pool *pgxpool.Pool, schema string) (bool, error) {
	if ctx == nil || pool == nil {
		return false, invalid("pool", "ctx and pool must not be nil")
	}
	if schema == "" {
		schema = DefaultSchema
	}
	dist, err := migrate.Distributed(ctx, pool, schema)
	return dist, schemaError(err)
}

// MigrationSQL returns the whole DDL for schema, for teams that apply schema changes
// with their own migration tool.
func MigrationSQL(schema string) (string, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	sql, err := migrate.SQL(schema)
	return sql, schemaError(err)
}

// CitusLayoutSQL returns the DDL of MigrateOpts.Citus for schema, for teams that apply
// schema changes with their own tool: run it in one transaction on the coordinator,
// after MigrationSQL's. It does not check what MigrateWith checks first (the citus
// extension, a plain jobs table, no layout yet).
func CitusLayoutSQL(schema string) (string, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	sql, err := migrate.CitusSQL(schema)
	return sql, schemaError(err)
}

// schemaError turns an invalid schema name reported by the migrator into a
// *ValidationError; other errors pass through.
func schemaError(err error) error {
	var idErr *ident.Error
	if errors.As(err, &idErr) {
		return invalid("schema", "%v", err)
	}
	return err
}
