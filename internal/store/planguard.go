package store

// The plan guard: the hot statements that find jobs (or outbox events) by id are
// planned with sequential scans, hash joins and merge joins off.
//
// Why. pgx prepares each statement once per connection, and after five executions
// PostgreSQL may keep a generic plan for the connection's lifetime, re-planning only
// when the table's statistics change. A generic plan made while jobs is small (a new
// schema, a drained queue) reads it with a sequential scan (the claim's update of the
// rows it locked) or a hash join over one (the completion); the table then grows and
// each statement reads all of it, until autovacuum or autoanalyze happens to run. Under
// a snapshot held open elsewhere the table only grows, so the cost grew without bound
// (W10 on the first cursor version: claims 1 → 26 ms in minutes, completion batches
// scanning 31,000 rows to find 16; docs/benchmarks.md). An index plan is right at every
// size — on a tiny table it costs a few buffers more — so the guard makes it the only
// plan the planner can cost as cheap, whatever the statistics when it was cached.
//
// The guard also makes those statements use their generic plan from the first run
// (plan_cache_mode = force_generic_plan). Left to choose, PostgreSQL re-planned the
// completion at every run when its batches held one or a few outcomes — the steady
// low-rate case — since a custom plan for a one-element array looks cheaper than
// the generic one: planning took 0.22 ms against 0.11 ms of execution (pg_stat_statements
// with track_planning, W6). With the guard's settings the generic plan is the index
// plan a custom one would be, so planning it again buys nothing.
//
// How. set_config(…, true) lasts until the end of the transaction; the guard and the
// statement go in one pipeline (one round trip). On the pool the pipeline is one
// implicit transaction (a single Sync ends it), so the settings end with it. On a
// connection or transaction the caller owns (CompleteTx, tests) a third statement
// restores the caller's own values, since that transaction may go on.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	planGuardOn = `SELECT set_config('skiplock.plan_guard',
  current_setting('enable_seqscan') || ',' || current_setting('enable_hashjoin') || ',' || current_setting('enable_mergejoin')
    || ',' || current_setting('plan_cache_mode'), true),
  set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
  set_config('plan_cache_mode', 'force_generic_plan', true)`
	planGuardOff = `SELECT set_config('enable_seqscan', split_part(current_setting('skiplock.plan_guard'), ',', 1), true),
  set_config('enable_hashjoin', split_part(current_setting('skiplock.plan_guard'), ',', 2), true),
  set_config('enable_mergejoin', split_part(current_setting('skiplock.plan_guard'), ',', 3), true),
  set_config('plan_cache_mode', split_part(current_setting('skiplock.plan_guard'), ',', 4), true)`
)

// guarded runs sql under the plan guard and collects its rows. A db that cannot
// pipeline (none of pgx's pool, conn or tx) runs it unguarded.
func guarded[T any](ctx context.Context, db DBTX, collect func(pgx.Rows, error) (T, error), sql string, args ...any) (T, error) {
	b, ok := db.(Batcher)
	if !ok {
		return collect(db.Query(ctx, sql, args...))
	}
	_, pooled := db.(*pgxpool.Pool)
	restore := !pooled // the caller's transaction may go on past the statement
	batch := &pgx.Batch{}
	batch.Queue(planGuardOn)
	batch.Queue(sql, args...)
	if restore {
		batch.Queue(planGuardOff)
	}
	br := b.SendBatch(ctx, batch)
	defer br.Close()
	var zero T
	if _, err := br.Exec(); err != nil {
		return zero, fmt.Errorf("plan guard: %w", err)
	}
	out, err := collect(br.Query())
	if err != nil {
		return zero, err
	}
	if restore {
		if _, err := br.Exec(); err != nil {
			return zero, fmt.Errorf("plan guard restore: %w", err)
		}
	}
	// The pipeline's implicit transaction commits at its end: rows read before a
	// failed commit were never written, so nothing is returned with the error.
	if err := br.Close(); err != nil {
		return zero, err
	}
	return out, nil
}
