-- The lineage triggers without their SET clause (docs/enqueue_cost.md). Every insert
-- statement into jobs or outbox runs its lineage trigger once; a function with a SET
-- clause saves, sets and restores search_path around every call, and a changed
-- search_path makes the next name lookup rebuild the search path: E1 measured it at
-- about as much server CPU as the rest of the lineage row. The bodies name everything
-- by schema (the table, pg_catalog's function) and read only the transition table,
-- which is looked up before any schema, so the caller's search_path cannot reach
-- them, as SECURITY DEFINER requires. CREATE OR REPLACE FUNCTION takes no lock on the
-- tables: safe on a live queue. The Citus layout keeps its own row-by-row versions
-- (internal/migrate/citus.sql), recognised by tx_lineage's concurrency_key column.
DO $migration$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
             WHERE attrelid = '{{schema}}.tx_lineage'::regclass AND attname = 'concurrency_key' AND NOT attisdropped) THEN
    RETURN;
  END IF;
  CREATE OR REPLACE FUNCTION {{schema}}.jobs_lineage() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER AS $f$
  BEGIN
    INSERT INTO {{schema}}.tx_lineage (txid, job_id, created_at)
    SELECT pg_catalog.pg_current_xact_id(), id, created_at FROM new_rows;
    RETURN NULL;
  END
  $f$;
  CREATE OR REPLACE FUNCTION {{schema}}.outbox_lineage() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER AS $f$
  BEGIN
    INSERT INTO {{schema}}.tx_lineage (txid, event_id, created_at)
    SELECT pg_catalog.pg_current_xact_id(), id, created_at FROM new_rows;
    RETURN NULL;
  END
  $f$;
END
$migration$;
