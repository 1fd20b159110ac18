package store

// Synthetic jobs for the dashboard's benchmark (skiplock bench D1): a large table
// made in one statement, not through the enqueue path, whose cost per job would make
// a million take minutes.

import (
	"context"
	"time"
)

type benchStatements struct{ fill, burst stmt }

func newBenchStatements(b *builder) benchStatements {
	return benchStatements{
		// $1 jobs ending at the clock's now ($2): a busy week of three queues with two
		// kinds each, one every 600 ms: 99% finished (80% succeeded, 10% failed, 10%
		// cancelled), 0.9% pending (half of them due), 0.1% running; one in ten tagged
		// ("vip", or "eu" and "batch-N" for the Nth 100,000).
		fill: b.add("bench_fill_jobs", `
WITH t AS (SELECT coalesce($2::timestamptz, now()) AS now)
INSERT INTO {{s}}.jobs (queue, kind, payload, status, run_at, attempts, last_error, tags,
  lease_until, lease_token, worker_id, attempted_at, created_at, updated_at)
SELECT q, (ARRAY['send_email', 'send_sms', 'build_report', 'export_csv', 'deliver_webhook', 'sync_crm'])[1 + (g % 3) * 2 + (g / 3) % 2],
       jsonb_build_object('order', g, 'note', 'some payload'), s::{{s}}.job_status,
       CASE WHEN s = 'pending' AND g % 2 = 0 THEN now + interval '1 hour' ELSE at END,
       CASE WHEN s = 'pending' THEN 0 ELSE 1 + g % 3 END,
       CASE s WHEN 'failed' THEN 'upstream: 503 service unavailable' WHEN 'cancelled' THEN 'cancelled by an operator' END,
       CASE WHEN g % 10 = 3 THEN ARRAY['vip'] WHEN g % 10 = 7 THEN ARRAY['eu', 'batch-' || (g / 100000)] END,
       CASE WHEN s = 'running' THEN now + interval '1 minute' END,
       CASE WHEN s = 'running' THEN gen_random_uuid() END,
       CASE WHEN s = 'running' THEN 'bench-worker' END,
       CASE WHEN s <> 'pending' THEN at END, at, CASE WHEN s IN ('pending', 'running') THEN at ELSE at + interval '2 seconds' END
FROM (SELECT g, t.now, (ARRAY['mail', 'reports', 'webhooks'])[1 + g % 3] AS q,
             t.now - ($1::int - g) * interval '600 milliseconds' AS at,
             CASE WHEN g % 1000 < 9 THEN 'pending' WHEN g % 1000 = 9 THEN 'running'
                  WHEN g % 10 < 8 THEN 'succeeded' WHEN g % 10 = 8 THEN 'failed' ELSE 'cancelled' END AS s
      FROM t, generate_series(1, $1::int) g) AS x`),

		// The fair queue's noisy neighbour (skiplock bench W11): $5 due jobs of kind $2
		// in queue $1 under concurrency key $3, with payloads {"i": $4 + 0 … $5 − 1},
		// in one statement, so that they appear at once.
		burst: b.add("bench_burst", `
INSERT INTO {{s}}.jobs (queue, kind, payload, concurrency_key)
SELECT $1, $2, jsonb_build_object('i', $4::int + g), $3 FROM generate_series(0, $5::int - 1) g`),
	}
}

// BenchBurst inserts n due jobs of kind in queue under key in one statement, their
// payloads {"i": first + 0 … n − 1}, and returns how many it wrote.
func (s *Store) BenchBurst(ctx context.Context, db DBTX, queue, kind, key string, first, n int) (int64, error) {
	tag, err := db.Exec(ctx, s.bench.burst.sql, queue, kind, key, first, n)
	return tag.RowsAffected(), err
}

// BenchFillJobs inserts n synthetic jobs (see benchStatements), the last of them at
// now (nil: the database's now()), and returns how many it wrote.
func (s *Store) BenchFillJobs(ctx context.Context, db DBTX, n int, now *time.Time) (int64, error) {
	tag, err := db.Exec(ctx, s.bench.fill.sql, n, Now(now))
	return tag.RowsAffected(), err
}

// AnalyzeJobs vacuums and analyses the jobs table, so that the planner's statistics
// (and JobStateEstimates) describe what was just written. It is DDL-like: composed
// at call time, not prepared.
func (s *Store) AnalyzeJobs(ctx context.Context, db DBTX) error {
	_, err := db.Exec(ctx, "VACUUM (ANALYZE) "+s.Table("jobs"))
	return err
}
