package skiplock_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/skiplocktest"
	goruntime "runtime"
)

func TestMain(m *testing.M) {
	if os.Getenv(childWorkerEnv) != "" {
		os.Exit(childWorker())
	}
	pgtest.Main(m)
}

// t0 is the fake clock's start in tests.
var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

type env struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	clock  *skiplocktest.FakeClock
	client *skiplock.Client
}

// newEnv gives a test its own migrated schema, a fake clock and a client.
func newEnv(t *testing.T, cfg skiplock.Config) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), pool: pgtest.Pool(t), schema: pgtest.Schema(t), clock: skiplocktest.NewFakeClock(t0)}
	cfg.Schema = e.schema
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	e.client = e.newClient(cfg)
	return e
}

func (e *env) newClient(cfg skiplock.Config) *skiplock.Client {
	e.t.Helper()
	cfg.Schema = e.schema
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	c, err := skiplock.NewClient(e.pool, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// scalar runs a query returning one value in the test's schema.
func scalar[T any](e *env, sql string, args ...any) T {
	e.t.Helper()
	var v T
	if err := e.pool.QueryRow(e.ctx, sql, args...).Scan(&v); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// q prefixes a table name with the test's schema.
func (e *env) q(table string) string { return `"` + e.schema + `".` + table }

type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "email" }

type otherArgs struct {
	N int `json:"n"`
}

func (otherArgs) Kind() string { return "other" }

func runtimeGosched() { goruntime.Gosched() }

func pgxNewPool(cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	return pgxpool.NewWithConfig(context.Background(), cfg)
}
