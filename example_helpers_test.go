package skiplock_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

var exampleSeq atomic.Int64

// exampleDB returns a pool on the test cluster and a fresh, migrated schema for one
// example. In an application this is pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
// and skiplock.Migrate(ctx, pool, "").
func exampleDB() (*pgxpool.Pool, string) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL(nil))
	if err != nil {
		panic(err)
	}
	schema := fmt.Sprintf("example_%d", exampleSeq.Add(1))
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
		panic(err)
	}
	if _, err := skiplock.Migrate(ctx, pool, schema); err != nil {
		panic(err)
	}
	return pool, schema
}
