package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
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
	// Broken strings: the password must not reach the message, in whole or in part
	// (pgx's own masking left "hunter2" of `password=x\ hunter2`), and the reason
	// must still be there.
	for _, tc := range []struct{ conn, reason string }{
		{"host=h password='hunter2", "unterminated quoted string"},
		{`host=h password=x\ hunter2 port=abc`, "port"},
		{"postgres://u:hun?ter2@h:notaport/db", "port"},
	} {
		_, err := poolConfig(&cobra.Command{Use: "x"}, tc.conn, 0)
		switch {
		case err == nil:
			t.Fatalf("%s parsed", tc.conn)
		case bytes.Contains([]byte(err.Error()), []byte("hunter2")) || bytes.Contains([]byte(err.Error()), []byte("ter2")):
			t.Fatalf("the password is in the error: %v", err)
		case !strings.Contains(err.Error(), tc.reason):
			t.Fatalf("the error lost its reason (%q): %v", tc.reason, err)
		}
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
