// Package pgtest gives tests a real PostgreSQL: one throwaway cluster per test binary
// (or the server named by SKIPLOCK_TEST_DATABASE_URL), and a freshly migrated schema
// per test so tests run in parallel without seeing each other's rows.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/migrate"
	"github.com/skiplock/skiplock/internal/pgcluster"
)

// EnvURL names the variable that points tests at an existing server.
const EnvURL = "SKIPLOCK_TEST_DATABASE_URL"

var (
	baseURL string
	cluster *pgcluster.Cluster

	poolOnce   sync.Once
	sharedPool *pgxpool.Pool
	poolErr    error

	seq atomic.Int64
)

// Main starts the cluster, runs the tests and removes the cluster, also when the
// tests fail or the run is interrupted (SIGINT/SIGTERM).
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	baseURL = os.Getenv(EnvURL)
	if baseURL == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		// Prepared transactions are off by default; the horizon watch's tests hold
		// the horizon with one.
		c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"max_prepared_transactions": "8"}})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: starting PostgreSQL:", err)
			return 1
		}
		cluster, baseURL = c, c.URL
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			<-sigs
			c.Stop()
			os.Exit(1)
		}()
		defer c.Stop()
	}
	code := m.Run()
	if sharedPool != nil {
		sharedPool.Close()
	}
	if citusPool != nil {
		citusPool.Close()
	}
	return code
}

// URL returns the server's connection string.
func URL(t testing.TB) string {
	if baseURL == "" {
		t.Fatal("pgtest: no database; call pgtest.Main from TestMain")
	}
	return baseURL
}

// Cluster returns the throwaway cluster, or skips the test when the suite runs
// against an external server (tests that restart the server need their own).
func Cluster(t testing.TB) *pgcluster.Cluster {
	if cluster == nil {
		t.Skip("pgtest: this test restarts PostgreSQL; it runs only on the throwaway cluster")
	}
	return cluster
}

// Pool returns a pool shared by the package's tests.
func Pool(t testing.TB) *pgxpool.Pool {
	poolOnce.Do(func() { sharedPool, poolErr = openPool(URL(t), 40) })
	if poolErr != nil {
		t.Fatalf("pgtest: pool: %v", poolErr)
	}
	return sharedPool
}

// openPool opens a pool of at most maxConns connections on url.
func openPool(url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// NewPool returns a pool of its own (closed at cleanup), for tests that count or
// kill connections.
func NewPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

var unsafe = regexp.MustCompile(`[^a-z0-9_]+`)

// SchemaName returns a fresh, unused schema name derived from the test's name.
func SchemaName(t testing.TB) string {
	base := unsafe.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	return fmt.Sprintf("t%d_%d_%s", os.Getpid()%100000, seq.Add(1), strings.Trim(base, "_"))
}

// Schema creates and migrates a fresh schema for the test and drops it at cleanup.
func Schema(t testing.TB) string {
	t.Helper()
	name := SchemaName(t)
	pool := Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := migrate.Up(ctx, pool, name); err != nil {
		t.Fatalf("pgtest: migrating %s: %v", name, err)
	}
	t.Cleanup(func() { DropSchema(t, name) })
	return name
}

// DropSchema removes a schema and everything in it.
func DropSchema(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Pool(t).Exec(ctx, `DROP SCHEMA IF EXISTS "`+name+`" CASCADE`); err != nil {
		t.Logf("pgtest: dropping schema %s: %v", name, err)
	}
}

// Database creates a database of the test's own (dropped at cleanup) and returns its
// connection string, for tests of what PostgreSQL scopes to a database rather than
// a schema — its vacuum horizon, for one — which the other tests running in
// parallel would disturb.
func Database(t testing.TB) string {
	t.Helper()
	name := SchemaName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Pool(t).Exec(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := Pool(t).Exec(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`); err != nil {
			t.Logf("pgtest: dropping database %s: %v", name, err)
		}
	})
	base := URL(t)
	if u, err := url.Parse(base); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	return base + " dbname=" + name // keyword/value form: the last setting wins
}

// MigratedDatabase is Database with schema migrated in it, and a pool on it (closed at
// cleanup).
func MigratedDatabase(t testing.TB, schema string) (string, *pgxpool.Pool) {
	t.Helper()
	url := Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrate.Up(ctx, pool, schema); err != nil {
		t.Fatalf("pgtest: migrating %s: %v", schema, err)
	}
	return url, pool
}

// HoldHorizon opens a session on url that holds the database's vacuum horizon as a
// forgotten transaction does — a REPEATABLE READ snapshot and an xid, then idle — and
// returns its pid and a function that ends the transaction. The session closes at
// cleanup.
func HoldHorizon(t testing.TB, url string) (pid int, release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT txid_current()) x").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid, func() {
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
	}
}
