package skiplocktest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// EnvURL names the environment variable that points the tests at an existing
// PostgreSQL server instead of a throwaway one. Each test still gets a schema of its
// own there, dropped at its end.
const EnvURL = "SKIPLOCK_TEST_DATABASE_URL"

// Main runs a test binary's tests against one PostgreSQL server and exits with their
// status; call it from TestMain:
//
//	func TestMain(m *testing.M) { skiplocktest.Main(m) }
//
// Unless $SKIPLOCK_TEST_DATABASE_URL names a server, Main starts a throwaway one from
// the PostgreSQL binaries installed on the machine (initdb and postgres in a temporary
// directory, on a free loopback port; $SKIPLOCK_PG_BIN picks the binaries) and removes
// it when the tests end, also when they fail or the run is interrupted. The server
// runs without fsync: tests check behaviour, not durability.
func Main(m *testing.M) { pgtest.Main(m) }

// URL returns the connection string of the server Main set up.
func URL(t testing.TB) string {
	t.Helper()
	return pgtest.URL(t)
}

// Pool returns a pool on the server Main set up, shared by the binary's tests (do
// not close it).
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.Pool(t)
}

// Schema creates a fresh schema, named after the test, applies skiplock's migrations
// to it and drops it when the test ends. Tests that each use their own schema see
// none of each other's jobs and can run in parallel.
func Schema(t testing.TB) string {
	t.Helper()
	return pgtest.Schema(t)
}

// NewClient returns a client on Pool(t) with cfg, in a fresh Schema(t) unless
// cfg.Schema names one. When the test ends the client is stopped (running jobs
// cancelled) and closed.
func NewClient(t testing.TB, cfg skiplock.Config) *skiplock.Client {
	t.Helper()
	if cfg.Schema == "" {
		cfg.Schema = Schema(t)
	}
	c, err := skiplock.NewClient(Pool(t), cfg)
	if err != nil {
		t.Fatalf("skiplocktest: NewClient: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.StopAndCancel(ctx); err != nil {
			t.Errorf("skiplocktest: stopping the client: %v", err)
		}
		c.Close()
	})
	return c
}
