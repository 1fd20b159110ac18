package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/spf13/cobra"
)

func TestPoolConfigApplicationName(t *testing.T) {
	t.Parallel()
	root := newRootCmd()
	list, _, err := root.Find([]string{"jobs", "list"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ conn, want string }{
		{"postgres://u@h/db", "skiplock jobs list"},
		{"postgres://u@h/db?application_name=billing", "billing"},
		{"host=h user=u application_name=ops", "ops"},
	} {
		cfg, err := poolConfig(list, tc.conn, 3)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.ConnConfig.RuntimeParams["application_name"]; got != tc.want || cfg.MaxConns != 3 {
			t.Errorf("%s: application_name %q, max conns %d; want %q, 3", tc.conn, got, cfg.MaxConns, tc.want)
		}
	}
	if _, err := poolConfig(&cobra.Command{Use: "x"}, "host=h password='hunter2", 0); err == nil {
		t.Fatal("a broken connection string parsed")
	} else if bytes.Contains([]byte(err.Error()), []byte("hunter2")) {
		t.Fatalf("the password is in the error: %v", err)
	}
}

// With no --database-url and no DATABASE_URL, the libpq variables name the server
// (not parallel: it sets the process's environment).
func TestPGEnvironment(t *testing.T) {
	schema := pgtest.Schema(t)
	cfg, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", "")
	t.Setenv("PGHOST", cfg.Host)
	t.Setenv("PGPORT", strconv.Itoa(int(cfg.Port)))
	t.Setenv("PGUSER", cfg.User)
	t.Setenv("PGDATABASE", cfg.Database)
	t.Setenv("PGPASSWORD", cfg.Password)
	t.Setenv("PGSSLMODE", "disable")
	t.Setenv("SKIPLOCK_SCHEMA", schema)
	var out, errb bytes.Buffer
	if code := execute(context.Background(), &out, &errb, "stats", "-o", "json"); code != 0 {
		t.Fatalf("stats with PG* variables: exit %d\n%s", code, errb.String())
	}
	var st statsJSON
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
}
