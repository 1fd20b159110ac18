-- Two changes for issue #49 (docs/enqueue_cost.md, docs/benchmarks.md "W14").
--
-- 1. A transaction that wrote one job and nothing else records no lineage row. Its
-- lineage is the job itself (the dashboard's /tx view finds it from the job's page);
-- the tx_lineage row, its two index entries and the trigger call were a quarter of the
-- WAL of a one-by-one enqueue. The client's own one-job insert on its pool sets the
-- transaction-local setting skiplock.lineage to 'off' before its row is written
-- (internal/store/enqueue.go, soloSetting); the statement trigger's WHEN reads it once
-- per statement. Every other insert — a caller's transaction (EnqueueTx), a batch,
-- COPY, a flow, an outbox event — records its lineage as before. The Citus layout
-- keeps its own lineage functions (recognised by tx_lineage's concurrency_key) and its
-- trigger is left as it is.
CREATE OR REPLACE FUNCTION {{schema}}.install_lineage_trigger() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
  IF to_regclass('{{schema}}.jobs_legacy') IS NOT NULL THEN
    DROP TRIGGER IF EXISTS jobs_lineage ON {{schema}}.jobs_legacy;
  END IF;
  DROP TRIGGER IF EXISTS jobs_lineage ON {{schema}}.jobs;
  CREATE TRIGGER jobs_lineage AFTER INSERT ON {{schema}}.jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (pg_catalog.current_setting('skiplock.lineage', true) IS DISTINCT FROM 'off')
    EXECUTE FUNCTION {{schema}}.jobs_lineage();
END
$$;

DO $migration$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                 WHERE attrelid = '{{schema}}.tx_lineage'::regclass AND attname = 'concurrency_key' AND NOT attisdropped) THEN
    PERFORM {{schema}}.install_lineage_trigger();
  END IF;
END
$migration$;

-- 2. Autovacuum sized for a queue table (W14, "hours without drift"). Every job is
-- inserted, updated at its claim and its end (neither update is HOT: the status is in
-- the claim indexes' predicates) and deleted by retention, so jobs makes about three
-- dead tuples per job. PostgreSQL's defaults wait for dead tuples worth 20% of the
-- table and then vacuum at 2 ms of sleep per 200 cost units: at thousands of jobs a
-- second the pass cannot keep up, dead tuples and the table grow without bound, and
-- every claim walks more dead index entries (W14's control on 2 cores: 5.1 million
-- dead tuples, 2.0 GB and a 1 s pickup p99 after 30 minutes). Here a pass starts after
-- 1% of the table (at least 1,000 rows) and runs unthrottled; a table that only grows
-- (a backlog being enqueued) is vacuumed every 5% of inserts, so its visibility map
-- stays current. Storage parameters take a SHARE UPDATE EXCLUSIVE lock only: safe on
-- a live queue. An operator's own values can replace them (ALTER TABLE … SET), and the
-- partitioned layout copies them to every partition it creates. The Citus layout is
-- left as it is here too (its shards are tuned on the worker nodes).
DO $migration$
DECLARE
  opts CONSTANT text := 'autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, '
    'autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_insert_threshold = 10000, '
    'autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0';
  rel regclass;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
             WHERE attrelid = '{{schema}}.tx_lineage'::regclass AND attname = 'concurrency_key' AND NOT attisdropped) THEN
    RETURN;
  END IF;
  FOR rel IN
    -- jobs and outbox, or, when jobs is partitioned, each of its partitions (a
    -- partitioned table itself takes no storage parameters).
    SELECT c.oid::regclass FROM pg_catalog.pg_class c
    WHERE c.oid IN ('{{schema}}.jobs'::regclass, '{{schema}}.outbox'::regclass, '{{schema}}.tx_lineage'::regclass)
      AND c.relkind = 'r'
    UNION ALL
    SELECT i.inhrelid::regclass FROM pg_catalog.pg_inherits i
    JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid AND c.relkind = 'r'
    WHERE i.inhparent = '{{schema}}.jobs'::regclass
  LOOP
    EXECUTE pg_catalog.format('ALTER TABLE %s SET (%s)', rel, opts);
  END LOOP;
END
$migration$;
