package skiplocktest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/skiplocktest"
)

func schemaExists(t *testing.T, name string) bool {
	t.Helper()
	var ok bool
	if err := skiplocktest.Pool(t).QueryRow(context.Background(), `SELECT to_regnamespace($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestURLAndPool(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig(skiplocktest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host == "" {
		t.Errorf("URL %q names no host", skiplocktest.URL(t))
	}
	if skiplocktest.EnvURL != pgtest.EnvURL {
		t.Errorf("EnvURL %q, but the implementation reads %q", skiplocktest.EnvURL, pgtest.EnvURL)
	}
	if p1, p2 := skiplocktest.Pool(t), skiplocktest.Pool(t); p1 != p2 {
		t.Error("Pool is not shared by the binary's tests")
	}
	if err := skiplocktest.Pool(t).Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSchemaIsFreshMigratedAndDropped(t *testing.T) {
	t.Parallel()
	var a, b string
	t.Run("inner", func(t *testing.T) {
		a, b = skiplocktest.Schema(t), skiplocktest.Schema(t)
		if a == b {
			t.Fatalf("two schemas named %s", a)
		}
		for _, s := range []string{a, b} {
			var n int
			if err := skiplocktest.Pool(t).QueryRow(context.Background(), `SELECT count(*) FROM "`+s+`".jobs`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("jobs of %s: %d, %v", s, n, err)
			}
		}
	})
	if schemaExists(t, a) || schemaExists(t, b) {
		t.Errorf("schemas %s and %s survived their test", a, b)
	}
}

func TestNewClient(t *testing.T) {
	t.Parallel()
	var client *skiplock.Client
	t.Run("inner", func(t *testing.T) {
		workers := skiplock.NewWorkers()
		if err := skiplock.AddWorker(workers, skiplock.WorkFunc[SMS](func(context.Context, *skiplock.Job, SMS) error { return nil }), nil); err != nil {
			t.Fatal(err)
		}
		client = skiplocktest.NewClient(t, skiplock.Config{Workers: workers,
			Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}})
		if !schemaExists(t, client.Schema()) {
			t.Fatalf("schema %s does not exist", client.Schema())
		}
		if err := client.Start(context.Background()); err != nil { // left running: cleanup stops it
			t.Fatal(err)
		}
		own := skiplocktest.Schema(t)
		if c := skiplocktest.NewClient(t, skiplock.Config{Schema: own}); c.Schema() != own {
			t.Errorf("Schema %q, want the configured %q", c.Schema(), own)
		}
	})
	if schemaExists(t, client.Schema()) {
		t.Errorf("schema %s survived its test", client.Schema())
	}
	if err := client.Stop(context.Background()); err != nil { // stopped already: nothing to do
		t.Error(err)
	}

	f := capture(t, func(tb testing.TB) { skiplocktest.NewClient(tb, skiplock.Config{Schema: "bad-name"}) })
	f.wantFatal(t, "skiplocktest: NewClient: skiplock: invalid")
}
