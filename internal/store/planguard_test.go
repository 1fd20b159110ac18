package store

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestEveryStatementPlansBounded: the generic plan of every statement of the store,
// under the plan guard it runs with (stmt.guard), reads the tables that grow with the
// work (jobs, outbox, inbox and their bookkeeping) only by an index condition — never
// whole — whatever the statistics said when it was planned, since a connection may keep
// that plan while the table grows without bound. The few statements that read a table
// whole by design are in readsWhole, each with its reason; an entry the planner no
// longer needs fails the test too, so the list cannot go stale. Three states are
// planned:
//
//   - new: small and never vacuumed. Unguarded, the claim's generic plan reads jobs with
//     a sequential scan (the control, so the test shows what the guard is for).
//   - small: the same, analysed (a young queue autovacuum has passed over): its
//     statistics say a page, and every unguarded lookup by id or key — a job's own
//     page, the reclaimer's scan, the limited claims, the stats — was planned as a
//     sequential scan, kept until the next autoanalyze however fast the table grew.
//   - drained: every growing table vacuumed while it held almost nothing live, over
//     pages it once filled (a queue worked down to empty, a bulk enqueue rolled back, a
//     relay that caught up). The statistics then say a row or two, and a join by id was planned with the whole
//     primary key as its outer side: guarded as it was, the completion of one job read
//     every entry of the index, for as long as the connection kept the plan (18 s per
//     completion, a minute of a stalled queue, in a W10 run after a rolled-back insert
//     of 800,000 jobs; docs/benchmarks-archive.md).
//   - partitioned: the partitioned layout, new; and partitioned-drained, its current
//     partition drained as above. Here the current partition is the legacy one (the
//     converted table, which takes new jobs until the first period starts), analysed
//     by the conversion while small: the state "small" is in, per partition.
func TestEveryStatementPlansBounded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	whole := map[string]bool{} // statements some state read a table whole in
	t.Run("states", func(t *testing.T) {
		for _, state := range []string{"new", "small", "drained", "partitioned", "partitioned-drained"} {
			t.Run(state, func(t *testing.T) {
				t.Parallel()
				for _, name := range statementsReadingWhole(t, state) {
					mu.Lock()
					whole[name] = true
					mu.Unlock()
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	for name := range readsWhole {
		if !whole[name] {
			t.Errorf("%s reads no table whole in any state any more: take it out of readsWhole", name)
		}
	}
}

// TestGuardedStatementsRunGuarded: a statement made with a plan guard is run through
// guarded, which applies it; one whose text the store's code sends itself would run
// unguarded while TestEveryStatementPlansBounded plans it guarded.
func TestGuardedStatementsRunGuarded(t *testing.T) {
	t.Parallel()
	s := newStore(t, "guard_check")
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	guardedCount := 0
	for path, st := range statementFields(s) {
		if st.guard == "" {
			continue
		}
		guardedCount++
		if strings.Contains(code.String(), "s."+path+".sql") {
			t.Errorf("%s (%s) has a plan guard but the store sends s.%s.sql itself: run it through guarded", path, st.name, path)
		}
	}
	if guardedCount == 0 {
		t.Fatal("found no guarded statement")
	}
}

// readsWhole are the statements allowed to read a growing table whole, and why.
var readsWhole = map[string]string{
	"list": "the operator's listing of jobs (Client.JobList, the dashboard, `skiplock jobs list`), planned " +
		"for the filters given (planCustom): with none it pages through the primary key, as it should; a state " +
		"or tag finds its few rows by index (TestListFindsFewJobsByIndex); a text or metadata filter has no index",
	"list_page_asc":  pageReadsWhole,
	"list_page_desc": pageReadsWhole,
	"count_jobs_capped": "a bulk confirmation's count of the jobs a filter matches (a count reads what it counts), " +
		"stopped at its cap (the dashboard's 100,000)",
	"outbox_counts": "counts every event by state, for the stats (a count reads what it counts); " +
		"published events are kept only for the retention window",
	"stats_finished_exact": "counts every finished job by queue and state, when asked to count exactly " +
		"(the stats sample pages of a large table instead, stats_finished_sample)",
	"partition_copy_dedup": "copies every deduplication key of the table being converted to the " +
		"partitioned layout, once, in the conversion's own transaction",
}

// pageReadsWhole is why the dashboard's bounded listings are in readsWhole: planned
// with every parameter NULL, as here, their scan budget (LIMIT $9) is no limit; with
// the values (planCustom) they read at most the budget's rows whatever the filters
// (TestListPageReadsAtMostItsBudget).
const pageReadsWhole = "the dashboard's bounded listing: with a NULL scan budget it has no LIMIT; planned for the " +
	"values given it reads at most the budget (TestListPageReadsAtMostItsBudget)"

// statementsReadingWhole plans every statement in state and fails for each that reads
// a growing table whole and is not in readsWhole. It returns those that do.
func statementsReadingWhole(t *testing.T, state string) []string {
	ctx := context.Background()
	s, pool := storeWithJobs(t, 40)
	layout, jobs := LayoutPlain, s.Table("jobs")
	if strings.HasPrefix(state, "partitioned") {
		partition(t, s)
		layout, jobs = LayoutPartitioned, currentPartition(t, s, pool)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("outbox")+` (aggregate_type, aggregate_id, event_type, payload)
SELECT 'a', g::text, 'e', '{}' FROM generate_series(1, 40) g`); err != nil {
		t.Fatal(err)
	}
	if state == "small" {
		for _, table := range []string{"jobs", "outbox"} {
			if _, err := pool.Exec(ctx, `ANALYZE `+s.Table(table)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if strings.HasSuffix(state, "drained") {
		drainStatistics(t, pool, jobs, insertJobsSQL(s))
		for table, rows := range map[string]string{
			"outbox":     `(aggregate_type, aggregate_id, event_type, payload) SELECT 'a', g::text, 'e', '{}'`,
			"inbox":      `(consumer, event_id) SELECT 'c', g::text`,
			"job_unique": `(kind, unique_key, job_id) SELECT 'k', g::text, gen_random_uuid()`,
			"job_dedup":  `(kind, deduplication_key, job_id) SELECT 'k', g::text, gen_random_uuid()`,
			"tx_lineage": `(txid, job_id, created_at) SELECT pg_current_xact_id(), gen_random_uuid(), now()`,
			"batches":    `(id, created_at) SELECT gen_random_uuid(), now()`,
		} {
			drainStatistics(t, pool, s.Table(table), `INSERT INTO `+s.Table(table)+` `+rows+` FROM generate_series(1, $1) g`)
		}
	}
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	fields := statementFields(s)
	partial := partialIndexes(t, pool, s.Schema)
	paths := slices.Sorted(maps.Keys(fields))
	var out []string
	for i, path := range paths {
		st := fields[path]
		if st.layout != LayoutMissing && st.layout != layout {
			continue
		}
		p, err := genericPlan(ctx, conn, fmt.Sprintf("b%d", i), st.guard, st.sql)
		if err != nil {
			t.Errorf("%s (%s): %v", path, st.name, err)
			continue
		}
		if scan := unboundedScan(p, partial); scan != "" {
			out = append(out, st.name)
			if readsWhole[st.name] == "" {
				t.Errorf("%s (%s), %s: generic plan reads a table whole (%s):\n%s", path, st.name, state, scan, p)
			}
		}
	}
	if state == "new" {
		if p, err := genericPlan(ctx, conn, "control", "", s.lease.claim.sql); err != nil || unboundedScan(p, partial) == "" {
			t.Errorf("claim, unguarded: expected the sequential scan the guard prevents (has the planner changed?), %v:\n%s", err, p)
		}
	}
	return out
}

// currentPartition returns the quoted name of the partition of jobs that new jobs go to.
func currentPartition(t *testing.T, s *Store, pool *pgxpool.Pool) string {
	t.Helper()
	ps, err := s.ListPartitions(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	now := UUIDv7Floor(time.Now())
	for _, p := range ps {
		if !p.Default && p.From <= now && now < p.To {
			return s.Table(p.Name)
		}
	}
	t.Fatalf("no partition holds %s: %+v", now, ps)
	return ""
}

// genericPlan returns the text EXPLAIN of sql's generic plan under guard ("" for
// none), in a transaction it rolls back. A generic plan does not look at the
// parameters, so they are all NULL.
func genericPlan(ctx context.Context, conn *pgx.Conn, name, guard, sql string) (string, error) {
	return explainExecute(ctx, conn, name, guard, sql, "", nil)
}

// explainExecute returns EXPLAIN (options) of sql prepared as name and executed
// with the SQL literals args (NULL for each when args is nil), in a transaction it
// rolls back, under the generic plan unless guard ("" for none) says otherwise.
func explainExecute(ctx context.Context, conn *pgx.Conn, name, guard, sql, options string, args []string) (string, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		return "", err
	}
	if guard != "" {
		if _, err := tx.Exec(ctx, guard); err != nil {
			return "", err
		}
	}
	desc, err := tx.Conn().PgConn().Prepare(ctx, name, sql, nil)
	if err != nil {
		return "", fmt.Errorf("PREPARE: %w", err)
	}
	if args == nil {
		args = slices.Repeat([]string{"NULL"}, len(desc.ParamOIDs))
	}
	call := name
	if len(args) > 0 {
		call += "(" + strings.Join(args, ", ") + ")"
	}
	if options != "" {
		options = "(" + options + ") "
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+options+"EXECUTE "+call)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}

// drainStatistics leaves table (whose rows insert, with its count as $1, adds) in the
// state a queue worked down to nothing leaves it: pages filled by a transaction that
// rolled back, the rows before them deleted, one live row after them (so vacuum
// cannot truncate the table), then a vacuum. relpages stays; reltuples falls to 1.
func drainStatistics(tb testing.TB, pool *pgxpool.Pool, table, insert string) {
	tb.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := tx.Exec(ctx, insert, 5000); err != nil {
		tb.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		tb.Fatal(err)
	}
	for _, sql := range []string{`DELETE FROM ` + table, insert, `VACUUM ` + table} {
		args := []any{}
		if sql == insert {
			args = append(args, 1)
		}
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			tb.Fatal(err)
		}
	}
	var pages, tuples float64
	if err := pool.QueryRow(ctx, `SELECT relpages, reltuples FROM pg_class WHERE oid = $1::regclass`, table).Scan(&pages, &tuples); err != nil {
		tb.Fatal(err)
	}
	if pages < 10 || tuples > 1 {
		tb.Fatalf("%s after the drain: relpages %v, reltuples %v; want many pages and a row", table, pages, tuples)
	}
}

// unboundedScan names the first node of a text EXPLAIN that reads a growing table
// whole: a sequential scan of it, or a scan with no Index Cond of one of its indexes
// (every entry, in the index's order). "" when none does. A partial index (partial
// names them) read with no condition is spared — it holds only the rows its predicate
// names: the pending or unpublished rows whose head a claim takes, the live rows a
// stats count counts — unless the scan looks for ids in it (a Filter on id), which the
// primary key finds without reading the rest. A hash join is not flagged on its own:
// it reads a table whole only through one of those.
func unboundedScan(plan string, partial map[string]bool) string {
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		node := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "->"))
		if m := seqScanRE.FindStringSubmatch(node); m != nil {
			if growing(m[1]) {
				return node
			}
			continue
		}
		m := indexScanRE.FindStringSubmatch(node)
		if m == nil || !growing(m[2]) {
			continue
		}
		// The node's own properties are the indented lines up to its first child.
		cond, byID := false, false
		for _, p := range lines[i+1:] {
			q := strings.TrimSpace(p)
			if strings.HasPrefix(q, "->") || q == "" {
				break
			}
			cond = cond || strings.HasPrefix(q, "Index Cond:")
			byID = byID || strings.HasPrefix(q, "Filter:") && filterByIDRE.MatchString(q)
		}
		if !cond && (!partial[m[1]] || byID) {
			return node
		}
	}
	return ""
}

// partialIndexes returns the names of the partial indexes in schema (and its
// partitions'), for unboundedScan.
func partialIndexes(t *testing.T, pool *pgxpool.Pool, schema string) map[string]bool {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT c.relname FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND i.indpred IS NOT NULL`, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("schema %s has no partial index", schema)
	}
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

var (
	seqScanRE   = regexp.MustCompile(`^(?:Parallel )?Seq Scan on (\S+)`)
	indexScanRE = regexp.MustCompile(`^(?:Parallel )?Index (?:Only )?Scan(?: Backward)? using (\S+) on (\S+)`)
	// filterByIDRE matches a Filter that compares the row's own id (not parent_id,
	// job_id, …) with a value or an array.
	filterByIDRE = regexp.MustCompile(`[(\s.]id = `)
)

// growing says whether table grows with the work: jobs (and its partitions), outbox,
// inbox, and the rows kept beside jobs (deduplication and uniqueness holders,
// transaction lineage, batches).
func growing(table string) bool {
	switch table {
	case "jobs", "outbox", "inbox", "job_dedup", "job_unique", "tx_lineage", "batches":
		return true
	}
	return strings.HasPrefix(table, "jobs_")
}

// TestPlanGuardLeavesSettings: the guard's settings end with the statement. On the
// pool (no restore statement) the pipeline's implicit transaction ends them; in a
// transaction the caller owns, the restore puts back the caller's own values.
func TestPlanGuardLeavesSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.NewPool(t, 1) // the statement after the guarded one runs on the same connection
	settings := func(db DBTX) string {
		var v string
		if err := db.QueryRow(ctx, `SELECT current_setting('enable_seqscan') || current_setting('enable_hashjoin') || current_setting('enable_mergejoin')
  || current_setting('plan_cache_mode') || current_setting('enable_nestloop') || current_setting('jit')
  || current_setting('max_parallel_workers_per_gather')`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	lease := []Lease{{ID: "00000000-0000-0000-0000-000000000001", Token: "00000000-0000-0000-0000-000000000002"}}
	before := settings(pool) // the server's own values (onononautoonon by default)
	if _, err := s.Heartbeat(ctx, pool, nil, lease, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if got := settings(pool); got != before {
		t.Errorf("on the pool after a guarded statement: enable_seqscan, hashjoin, mergejoin, plan_cache_mode = %q, want %q as before", got, before)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = on; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = on;
SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL enable_nestloop = on; SET LOCAL jit = on;
SET LOCAL max_parallel_workers_per_gather = 3`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, tx, nil, lease, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if got := settings(tx); got != "onoffonforce_custom_planonon3" {
		t.Errorf("in the caller's transaction after a guarded statement: %q, want the caller's onoffonforce_custom_planonon3", got)
	}
}

// TestPlanGuardPlansOnce: a completion of one outcome at a time, the steady low-rate
// case, is planned once per connection, not at every run (left to choose, PostgreSQL
// kept a custom plan for it: planning cost twice the execution).
func TestPlanGuardPlansOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 140000 {
		t.Skip("pg_prepared_statements counts plans from PostgreSQL 14 on")
	}
	// A batch of completions runs finish_complete, a batch of retries finish.
	for _, c := range []struct {
		action Action
		st     stmt
	}{{ActionComplete, s.finish.finishComplete}, {ActionRetry, s.finish.finish}} {
		for i := range 12 {
			out := []Outcome{{Lease: Lease{ID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i+1), Token: "00000000-0000-0000-0000-000000000001"}, Action: c.action}}
			if _, err := s.Finish(ctx, conn, nil, out); err != nil {
				t.Fatal(err)
			}
		}
		var generic, custom int64
		if err := conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, c.st.sql).Scan(&generic, &custom); err != nil {
			t.Fatal(c.st.name, err)
		}
		if custom != 0 || generic != 12 {
			t.Errorf("%s ran 12 times with %d generic and %d custom plans; want 12 and 0", c.st.name, generic, custom)
		}
	}
}
