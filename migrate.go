package skiplock

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/migrate"
)

// Migrate applies skiplock's missing schema migrations to schema ("" means
// DefaultSchema). Concurrent callers serialise on an advisory lock; each migration
// runs in its own transaction. It returns the versions it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error) {
	if ctx == nil || pool == nil {
		return nil, invalid("pool", "ctx and pool must not be nil")
	}
	if schema == "" {
		schema = DefaultSchema
	}
	done, err := migrate.Up(ctx, pool, schema)
	return done, schemaError(err)
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

// schemaError turns an invalid schema name reported by the migrator into a
// *ValidationError; other errors pass through.
func schemaError(err error) error {
	var idErr *ident.Error
	if errors.As(err, &idErr) {
		return invalid("schema", "%v", err)
	}
	return err
}
