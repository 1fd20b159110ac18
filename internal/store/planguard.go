package store

// The plan guard: the statements that find jobs (or outbox events) by id or key are
// planned with sequential scans, hash joins and merge joins off, and without JIT
// (the statements that write a batch by id: merge joins on, nested loops off; see
// below).
//
// Why. pgx prepares each statement once per connection, and after five executions
// PostgreSQL may keep a generic plan for the connection's lifetime, re-planning only
// when the table's statistics change. A generic plan made while jobs is small (a new
// schema, a drained queue) reads it with a sequential scan (the claim's update of the
// rows it locked) or a hash join over one (the completion); the table then grows and
// each statement reads all of it, until autovacuum or autoanalyze happens to run. Under
// a snapshot held open elsewhere the table only grows, so the cost grew without bound
// (W10 in docs/benchmarks.md holds such a snapshot). An index plan is right at every
// size — on a tiny table it costs a few buffers more — so the guard makes it the only
// plan the planner can cost as cheap, whatever the statistics when it was cached.
//
// The guard also makes those statements use their generic plan from the first run
// (plan_cache_mode = force_generic_plan). Left to choose, PostgreSQL re-planned the
// completion at every run when its batches held one or a few outcomes — the steady
// low-rate case — since a custom plan for a one-element array looks cheaper than
// the generic one, and planning then cost more than executing (pg_stat_statements with
// track_planning shows both). With the guard's settings the generic plan is the index
// plan a custom one would be, so planning it again buys nothing.
//
// The guard alone did not bound a join. The statements that write a batch by id
// (finish, heartbeat, reclaim, the relay's outcomes) join arrays of ids, tokens and
// outcomes to the table. When the table's statistics say it holds a row or two —
// vacuumed while nearly empty over pages it once filled: a queue worked down to
// nothing, a bulk enqueue rolled back, a relay that caught up — the cheapest-looking
// join reads that "row" first: the whole primary key in id order, each entry compared
// with every outcome. The guard forbade a sequential scan, not a full index scan, so
// it allowed exactly that, and the plan stayed cached while the table filled again:
// completions of a few jobs read the whole index, and the queue stalled until
// autoanalyze replaced the plan (docs/benchmarks-archive.md, "A drained table's
// statistics"). So each of these statements
// also restricts the table itself to its array (idIn): whichever side the planner puts
// first, the table is read by an Index Cond on its primary key, one probe per id.
//
// Bounded is not yet linear. Left to nested loops, the planner paired the two bounded
// sides by comparing every row with every outcome, quadratic in the batch, or probed
// the primary key once per outcome with the whole array as a second condition, which
// the index re-reads at every probe (slower still, for a completion with
// DeleteOnSuccess). Hash joins were linear, but a hash join yields rows in the order
// of the side it probes with, which may be the table's physical order, and the
// completions must take their row locks in id order (idOrder;
// TestMultiRowWritesLockInIDOrder moves a row so that the two orders differ). So these
// statements run under planGuardByID: merge joins on and nested loops off. A merge
// join reads each side once, sorted by id, and yields its rows in id order whichever
// side leads; it needs no estimate to be right, so the drained table gets the same plan
// (BenchmarkFinish runs a completion on a drained table).
// Joins with no equality to merge on (the one-row CTE of the statement's time) still
// take a nested loop, at the planner's "disabled" cost, which would push the
// statement's estimate over jit_above_cost, and JIT-compiling a statement at every run
// costs far more than running it. JIT never pays for statements this short, so every
// guard turns it off.
//
// The same holds for every other statement that reads a growing table by id or key,
// not only the hot ones: a job's or an event's own row (JobGet, the admin actions), the
// reclaimer's scan, the limited claims and their status, a conflicting enqueue's
// lookup of the key holders, the completer's re-read of a batch it lost, a parent
// reading its children, the flow tree, the stats, the lineage lookups, the batched
// deletes of retention and the prunes. Left to the planner, a table analysed while it
// held a page of rows had every one of them planned as a sequential scan. They run
// under planGuardOn, or planGuardScans for the limited claims (whose lock, claim and
// status go as one pipeline under it), and are shaped so that no join order can read
// the table first: a list of keys is probed key by key (a lateral subquery, kept from
// being flattened into a join by OFFSET 0), and a batched delete finds and locks its
// rows first and then deletes them by id (= ANY(ARRAY(…))).
// TestEveryStatementPlansBounded plans every statement of the store in five table
// states; the few that read a table whole by design are listed there with their
// reasons.
//
// How. set_config(…, true) lasts until the end of the transaction; the guard and the
// statement go in one pipeline (one round trip). On the pool the pipeline is one
// implicit transaction (a single Sync ends it), so the settings end with it. On a
// connection or transaction the caller owns (CompleteTx, tests) a third statement
// restores the caller's own values, since that transaction may go on.
//
// On the Citus layout a forced generic plan is what Citus cannot make of a statement
// that reads every shard with parameters, so there each such statement runs under its
// citusGuard: the same settings with a custom plan (citus.go, citusGuardOf). Which of
// the two applies is the store's layout flag, read with an atomic load; the
// single-node statements and guards are the same either way.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// planGuardOn is the guard of the claims and of most lookups: no sequential scans,
// hash or merge joins. planGuardByID is the guard of the statements bounded by idIn:
// merge joins instead of nested loops (see above). planGuardScans only forbids
// sequential scans: the limited claims join their head window, the buckets of its jobs
// and the running jobs several times over, and limited to nested loops those joins
// compared every row with every other, quadratic in the running jobs. None
// JIT-compiles, and none starts parallel workers: the guarded statements read a few
// index ranges, and launching two workers for the overview's counts of the last hour
// cost more than the reads (docs/dashboard.md, D1). planGuardKeep saves every setting any guard
// changes, for planGuardOff, and turns JIT off; planGuardSave adds what the three
// share.
const (
	planGuardKeep = `SELECT set_config('skiplock.plan_guard',
  current_setting('enable_seqscan') || ',' || current_setting('enable_hashjoin') || ',' || current_setting('enable_mergejoin')
    || ',' || current_setting('plan_cache_mode') || ',' || current_setting('enable_nestloop') || ',' || current_setting('jit')
    || ',' || current_setting('max_parallel_workers_per_gather'), true),
  set_config('jit', 'off', true), set_config('max_parallel_workers_per_gather', '0', true)`
	planGuardSave = planGuardKeep + `, set_config('enable_seqscan', 'off', true),
  set_config('plan_cache_mode', 'force_generic_plan', true)`
	planGuardOn   = planGuardSave + `, set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`
	planGuardByID = planGuardSave + `, set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'on', true),
  set_config('enable_nestloop', 'off', true)`
	planGuardScans = planGuardSave
	// planCustom is the opposite, for the operator's job listing: a plan made for the
	// filters given. The listing's one statement takes every filter as "$n IS NULL OR
	// …"; a generic plan cannot know which are set, so it walks the primary key and
	// filters every row (the failed jobs among ten million succeeded ones: the whole
	// table, for each page). Planned with the values, the absent filters fold away and
	// a state or tag finds its rows by its index (the finished states' retention index,
	// the running jobs' lease index, the tags' GIN index) when the statistics say they
	// are few. It runs at a person's request, so planning it every time costs nothing
	// that matters.
	planCustom   = planGuardKeep + `, set_config('plan_cache_mode', 'force_custom_plan', true)`
	planGuardOff = `SELECT set_config('enable_seqscan', split_part(current_setting('skiplock.plan_guard'), ',', 1), true),
  set_config('enable_hashjoin', split_part(current_setting('skiplock.plan_guard'), ',', 2), true),
  set_config('enable_mergejoin', split_part(current_setting('skiplock.plan_guard'), ',', 3), true),
  set_config('plan_cache_mode', split_part(current_setting('skiplock.plan_guard'), ',', 4), true),
  set_config('enable_nestloop', split_part(current_setting('skiplock.plan_guard'), ',', 5), true),
  set_config('jit', split_part(current_setting('skiplock.plan_guard'), ',', 6), true),
  set_config('max_parallel_workers_per_gather', split_part(current_setting('skiplock.plan_guard'), ',', 7), true)`
)

// idIn is the restriction that bounds a by-id statement's read of its table to the
// ids of its array parameter param (see above): alias.id = ANY(param).
func idIn(alias, param string) string {
	return alias + `.id = ANY(` + param + `::uuid[])`
}

// affected is guarded's collect for a statement that returns no rows: how many rows it
// wrote.
func affected(rows pgx.Rows, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	rows.Close()
	return rows.CommandTag().RowsAffected(), rows.Err()
}

// guardedRow is guarded for a statement that returns one row, which scan reads:
// pgx.ErrNoRows when there is none, as QueryRow gives.
func guardedRow[T any](ctx context.Context, db DBTX, st stmt, scan func(pgx.Row) (T, error), args ...any) (T, error) {
	return guarded(ctx, db, st, func(rows pgx.Rows, err error) (T, error) {
		var zero T
		if err != nil {
			return zero, err
		}
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return zero, err
			}
			return zero, pgx.ErrNoRows
		}
		v, err := scan(rows)
		if err != nil {
			return zero, err
		}
		rows.Close()
		return v, rows.Err()
	}, args...)
}

// guarded runs st under its plan guard (st.planGuard; none when "") and collects its
// rows. A db that cannot pipeline (none of pgx's pool, conn or tx) runs it unguarded.
//
// A statement with a guard of its own on the Citus layout (st.citusGuard) needs the
// layout known: the first such statement a Store runs before anything else asked
// learns it (Store.Distributed: one catalog query per Store, two on Citus). A started
// client's workers learn it at Start; after that, picking the guard is an atomic load.
func guarded[T any](ctx context.Context, db DBTX, st stmt, collect func(pgx.Rows, error) (T, error), args ...any) (T, error) {
	var zero T
	b, ok := db.(Batcher)
	if !ok || st.guard == "" {
		return collect(db.Query(ctx, st.sql, args...))
	}
	if st.citusGuard != "" && st.store.layout.v.Load() == 0 {
		if _, err := st.store.Distributed(ctx, db); err != nil {
			return zero, err
		}
	}
	p := newPipeline(b, st)
	p.add(st, args...)
	br, err := p.send(ctx)
	if err != nil {
		return zero, err
	}
	defer br.Close()
	out, err := collect(br.Query())
	if err != nil {
		return zero, err
	}
	if err := p.end(br); err != nil {
		return zero, err
	}
	return out, nil
}

// pipeline is statements sent in one round trip under one plan guard: the guard
// first and, when db is not a pool, the restore last (the caller's transaction may go
// on past the pipeline). On a pool the pipeline is one implicit transaction, which
// ends the guard's settings.
type pipeline struct {
	batch   pgx.Batch
	db      Batcher
	restore bool
}

// newPipeline starts a pipeline under the plan guard of st, its statement that the
// guard is for (st.planGuard: as the store knows its layout; the pipelines of the
// limited and fair claims run in started clients, which learnt it at Start).
func newPipeline(db Batcher, st stmt) *pipeline {
	_, pooled := db.(*pgxpool.Pool)
	p := &pipeline{db: db, restore: !pooled}
	p.batch.Queue(st.planGuard())
	return p
}

// planGuard is the plan guard st runs under: st.citusGuard once its store knows that
// the schema has the Citus layout, else st.guard.
func (st stmt) planGuard() string {
	if st.citusGuard != "" && st.store.onCitus() {
		return st.citusGuard
	}
	return st.guard
}

// add queues st (its guard is the pipeline's, or it has none).
func (p *pipeline) add(st stmt, args ...any) { p.batch.Queue(st.sql, args...) }

// send sends the pipeline and reads the guard's result. The caller reads each
// statement's result in turn, then calls end.
func (p *pipeline) send(ctx context.Context) (pgx.BatchResults, error) {
	if p.restore {
		p.batch.Queue(planGuardOff)
	}
	br := p.db.SendBatch(ctx, &p.batch)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, fmt.Errorf("plan guard: %w", err)
	}
	return br, nil
}

// end reads the restore's result and closes br. The pipeline's implicit transaction
// commits at its end: rows read before a failed commit were never written, so the
// caller returns nothing with the error.
func (p *pipeline) end(br pgx.BatchResults) error {
	if p.restore {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return fmt.Errorf("plan guard restore: %w", err)
		}
	}
	return br.Close()
}
