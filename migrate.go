package skiplock

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/migrate"
)

// Migrate applies skiplock's missing schema migrations to schema ("" means
// DefaultSchema). Concurrent callers serialise on an advisory lock; each migration
// runs in its own transaction. It returns the versions it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	return migrate.Up(ctx, pool, schema)
}

// MigrationSQL returns the whole DDL for schema, for teams that apply schema changes
// with their own migration tool.
func MigrationSQL(schema string) (string, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	return migrate.SQL(schema)
}
