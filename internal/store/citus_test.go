package store

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// updateCitusPlans rewrites docs/citus_plans.md from the cluster's plans.
var updateCitusPlans = flag.Bool("update-citus-plans", false, "rewrite docs/citus_plans.md from the Citus cluster's plans")

// citusPlansFile is the generated table of every statement's plan on the Citus layout.
const citusPlansFile = "../../docs/citus_plans.md"

// Citus plan classes, as docs/citus.md explains them.
const (
	planRouter      = "router"      // one task on one node: the distribution key pins it
	planMultiShard  = "multi-shard" // a task per shard: no key in the statement
	planCoordinator = "coordinator" // no distributed table: catalogs, coordinator tables
	planRefused     = "refused"     // Citus cannot plan it
)

// citusPlan is what EXPLAIN on the coordinator says of one statement.
type citusPlan struct {
	class  string
	detail string // task counts, the INSERT … SELECT method, or the error
}

var (
	taskCountRe = regexp.MustCompile(`Task Count: (\d+)`)
	insSelRe    = regexp.MustCompile(`INSERT/SELECT method: ([a-z ]+)`)
)

// TestCitusStatementPlans EXPLAINs every statement of the store on the Citus layout
// (a real cluster: SKIPLOCK_TEST_CITUS_URL) and compares what each plans as — a
// router query on one node, a task per shard, the coordinator alone, or refused —
// with docs/citus_plans.md, the table docs/citus.md plans the next steps from. A
// statement whose plan changes, or a new statement, fails the test until the table is
// regenerated:
//
//	SKIPLOCK_TEST_CITUS_URL=$(bash scripts/citus.sh url) go test ./internal/store \
//	  -run TestCitusStatementPlans -update-citus-plans
//
// Each statement is planned under its plan guard on the layout (planguard.go), as it
// runs: a guard that forces a generic plan on one node asks for a custom plan there
// (citusGuardOf), since Citus cannot make a generic plan of a statement that reads
// every shard with parameters. Every parameter gets a plausible value of its type (each text parameter the jobs
// table's name — one value, so a key parameter names one shard, and a statement that
// looks a table up by name finds one), and each statement is planned in a transaction that is
// rolled back: EXPLAIN executes nothing, but nothing may leak should Citus evaluate a
// function while planning. The enqueue inserts must plan: EnqueueTx works on the
// layout (the root package's Citus test runs it).
func TestCitusStatementPlans(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.CitusSchema(t)
	ctx := context.Background()
	s := newStore(t, schema)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	plans := map[string][2]citusPlan{} // as run, with a custom plan
	for _, st := range statementFields(s) {
		if st.layout == LayoutPartitioned {
			na := citusPlan{class: "n/a", detail: "partitioned layout only (refused on Citus)"}
			plans[st.name] = [2]citusPlan{na, na}
			continue
		}
		plans[st.name] = [2]citusPlan{
			explainOnCitus(ctx, t, conn.Conn(), st, s.Table("jobs"), false),
			explainOnCitus(ctx, t, conn.Conn(), st, s.Table("jobs"), true),
		}
	}
	for _, name := range []string{"insert", "insert_sequence", "insert_many", "insert_many_sequence",
		"insert_dedup", "insert_sequence_dedup", "insert_many_dedup", "insert_many_sequence_dedup"} {
		if p := plans[name][0]; p.class == planRefused || p.class == "" {
			t.Errorf("%s: %s %s; EnqueueTx needs it", name, p.class, p.detail)
		}
	}
	// Every statement a worker writes jobs with on the layout names one key: a router
	// query, one task on the node of the key, as it runs (citusclaim.go).
	for _, name := range citusWorkerWrites {
		if p := plans[name][0]; p.class != planRouter || p.detail != "tasks 1" {
			t.Errorf("%s: %s %s; a worker's statement on Citus must be a router query (Task Count: 1)", name, p.class, p.detail)
		}
	}
	got := renderCitusPlans(plans)
	if *updateCitusPlans {
		if err := os.WriteFile(citusPlansFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", citusPlansFile)
		return
	}
	want, err := os.ReadFile(citusPlansFile)
	if err != nil {
		t.Fatalf("%v (generate it with -update-citus-plans)", err)
	}
	if string(want) != got {
		t.Errorf("the statements' plans on Citus differ from %s; if the change is meant, regenerate it (-update-citus-plans) and update docs/citus.md's plan. Diff:\n%s",
			filepath.Base(citusPlansFile), lineDiff(string(want), got))
	}
	counts := map[string]int{}
	for _, p := range plans {
		counts[p[0].class]++
	}
	t.Logf("%d statements: %v", len(plans), counts)
}

// citusWorkerWrites are the statements with which a worker on the Citus layout claims,
// renews, completes (succeeds, retries, fails, snoozes, cancels) and reclaims jobs,
// and prunes the key table, and with which retention deletes finished jobs, lineage
// rows and old outbox events (citusretention.go), and with which a job is enqueued
// (citusinsert.go): each must be a router query.
var citusWorkerWrites = []string{"citus_claim", "citus_heartbeat", "citus_finish", "citus_finish_delete", "citus_reclaim",
	"citus_key_lock", "citus_key_prune", "citus_key_defer", "citus_key_lower", "citus_key_hold", "citus_outbox_claim", "citus_outbox_claim_ordered", "citus_outbox_finish", "citus_outbox_key_prune",
	"citus_retention_delete", "citus_retention_prune_lineage", "citus_outbox_prune_published", "citus_outbox_prune_dead",
	// and the one-job enqueue's router inserts (citusinsert.go)
	"citus_insert", "citus_insert_notify", "citus_insert_dedup", "citus_insert_dedup_notify", "citus_insert_plain", "citus_insert_plain_notify"}

// citusPlanArgs are the parameters ($n) explainOnCitus gives a value of their own:
// Citus evaluates a router insert's VALUES while it plans, so the unique states ($15,
// cast to the status enum) must be labels of it.
var citusPlanArgs = map[string]map[int]string{
	"citus_insert": {15: "'pending'"}, "citus_insert_notify": {15: "'pending'"},
	"citus_insert_dedup": {15: "'pending'"}, "citus_insert_dedup_notify": {15: "'pending'"},
}

// explainOnCitus plans one statement with a value for each parameter.
func explainOnCitus(ctx context.Context, t *testing.T, conn *pgx.Conn, st stmt, text string, custom bool) citusPlan {
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := conn.PgConn().Prepare(ctx, "citus_check", st.sql, nil)
	if err != nil {
		tx.Rollback(ctx)
		return citusPlan{class: planRefused, detail: "PREPARE: " + firstLine(err.Error())}
	}
	// Deferred calls run last first: the rollback, then the DEALLOCATE, which an
	// EXPLAIN that failed would otherwise find in an aborted transaction.
	defer func() {
		if err := conn.PgConn().Exec(ctx, "DEALLOCATE citus_check").Close(); err != nil {
			t.Fatalf("DEALLOCATE: %v", err)
		}
	}()
	defer tx.Rollback(ctx)
	args := make([]string, len(desc.ParamOIDs))
	for i, oid := range desc.ParamOIDs {
		lit, err := citusLiteral(ctx, tx, oid, text)
		if err != nil {
			t.Fatalf("a literal for type %d: %v", oid, err)
		}
		args[i] = lit
	}
	for n, lit := range citusPlanArgs[st.name] {
		args[n-1] = lit
	}
	// Planned as it runs: under its plan guard on the layout (planguard.go, citusGuardOf).
	if guard := cmp.Or(st.citusGuard, st.guard); guard != "" {
		if _, err := tx.Exec(ctx, guard); err != nil {
			t.Fatalf("%s's plan guard: %v", st.name, err)
		}
	}
	if custom {
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
			t.Fatal(err)
		}
	}
	q := "EXPLAIN (COSTS OFF) EXECUTE citus_check"
	if len(args) > 0 {
		q += "(" + strings.Join(args, ", ") + ")"
	}
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return citusPlan{class: planRefused, detail: firstLine(err.Error())}
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return citusPlan{class: planRefused, detail: firstLine(err.Error())}
	}
	return classifyCitusPlan(strings.Join(lines, "\n"))
}

// citusLiteral returns a literal of the type oid names, for EXPLAIN EXECUTE: an
// array holds one element, an enum its first label.
func citusLiteral(ctx context.Context, tx pgx.Tx, oid uint32, text string) (string, error) {
	var name, typname, typtype string
	var elem uint32
	err := tx.QueryRow(ctx, `SELECT format_type(oid, NULL), typname::text, typtype::text, typelem::int8 FROM pg_type WHERE oid = $1`, oid).
		Scan(&name, &typname, &typtype, &elem)
	if err != nil {
		return "", err
	}
	if elem != 0 && strings.HasPrefix(typname, "_") {
		e, err := citusLiteral(ctx, tx, elem, text)
		if err != nil {
			return "", err
		}
		return "ARRAY[" + e + "]::" + name, nil
	}
	var v string
	switch {
	case typtype == "e":
		if err := tx.QueryRow(ctx, `SELECT quote_literal(enumlabel) FROM pg_enum WHERE enumtypid = $1 ORDER BY enumsortorder LIMIT 1`, oid).Scan(&v); err != nil {
			return "", err
		}
	case typname == "text" || typname == "varchar" || typname == "name" || typname == "bpchar":
		v = "'" + strings.ReplaceAll(text, "'", "''") + "'"
	case typname == "uuid":
		v = "'01a24142-6dde-7da1-a69b-4817aea27be6'"
	case typname == "int2" || typname == "int4" || typname == "int8" || typname == "numeric" || typname == "oid":
		v = "1"
	case typname == "bool":
		v = "false"
	case typname == "timestamptz" || typname == "timestamp":
		v = "'2026-01-01 00:00:00+00'"
	case typname == "jsonb" || typname == "json":
		v = "'{}'"
	case typname == "interval":
		v = "'1 second'"
	default:
		v = "NULL"
	}
	return v + "::" + name, nil
}

// classifyCitusPlan reads an EXPLAIN of the coordinator.
func classifyCitusPlan(plan string) citusPlan {
	if !strings.Contains(plan, "Custom Scan (Citus") {
		return citusPlan{class: planCoordinator}
	}
	var tasks []string
	max := 0
	for _, m := range taskCountRe.FindAllStringSubmatch(plan, -1) {
		n, _ := strconv.Atoi(m[1])
		tasks = append(tasks, m[1])
		if n > max {
			max = n
		}
	}
	var notes []string
	if len(tasks) > 0 {
		notes = append(notes, "tasks "+strings.Join(tasks, "+"))
	}
	subplans := strings.Count(plan, "Distributed Subplan")
	if subplans > 0 {
		notes = append(notes, fmt.Sprintf("%d subplan(s)", subplans))
	}
	viaCoordinator := false
	if m := insSelRe.FindStringSubmatch(plan); m != nil {
		method := strings.TrimSpace(m[1])
		notes = append(notes, "INSERT … SELECT "+method)
		viaCoordinator = method != "pushdown"
	}
	p := citusPlan{detail: strings.Join(notes, ", ")}
	switch {
	case max > 1:
		p.class = planMultiShard
	case viaCoordinator || subplans > 0:
		// Each step is single-shard, but the coordinator runs steps between them.
		p.class = planCoordinator + " + router"
	default:
		p.class = planRouter
	}
	return p
}

// renderCitusPlans is docs/citus_plans.md.
func renderCitusPlans(plans map[string][2]citusPlan) string {
	names := make([]string, 0, len(plans))
	for n := range plans {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("<!-- Generated by TestCitusStatementPlans (internal/store/citus_test.go) with -update-citus-plans; do not edit. -->\n")
	b.WriteString("# Every store statement on the Citus layout\n\n")
	b.WriteString("How each statement of `internal/store` plans on the coordinator of a Citus cluster with the\n")
	b.WriteString("layout of `skiplock migrate up --citus` (32 shards), every text parameter one value (the jobs\n")
	b.WriteString("table's name), so a statement that names the distribution key names one shard.\n")
	b.WriteString("\"As run\" plans the statement under its plan guard (internal/store/planguard.go), which for\n")
	b.WriteString("most statements forces a generic plan; \"custom plan\" plans it for the values given.\n")
	b.WriteString("docs/citus.md explains the classes and the plan built on this table.\n\n")
	b.WriteString("| statement | as run | detail | custom plan | detail |\n|---|---|---|---|---|\n")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, n := range names {
		p := plans[n]
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", n, p[0].class, cell(p[0].detail), p[1].class, cell(p[1].detail))
	}
	return b.String()
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// TestDistributedKnowsTheLayout: Store.Distributed says false for a single-node schema
// and true for one with the Citus layout, and keeps its first answer (the layout is
// changed in a maintenance window, with the clients created again): a second call
// asks nothing, even of a database that can no longer answer.
func TestDistributedKnowsTheLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	check := func(t *testing.T, pool DBTX, schema string, want bool) {
		s := newStore(t, schema)
		if got, err := s.Distributed(ctx, pool); err != nil || got != want {
			t.Fatalf("Distributed = %v, %v; want %v", got, err, want)
		}
		if got, err := s.Distributed(ctx, nil); err != nil || got != want {
			t.Fatalf("Distributed again = %v, %v; want %v without asking the database", got, err, want)
		}
	}
	t.Run("single node", func(t *testing.T) {
		t.Parallel()
		check(t, pgtest.Pool(t), pgtest.Schema(t), false)
	})
	t.Run("citus", func(t *testing.T) {
		t.Parallel()
		pool, schema := pgtest.CitusSchema(t)
		check(t, pool, schema, true)
	})
}
