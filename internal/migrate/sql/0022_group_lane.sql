-- jobs_group_ready_idx only for the jobs a limited claim can look for (issue #49,
-- docs/enqueue_cost.md "The group index for limited queues only").
--
-- The index serves one reader: the limited claim's walk over a queue's (kind,
-- concurrency key) groups (docs/limits.md, "No head-of-line blocking"). Every pending
-- job entered it, limited or not: ~112 B of WAL and ~5 µs of a one-by-one enqueue's
-- server time. Now a job enters it only when its column grouped is true:
--
--   * grouped defaults to true, so every writer that does not set it (COPY, the SQL
--     function enqueue of migration 0005, an older client, a user's own INSERT) keeps
--     its jobs in the index, as before. Existing rows read true (a catalog-only
--     column: no rewrite).
--   * skiplock's insert statements set it to job_grouped(queue): true for a queue
--     with a limit of its own, for every queue while a kind has a limit (a kind can be
--     enqueued into any queue), false otherwise. job_grouped is a SQL function whose
--     body is rewritten whenever the limits change (the trigger limits_lanes below),
--     so the planner inlines it into the insert's plan as a constant or a test of
--     the queue against a literal list: no table is read per enqueue. Replacing the
--     function invalidates every cached plan that inlined it; a statement revalidates
--     its plan after locking jobs, so an insert that still used the previous body
--     held its lock on jobs since before the new body committed.
--   * A limit that appears marks the jobs already there that can still become pending
--     (all but the succeeded: a running job retried or reclaimed, a waiting one
--     released, a failed or cancelled one retried by an operator), in the same
--     transaction; lanes_settle(), run after that transaction commits, waits for every
--     transaction that holds ROW EXCLUSIVE on jobs when it starts — the only ones that
--     can still insert a job under the previous body — and marks their jobs too. The
--     client's LimitSet runs both (the settle only when the body changed); after
--     changing limits by SQL, run SELECT <schema>.lanes_settle(). A job left unmarked
--     in a limited queue is never lost: the limited claim's head window reads every
--     pending job through jobs_ready_idx. It is only not found behind a saturated head.
--
-- The Citus layout refuses limits (a limit counts running jobs across keys): its
-- inserts leave grouped at its default, its limits table has no trigger, and its
-- index is left as it was.

-- No limit is written while this migration runs (an older client's LimitSet would
-- fire no trigger): the lock is taken before anything reads the limits.
LOCK TABLE {{schema}}.limits IN SHARE ROW EXCLUSIVE MODE;

-- Rewritten by limits_lanes; this first body is replaced below from the limits
-- already set.
CREATE FUNCTION {{schema}}.job_grouped(queue text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT true $$;

-- Gives job_grouped the body the limits table wants, as this transaction sees it, and
-- marks the jobs already there that it now wants; reports whether the body changed
-- (and sets skiplock.lanes_changed for the rest of the transaction when it did).
-- Takes the schema's lanes lock first, so that two transactions changing limits
-- write the function one after the other, each from the limits the other committed.
CREATE FUNCTION {{schema}}.lanes_refresh() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  body text;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('skiplock.lanes.{{schema}}', 0));
  SELECT CASE
           WHEN bool_or(l.scope = 'kind') THEN 'SELECT true'
           WHEN count(*) = 0 THEN 'SELECT false'
           ELSE format('SELECT queue = ANY (%L::text[])', array_agg(DISTINCT l.target ORDER BY l.target))
         END
  INTO body FROM {{schema}}.limits l;
  IF body = (SELECT p.prosrc FROM pg_proc p WHERE p.oid = '{{schema}}.job_grouped(text)'::regprocedure) THEN
    RETURN false;
  END IF;
  EXECUTE format('CREATE OR REPLACE FUNCTION {{schema}}.job_grouped(queue text) RETURNS boolean '
                 'LANGUAGE sql STABLE PARALLEL SAFE AS %L', body);
  -- Read by the client before it commits (LimitSet): only a change of the body needs
  -- lanes_settle after the commit.
  PERFORM set_config('skiplock.lanes_changed', 'on', true);
  UPDATE {{schema}}.jobs SET grouped = true
  WHERE NOT grouped AND status <> 'succeeded' AND {{schema}}.job_grouped(queue);
  RETURN true;
END
$$;

-- The limits' trigger. In a transaction of a higher isolation than READ COMMITTED the
-- lock would be taken after the snapshot, and a limit committed by another
-- transaction in between would be missing from the body: refused.
CREATE FUNCTION {{schema}}.limits_lanes() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'skiplock: limits are changed in READ COMMITTED transactions only (this one is %)',
      current_setting('transaction_isolation')
      USING ERRCODE = 'feature_not_supported',
            HINT = 'a transaction of a higher isolation reads the limits as of its start and could miss a limit set meanwhile';
  END IF;
  PERFORM {{schema}}.lanes_refresh();
  RETURN NULL;
END
$$;

-- After a change of limits has committed: waits until every transaction that holds
-- ROW EXCLUSIVE on jobs now has ended (an insert that marked its job with
-- job_grouped's previous body holds it since before the change committed: a statement
-- that takes the lock anew accepts the invalidation, and re-plans), then marks the
-- jobs job_grouped now wants that those transactions left unmarked. Returns how many
-- it marked. Waits without blocking anyone: it polls pg_locks, as CREATE INDEX
-- CONCURRENTLY waits for older transactions; a reader (a long report, a held
-- snapshot) is not waited for, a long transaction that wrote to jobs is. A prepared
-- transaction (two-phase commit) is not waited for: a job it inserted racing the
-- change stays out of the index (it is still claimed, through the head window).
CREATE FUNCTION {{schema}}.lanes_settle() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  holders text[];
  n bigint;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'skiplock: lanes_settle runs in a READ COMMITTED transaction only (this one is %)',
      current_setting('transaction_isolation')
      USING ERRCODE = 'feature_not_supported';
  END IF;
  SELECT array_agg(DISTINCT l.virtualtransaction) INTO holders
  FROM pg_locks l
  WHERE l.locktype = 'relation' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.relation = '{{schema}}.jobs'::regclass AND l.mode = 'RowExclusiveLock'
    AND l.pid IS DISTINCT FROM pg_backend_pid();
  WHILE holders IS NOT NULL AND EXISTS (
    SELECT 1 FROM pg_locks v WHERE v.locktype = 'virtualxid' AND v.virtualxid = ANY (holders)
  ) LOOP
    PERFORM pg_sleep(0.005);
  END LOOP;
  UPDATE {{schema}}.jobs SET grouped = true
  WHERE NOT grouped AND status <> 'succeeded' AND {{schema}}.job_grouped(queue);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;

-- After the functions: on an existing Citus schema (which takes the functions, not the
-- trigger), Citus refuses a function's creation after a parallel change of a
-- distributed table in the same transaction, which the new column is.
ALTER TABLE {{schema}}.jobs ADD COLUMN grouped boolean NOT NULL DEFAULT true;

-- The trigger, and the body for the limits already set (no job is unmarked yet:
-- nothing to settle). Not on the Citus layout (recognised by tx_lineage's
-- concurrency_key), which refuses limits.
DO $migration$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
             WHERE attrelid = '{{schema}}.tx_lineage'::regclass AND attname = 'concurrency_key' AND NOT attisdropped) THEN
    RETURN;
  END IF;
  CREATE TRIGGER limits_lanes AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {{schema}}.limits
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.limits_lanes();
  PERFORM {{schema}}.lanes_refresh();
END
$migration$;

-- The index itself, rebuilt with the new predicate: the limited claim's walk names
-- grouped. Existing rows are all grouped, so it holds what the old one held. A plain
-- CREATE INDEX makes writes to jobs wait for the build (a scan of the table), so on a
-- table of more than a million rows the old index is left in place — it still serves
-- the walk, whose conditions imply its predicate, and enqueues keep paying for it —
-- and a notice gives the statements that swap it without blocking writes.
DO $migration$
DECLARE
  rows real;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
             WHERE attrelid = '{{schema}}.tx_lineage'::regclass AND attname = 'concurrency_key' AND NOT attisdropped) THEN
    RETURN;
  END IF;
  SELECT coalesce(sum(greatest(c.reltuples, 0)), 0) INTO rows FROM pg_catalog.pg_class c
  WHERE c.oid = '{{schema}}.jobs'::regclass
     OR c.oid IN (SELECT i.inhrelid FROM pg_catalog.pg_inherits i WHERE i.inhparent = '{{schema}}.jobs'::regclass);
  IF rows > 1000000 THEN
    RAISE NOTICE 'skiplock: {{schema}}.jobs holds about % rows: jobs_group_ready_idx keeps its old definition. To stop plain enqueues paying for it without blocking writes, run (outside a transaction): CREATE INDEX CONCURRENTLY jobs_group_lane_idx ON {{schema}}.jobs (queue, kind, concurrency_key, priority DESC, run_at, id) WHERE status = ''pending'' AND grouped; DROP INDEX CONCURRENTLY {{schema}}.jobs_group_ready_idx; ALTER INDEX {{schema}}.jobs_group_lane_idx RENAME TO jobs_group_ready_idx; (on the partitioned layout, which CREATE INDEX CONCURRENTLY does not take, drop and create the index in a quiet moment instead)', rows::bigint;
    RETURN;
  END IF;
  DROP INDEX {{schema}}.jobs_group_ready_idx;
  CREATE INDEX jobs_group_ready_idx ON {{schema}}.jobs (queue, kind, concurrency_key, priority DESC, run_at, id)
    WHERE status = 'pending' AND grouped;
END
$migration$;
