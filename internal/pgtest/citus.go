package pgtest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/migrate"
)

// EnvCitusURL names the variable that points the Citus tests at the coordinator of a
// Citus cluster (scripts/citus.sh start prints one; scripts/test.sh exports it).
const EnvCitusURL = "SKIPLOCK_TEST_CITUS_URL"

// EnvRequireCitus, set to 1, turns the Citus tests' skip into a failure when
// EnvCitusURL is unset (CI sets it: the Citus suite must run there).
const EnvRequireCitus = "SKIPLOCK_REQUIRE_CITUS"

var (
	citusOnce sync.Once
	citusPool *pgxpool.Pool
	citusErr  error
)

// CitusURL returns the Citus coordinator's connection string, or skips the test
// when there is none (fails it when EnvRequireCitus is 1).
func CitusURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(EnvCitusURL)
	if url == "" {
		if os.Getenv(EnvRequireCitus) == "1" {
			t.Fatalf("pgtest: %s is not set and %s=1: the Citus suite must run (scripts/citus.sh start; scripts/test.sh does it)", EnvCitusURL, EnvRequireCitus)
		}
		t.Skipf("pgtest: no Citus cluster (%s unset; scripts/citus.sh start prints a URL)", EnvCitusURL)
	}
	return url
}

// CitusPool returns a pool on the Citus coordinator shared by the package's tests
// (skipping the test as CitusURL does). It is closed when the test binary exits.
func CitusPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := CitusURL(t)
	citusOnce.Do(func() { citusPool, citusErr = openPool(url, 20) })
	if citusErr != nil {
		t.Fatalf("pgtest: Citus pool: %v", citusErr)
	}
	return citusPool
}

// CitusSchema migrates a fresh schema on the Citus coordinator, lays it out for
// Citus (migrate.Citus) and drops it at cleanup. It returns the shared pool and the
// schema's name.
func CitusSchema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	pool := CitusPool(t)
	name := SchemaName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS "`+name+`" CASCADE`); err != nil {
			t.Logf("pgtest: dropping schema %s: %v", name, err)
		}
	})
	if _, err := migrate.Up(ctx, pool, name); err != nil {
		t.Fatalf("pgtest: migrating %s on Citus: %v", name, err)
	}
	if _, err := migrate.Citus(ctx, pool, name); err != nil {
		t.Fatalf("pgtest: the Citus layout of %s: %v", name, err)
	}
	return pool, name
}
