-- jobs_fair_idx only for the jobs of fair queues (issue #49, docs/enqueue_cost.md
-- "The fair index for fair queues only"), on the pattern of migration 0022.
--
-- The index serves the fair claim (docs/fairness.md): its walk over a queue's
-- concurrency keys, each key's range of jobs, and the keys' listing. Every pending job
-- entered it, fair queue or not: ~104 B of WAL and a few µs of a one-by-one enqueue's
-- server time. Now a job enters it only when its column fair_indexed is true:
--
--   * fair_indexed defaults to true, so every writer that does not set it (COPY, the
--     SQL function enqueue of migration 0005, an older client, a user's own INSERT)
--     keeps its jobs in the index, as before. Existing rows read true (a
--     catalog-only column: no rewrite).
--   * skiplock's insert statements set it to job_fair(queue): a test of the queue
--     against a literal list of the fair queues (false while no queue is fair).
--     job_fair is a SQL function whose body is rewritten whenever a queue's fairness
--     changes (the triggers queues_fair_lanes below), so the planner inlines it into
--     the insert's plan: no table is read per enqueue. Replacing the function
--     invalidates every cached plan that inlined it; a statement revalidates its plan
--     after locking jobs, so an insert that still used the previous body held its lock
--     on jobs since before the new body committed.
--   * Unlike the group index (0022), the fair claim reads its queue's jobs through this
--     index only (the plain claims take nothing from a fair queue): a pending job of a
--     fair queue left out of it would never be claimed. So a queue made fair marks, in
--     the same transaction, the jobs already there that can still become pending (all
--     but the succeeded: a running job retried, snoozed or reclaimed, a waiting one
--     released, a failed or cancelled one retried by an operator); and lanes_settle(),
--     run after that transaction commits, waits for every transaction that holds ROW
--     EXCLUSIVE on jobs when it starts — the only ones that can still insert a job
--     under the previous body — and marks their jobs too. The client's QueueSetFair
--     runs both (the settle only when the body changed). A queue made fair keeps
--     queues.fair_unsettled (the transaction that made it fair) until a settle that
--     began after that commit has marked its jobs: should the settle not run (a client
--     that stopped between the two, a change by SQL), the lane settler of every
--     running client (a maintenance service) runs it within a minute. After making a
--     queue fair by SQL, run SELECT <schema>.lanes_settle() after the commit to settle
--     at once: until a settle, a job inserted racing the change is not claimed.
--   * A job keeps its mark for life: a retry, a snooze or a reclaim puts it back to
--     pending with the mark it had. A queue made plain again leaves its jobs marked
--     (they only cost their index entries while pending).
--
-- The Citus layout refuses fair settings, and its claim reads every queue's jobs
-- through this index: there the index keeps its old definition (an existing Citus
-- schema is left as it was; the layout, applied to a new one after this migration,
-- restores it: citus.sql), and the queues table has no trigger.

-- No queue's fairness changes while this migration runs (an older client's
-- QueueSetFair would fire no trigger): the lock is taken before anything reads the
-- queues.
LOCK TABLE {{schema}}.queues IN SHARE ROW EXCLUSIVE MODE;

-- Rewritten by fair_lanes_refresh; this first body is replaced below from the queues
-- already fair.
CREATE FUNCTION {{schema}}.job_fair(queue text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT true $$;

-- Gives job_fair the body the queues table wants, as this transaction sees it, and
-- marks the jobs already there that it now wants; reports whether the body changed
-- (and sets skiplock.lanes_changed for the rest of the transaction when it did).
-- Takes the schema's lanes lock first (the one lanes_refresh of 0022 takes), so that
-- two transactions changing fairness write the function one after the other, each
-- from the queues the other committed.
CREATE FUNCTION {{schema}}.fair_lanes_refresh() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  body text;
  added text[];
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('skiplock.lanes.{{schema}}', 0));
  SELECT CASE
           WHEN count(*) = 0 THEN 'SELECT false'
           ELSE format('SELECT queue = ANY (%L::text[])', array_agg(q.name ORDER BY q.name))
         END
  INTO body FROM {{schema}}.queues q WHERE q.fair;
  IF body = (SELECT p.prosrc FROM pg_proc p WHERE p.oid = '{{schema}}.job_fair(text)'::regprocedure) THEN
    RETURN false;
  END IF;
  -- The queues the previous body left out: inserts racing this change may leave
  -- their jobs unmarked, until a settle (lanes_settle clears the record).
  SELECT array_agg(q.name) INTO added FROM {{schema}}.queues q WHERE q.fair AND NOT {{schema}}.job_fair(q.name);
  UPDATE {{schema}}.queues SET fair_unsettled = pg_current_xact_id() WHERE name = ANY (added);
  EXECUTE format('CREATE OR REPLACE FUNCTION {{schema}}.job_fair(queue text) RETURNS boolean '
                 'LANGUAGE sql STABLE PARALLEL SAFE AS %L', body);
  -- Read by the client before it commits (QueueSetFair): a queue made fair needs
  -- lanes_settle after the commit.
  PERFORM set_config('skiplock.lanes_changed', 'on', true);
  UPDATE {{schema}}.jobs SET fair_indexed = true
  WHERE NOT fair_indexed AND status <> 'succeeded' AND {{schema}}.job_fair(queue);
  RETURN true;
END
$$;

-- The queues' triggers (below): a row whose fairness changed, or a fair queue's row
-- renamed, added or deleted. In a transaction of a higher isolation than READ
-- COMMITTED the lock would be taken after the snapshot, and a queue made fair by
-- another transaction in between would be missing from the body: refused.
CREATE FUNCTION {{schema}}.queues_fair_lanes() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'skiplock: a queue''s fairness is changed in READ COMMITTED transactions only (this one is %)',
      current_setting('transaction_isolation')
      USING ERRCODE = 'feature_not_supported',
            HINT = 'a transaction of a higher isolation reads the queues as of its start and could miss a queue made fair meanwhile';
  END IF;
  PERFORM {{schema}}.fair_lanes_refresh();
  RETURN NULL;
END
$$;

-- lanes_settle (0022) marks the jobs of both lanes: after a change of limits or of a
-- queue's fairness has committed, it waits until every transaction that holds ROW
-- EXCLUSIVE on jobs now has ended (an insert that marked its job with the previous
-- body of job_grouped or job_fair holds it since before the change committed: a
-- statement that takes the lock anew accepts the invalidation, and re-plans), then
-- marks the jobs job_grouped and job_fair now want that those transactions left
-- unmarked, in one pass over jobs. Returns how many rows it marked. Waits without
-- blocking anyone: it polls pg_locks, as CREATE INDEX CONCURRENTLY waits for older
-- transactions; a reader (a long report, a held snapshot) is not waited for, a long
-- transaction that wrote to jobs is. A prepared transaction (two-phase commit) is not
-- waited for: a job it inserted racing a queue made fair stays out of jobs_fair_idx
-- until the next settle (run SELECT <schema>.lanes_settle() once it is committed).
CREATE OR REPLACE FUNCTION {{schema}}.lanes_settle() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  holders text[];
  n bigint;
  unsettled_names text[];
  unsettled_by xid8[];
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'skiplock: lanes_settle runs in a READ COMMITTED transaction only (this one is %)',
      current_setting('transaction_isolation')
      USING ERRCODE = 'feature_not_supported';
  END IF;
  -- The queues made fair by transactions committed before the holders are read: this
  -- settle marks what their racing inserts left, and then clears their record (a
  -- queue made fair again meanwhile keeps the newer one).
  SELECT array_agg(q.name), array_agg(q.fair_unsettled) INTO unsettled_names, unsettled_by
  FROM {{schema}}.queues q WHERE q.fair_unsettled IS NOT NULL;
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
  -- The queues' rows first: a change of fairness locks its row before it marks jobs.
  UPDATE {{schema}}.queues q SET fair_unsettled = NULL
  FROM unnest(unsettled_names, unsettled_by) AS u(name, by_xact)
  WHERE q.name = u.name AND q.fair_unsettled = u.by_xact;
  UPDATE {{schema}}.jobs
  SET grouped = grouped OR {{schema}}.job_grouped(queue),
      fair_indexed = fair_indexed OR {{schema}}.job_fair(queue)
  WHERE status <> 'succeeded'
    AND ((NOT grouped AND {{schema}}.job_grouped(queue)) OR (NOT fair_indexed AND {{schema}}.job_fair(queue)));
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;

-- After the functions: on an existing Citus schema (which takes the functions, not the
-- triggers), Citus refuses a function's creation after a parallel change of a
-- distributed table in the same transaction, which the new column is.
ALTER TABLE {{schema}}.jobs ADD COLUMN fair_indexed boolean NOT NULL DEFAULT true;
-- The transaction that made the queue fair, until a settle that began after it
-- committed has marked the jobs inserts racing it left unmarked (lanes_settle).
ALTER TABLE {{schema}}.queues ADD COLUMN fair_unsettled xid8;

-- The triggers, and the body for the queues already fair (no job is unmarked yet:
-- nothing to settle). Not on the Citus layout (recognised by tx_lineage's
-- concurrency_key), which refuses fair settings: there job_fair stays true.
DO $migration$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
             WHERE attrelid = '{{schema}}.tx_lineage'::regclass AND attname = 'concurrency_key' AND NOT attisdropped) THEN
    RETURN;
  END IF;
  CREATE TRIGGER queues_fair_lanes_insert AFTER INSERT ON {{schema}}.queues
    FOR EACH ROW WHEN (NEW.fair) EXECUTE FUNCTION {{schema}}.queues_fair_lanes();
  CREATE TRIGGER queues_fair_lanes_update AFTER UPDATE OF fair, name ON {{schema}}.queues
    FOR EACH ROW WHEN (OLD.fair IS DISTINCT FROM NEW.fair OR (NEW.fair AND OLD.name IS DISTINCT FROM NEW.name))
    EXECUTE FUNCTION {{schema}}.queues_fair_lanes();
  CREATE TRIGGER queues_fair_lanes_delete AFTER DELETE ON {{schema}}.queues
    FOR EACH ROW WHEN (OLD.fair) EXECUTE FUNCTION {{schema}}.queues_fair_lanes();
  CREATE TRIGGER queues_fair_lanes_truncate AFTER TRUNCATE ON {{schema}}.queues
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.queues_fair_lanes();
  PERFORM {{schema}}.fair_lanes_refresh();
END
$migration$;

-- The index itself, rebuilt with the new predicate: the fair claim's statements name
-- fair_indexed. Existing rows are all marked, so it holds what the old one held. A
-- plain CREATE INDEX makes writes to jobs wait for the build (a scan of the table), so
-- on a table of more than a million rows the old index is left in place — it still
-- serves the fair claim, whose conditions imply its predicate (the mark becomes a
-- filter), and enqueues keep paying for it — and a notice gives the statements that
-- swap it without blocking writes.
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
    RAISE NOTICE 'skiplock: {{schema}}.jobs holds about % rows: jobs_fair_idx keeps its old definition. To stop the jobs of plain queues paying for it without blocking writes, run (outside a transaction): CREATE INDEX CONCURRENTLY jobs_fair_lane_idx ON {{schema}}.jobs (queue, concurrency_key, priority DESC, run_at, id) WHERE status = ''pending'' AND fair_indexed; DROP INDEX CONCURRENTLY {{schema}}.jobs_fair_idx; ALTER INDEX {{schema}}.jobs_fair_lane_idx RENAME TO jobs_fair_idx; (on the partitioned layout, which CREATE INDEX CONCURRENTLY does not take, drop and create the index in a quiet moment instead)', rows::bigint;
    RETURN;
  END IF;
  DROP INDEX {{schema}}.jobs_fair_idx;
  CREATE INDEX jobs_fair_idx ON {{schema}}.jobs (queue, concurrency_key, priority DESC, run_at, id)
    WHERE status = 'pending' AND fair_indexed;
END
$migration$;
