-- A batch's lineage in one row (issue #49; docs/enqueue_cost.md, "A batch's lineage in one row").
--
-- The jobs_lineage statement trigger wrote one tx_lineage row per inserted job: for a
-- COPY or a multi-row insert of 1,000 jobs, 1,000 heap rows and 1,000 entries in each
-- of the table's two indexes, about 155 bytes of WAL and a sixth of the server's time
-- per job (the jobs' own row and indexes being the rest). A statement that inserts
-- more than one job now records one row holding all their ids (job_ids); a one-job
-- statement records its job_id as before. The readers (JobsByTx, JobsByTxPage) read
-- both forms, so rows written before this migration stay valid.
--
-- job_ids is stored out of line without compression (STORAGE EXTERNAL): the ids of a
-- batch differ in their random bits and pglz gave up after trying on every one, at a
-- cost in CPU and no saving.
ALTER TABLE {{schema}}.tx_lineage ADD COLUMN IF NOT EXISTS job_ids uuid[];

-- The Citus layout keeps its own row-by-row lineage functions (internal/migrate/
-- citus.sql; recognised by tx_lineage's concurrency_key column): job_ids stays NULL
-- there. The function names every operator and function by schema, as SECURITY
-- DEFINER requires (0019). CREATE OR REPLACE FUNCTION takes no lock on the tables; the
-- column's ADD (no default) and SET STORAGE change only the catalog, under a brief
-- exclusive lock on tx_lineage (an insert into jobs waits for it, not for a rewrite).
DO $migration$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
             WHERE attrelid = '{{schema}}.tx_lineage'::regclass AND attname = 'concurrency_key' AND NOT attisdropped) THEN
    RETURN;
  END IF;
  ALTER TABLE {{schema}}.tx_lineage ALTER COLUMN job_ids SET STORAGE EXTERNAL;
  CREATE OR REPLACE FUNCTION {{schema}}.jobs_lineage() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER AS $f$
  BEGIN
    INSERT INTO {{schema}}.tx_lineage (txid, job_id, job_ids, created_at)
    SELECT pg_catalog.pg_current_xact_id(),
           CASE WHEN a.n OPERATOR(pg_catalog.=) 1 THEN a.ids[1] END,
           CASE WHEN a.n OPERATOR(pg_catalog.>) 1 THEN a.ids END,
           a.at
    FROM (SELECT pg_catalog.count(*) AS n, pg_catalog.array_agg(r.id) AS ids, pg_catalog.max(r.created_at) AS at
          FROM new_rows r) a
    WHERE a.n OPERATOR(pg_catalog.>) 0;
    RETURN NULL;
  END
  $f$;
END
$migration$;
