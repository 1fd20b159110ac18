-- A cheap, bounded queue depth for autoscalers (docs/operations.md, "Deploying"):
--
--   SELECT skiplock.queue_depth('mail');          -- due jobs of one queue, at most 10000
--   SELECT skiplock.queue_depth();                -- due jobs of every queue, at most 10000
--   SELECT skiplock.queue_depth('mail', 500);     -- at most 500
--
-- It counts the jobs that are due — status 'pending' and run_at <= now — of one queue
-- (NULL: all queues) and stops counting at cap: the result is min(due jobs, cap). A
-- paused queue's due jobs are counted (they are waiting); waiting flow parents, running
-- and scheduled (run_at in the future) jobs are not. cap NULL counts without a cap (an
-- exact figure whose cost grows with the backlog: not for a poller); a negative cap is
-- refused by LIMIT. now is the time to compare run_at with (NULL: the database's now()),
-- so that a client with an injected clock agrees with its own claims.
--
-- Cost: it reads jobs_ready_idx (queue, priority DESC, run_at, id) WHERE status =
-- 'pending', the claim's index, and never the table's heap beyond the visibility map.
-- A skip scan finds each (queue, priority) pair that has pending jobs, one index
-- descent per pair (a recursive CTE: PostgreSQL has no skip scan of its own before 18);
-- within a pair the due jobs are one range (run_at <= now), so scheduled jobs are never
-- read, and counting stops after cap entries. One call reads at most cap index entries
-- plus two descents per (queue, priority) pair, whatever the table's size: the 10
-- million finished jobs of a busy table are not in the index, and 10 million due ones
-- are cut at cap. The planner settings below make that plan the only one it can cost
-- as cheap (the store's plan guard, planguard.go, for the statements of Go), and
-- TestQueueDepthPlanIsBounded in internal/store EXPLAINs this body.
--
-- The body uses $1..$3, not the argument names, so that the test can PREPARE it as it
-- stands. LANGUAGE sql, STABLE: it writes nothing. SECURITY INVOKER: the caller needs
-- SELECT on jobs (every role of docs/roles.md but the producer and the relay has it)
-- and EXECUTE, which is revoked from PUBLIC here and granted by `skiplock roles sql`
-- to the worker and dashboard roles.
CREATE FUNCTION {{schema}}.queue_depth(queue text DEFAULT NULL, cap bigint DEFAULT 10000, now timestamptz DEFAULT NULL)
RETURNS bigint LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_sort = off SET jit = off AS $$
WITH RECURSIVE
t AS MATERIALIZED (SELECT coalesce($3, now()) AS now),
-- The (queue, priority) pairs with pending jobs, in index order: the first one, then
-- from each the next lower priority of its queue, else (all queues only) the next queue.
-- queue >= '' is true of every queue; it gives the first scan an Index Cond. The count's
-- subquery is one range scan per pair, (queue, priority, run_at <= now): its LIMIT keeps
-- it from being flattened into a join, and its ORDER BY, which only jobs_ready_idx
-- yields without a sort (disabled below), keeps the planner from ranging over the
-- limited claims' jobs_group_ready_idx, whose kind and concurrency key come before
-- priority and run_at.
k(queue, priority) AS (
  (SELECT f.queue, f.priority FROM (
     (SELECT j.queue, j.priority FROM {{schema}}.jobs j
      WHERE j.status = 'pending' AND j.queue = $1
      ORDER BY j.queue, j.priority DESC LIMIT 1)
     UNION ALL
     (SELECT j.queue, j.priority FROM {{schema}}.jobs j
      WHERE j.status = 'pending' AND j.queue >= '' AND $1 IS NULL
      ORDER BY j.queue, j.priority DESC LIMIT 1)) f
   LIMIT 1)
  UNION ALL
  SELECT n.queue, n.priority FROM k, LATERAL (
    (SELECT j.queue, j.priority FROM {{schema}}.jobs j
     WHERE j.status = 'pending' AND j.queue = k.queue AND j.priority < k.priority
     ORDER BY j.queue, j.priority DESC LIMIT 1)
    UNION ALL
    (SELECT j.queue, j.priority FROM {{schema}}.jobs j
     WHERE j.status = 'pending' AND j.queue > k.queue AND $1 IS NULL
     ORDER BY j.queue, j.priority DESC LIMIT 1)
    LIMIT 1) n
)
SELECT count(*) FROM (
  SELECT 1 FROM k, LATERAL (
    SELECT 1 FROM {{schema}}.jobs j
    WHERE j.status = 'pending' AND j.queue = k.queue AND j.priority = k.priority
      AND j.run_at <= (SELECT now FROM t)
    ORDER BY j.queue, j.priority DESC, j.run_at LIMIT $2) d
  LIMIT $2) c
$$;

REVOKE EXECUTE ON FUNCTION {{schema}}.queue_depth(text, bigint, timestamptz) FROM PUBLIC;
