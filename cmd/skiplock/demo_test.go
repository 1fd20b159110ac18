package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/cmd/skiplock/internal/bench"
	"github.com/skiplock/skiplock/internal/clienttest"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// demoCLI is a CLI on a schema of its own named prefix plus the test's schema, which
// the demo creates; the schema is dropped when the test ends.
func demoCLI(t *testing.T, prefix string) (*cli, *pgxpool.Pool) {
	t.Helper()
	c := newCLI(t)
	c.schema = prefix + c.schema
	pool := pgtest.Pool(t)
	t.Cleanup(func() {
		pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+c.schema+`" CASCADE`)
	})
	return c, pool
}

// The demo on a named database runs in a schema of its own, with a mixed-case name
// quoted, and shows orders, jobs and events flowing.
func TestDemoOnANamedDatabase(t *testing.T) {
	t.Parallel()
	c, pool := demoCLI(t, "Demo_") // a mixed-case name must be quoted in every statement
	out := c.must("demo", "--duration", "2s")
	for _, want := range []string{"demo: a shop writes orders", "demo: stopping", "emails sent", "outbox"} {
		if !strings.Contains(out, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
	var orders, jobs int64
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM "`+c.schema+`".demo_orders), (SELECT count(*) FROM "`+c.schema+`".jobs WHERE kind = 'send_order_email')`).Scan(&orders, &jobs); err != nil {
		t.Fatal(err)
	}
	if orders == 0 || jobs != orders {
		t.Fatalf("%d orders and %d jobs in the demo's schema", orders, jobs)
	}
	// A second run in the same schema finds only its own rows and runs again.
	c.must("demo", "--duration", "1s")
}

// The demo's duration counts from the end of its setup: a run shorter than the
// migrations of a fresh schema (1 ns here) migrates, stops at once and exits 0. When
// the duration covered the setup, a loaded machine failed `--duration 2s` in the
// migrations ("context deadline exceeded").
func TestDemoDurationExcludesSetup(t *testing.T) {
	t.Parallel()
	c, pool := demoCLI(t, "demo_")
	out := c.must("demo", "--duration", "1ns")
	if !strings.Contains(out, "demo: stopping") || !strings.Contains(out, " orders; ") {
		t.Fatalf("demo output:\n%s", out)
	}
	var tables int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename IN ('jobs', 'demo_orders')`, c.schema).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 2 {
		t.Fatalf("%d of the demo's 2 tables in its schema after the run", tables)
	}
}

// The demo refuses a schema holding an application's jobs or events, and leaves them
// alone: before, its workers failed them ("no worker registered") and its relay
// published the events to the demo's receiver.
func TestDemoRefusesASchemaItDidNotWrite(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.must("migrate", "up")
	cl := c.client()
	ctx := context.Background()
	res, err := cl.EnqueueRaw(ctx, "resize", []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code := c.run(ctx, "demo", "--duration", "1s")
	if code != 1 || !strings.Contains(errOut, `schema "`+c.schema+`" holds jobs of kind resize that the demo did not write`) {
		t.Fatalf("demo on an application's schema: exit %d\n%s", code, errOut)
	}
	if j, err := cl.JobGet(ctx, res.ID); err != nil || j.State != skiplock.StatePending {
		t.Fatalf("the application's job after the refused demo: %+v %v", j, err)
	}
}

// A bad duration, from the flag or from $DURATION, is a usage error.
func TestDemoDurationErrors(t *testing.T) {
	t.Setenv("DURATION", "abc")
	var out, errb bytes.Buffer
	if code := execute(context.Background(), &out, &errb, "demo", "--database-url", "postgres://127.0.0.1:1/x"); code != 2 ||
		!strings.Contains(errb.String(), `DURATION="abc": want a whole number of seconds`) {
		t.Fatalf("DURATION=abc: exit %d\n%s", code, errb.String())
	}
	t.Setenv("DURATION", "")
	errb.Reset()
	if code := execute(context.Background(), &out, &errb, "demo", "--duration", "-1s", "--database-url", "postgres://127.0.0.1:1/x"); code != 2 ||
		!strings.Contains(errb.String(), "a negative duration") {
		t.Fatalf("--duration -1s: exit %d\n%s", code, errb.String())
	}
}

// With Python and psycopg, the demo runs a Python worker (clients/python) beside the Go
// ones: every order's receipt job goes to its queue, it renders them, and its figures
// show in the live lines and the summary.
func TestDemoPythonWorker(t *testing.T) {
	t.Parallel()
	clienttest.Python(t)
	c, pool := demoCLI(t, "demo_py_")
	out := c.must("demo", "--duration", "3s")
	for _, want := range []string{"a Python worker (clients/python, pid ", "│ python: receipts ", "demo: Python worker: "} {
		if !strings.Contains(out, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
	var orders, receipts, rendered, byOthers int64
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM "`+c.schema+`".demo_orders),
  count(*), count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'succeeded' AND worker_id <> 'demo-python')
FROM "`+c.schema+`".jobs WHERE kind = 'render_receipt' AND queue = 'receipts'`).Scan(&orders, &receipts, &rendered, &byOthers); err != nil {
		t.Fatal(err)
	}
	if orders == 0 || receipts != orders || rendered == 0 || byOthers != 0 {
		t.Fatalf("%d orders, %d receipt jobs, %d rendered, %d of them by another worker than the Python one", orders, receipts, rendered, byOthers)
	}
	if !strings.Contains(out, fmt.Sprintf("demo: Python worker: %d receipts rendered", rendered)) {
		t.Fatalf("the summary does not say %d receipts rendered:\n%s", rendered, out)
	}
}

// Without Python (an interpreter that does not exist), the demo says so in one line
// and runs with its Go workers alone.
func TestDemoWithoutPython(t *testing.T) {
	t.Setenv(bench.PythonEnv, "/nonexistent/python3")
	c, pool := demoCLI(t, "demo_nopy_")
	out := c.must("demo", "--duration", "1s")
	if n := strings.Count(out, "demo: no Python worker ("); n != 1 {
		t.Fatalf("%d lines say the Python worker is missing, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "/nonexistent/python3") || !strings.Contains(out, "emails sent") || strings.Contains(out, "python: receipts") {
		t.Fatalf("demo output without Python:\n%s", out)
	}
	var receipts int64
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM "`+c.schema+`".jobs WHERE kind = 'render_receipt'`).Scan(&receipts); err != nil {
		t.Fatal(err)
	}
	if receipts != 0 {
		t.Fatalf("%d receipt jobs enqueued with no Python worker to render them", receipts)
	}
}
