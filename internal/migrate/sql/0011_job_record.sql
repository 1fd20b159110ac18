-- The job record an operator needs (the dashboard): tags, a handler's output, a
-- bounded history of attempts, and the id of the transaction that wrote the job and
-- each outbox event (lineage: everything one business transaction wrote).
--
-- txid columns are added without a default first and given one after, so existing
-- rows are not rewritten (a volatile default on ADD COLUMN rewrites the table) and
-- keep NULL rather than the migration's own transaction id.
ALTER TABLE {{schema}}.jobs
  ADD COLUMN tags text[],
  ADD COLUMN output jsonb,
  ADD COLUMN attempt_history jsonb,
  ADD COLUMN attempted_at timestamptz,
  ADD COLUMN txid xid8;
ALTER TABLE {{schema}}.jobs ALTER COLUMN txid SET DEFAULT pg_current_xact_id();
-- Only tagged jobs are in it, so untagged jobs pay nothing for it.
CREATE INDEX jobs_tags_idx ON {{schema}}.jobs USING gin (tags) WHERE tags IS NOT NULL;

ALTER TABLE {{schema}}.outbox ADD COLUMN txid xid8;
ALTER TABLE {{schema}}.outbox ALTER COLUMN txid SET DEFAULT pg_current_xact_id();

-- Lineage is looked up in this side table, not through an index on jobs.txid: every
-- claim and every completion rewrites a job row and inserts into every full index of
-- jobs, so an index on txid cost about 10% of the claim-and-complete throughput (B1,
-- scale 4: 54k → 48k jobs/s). Rows here are written once, at insert, by one
-- statement-level trigger per insert statement (COPY included), and pruned by
-- retention.
CREATE TABLE {{schema}}.tx_lineage (
  txid       xid8 NOT NULL,
  job_id     uuid,
  event_id   uuid,
  created_at timestamptz NOT NULL -- the row's created_at, so pruning follows the injected clock
);
CREATE INDEX tx_lineage_txid_idx ON {{schema}}.tx_lineage (txid);
CREATE INDEX tx_lineage_created_idx ON {{schema}}.tx_lineage USING brin (created_at);

CREATE FUNCTION {{schema}}.jobs_lineage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  INSERT INTO {{schema}}.tx_lineage (txid, job_id, created_at) SELECT pg_current_xact_id(), id, created_at FROM new_rows;
  RETURN NULL;
END
$$;

CREATE FUNCTION {{schema}}.outbox_lineage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  INSERT INTO {{schema}}.tx_lineage (txid, event_id, created_at) SELECT pg_current_xact_id(), id, created_at FROM new_rows;
  RETURN NULL;
END
$$;

-- (Re)creates the lineage trigger on jobs: here, and again by the conversion to the
-- partitioned layout, whose new parent table must carry it.
CREATE FUNCTION {{schema}}.install_lineage_trigger() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
  IF to_regclass('{{schema}}.jobs_legacy') IS NOT NULL THEN
    DROP TRIGGER IF EXISTS jobs_lineage ON {{schema}}.jobs_legacy;
  END IF;
  DROP TRIGGER IF EXISTS jobs_lineage ON {{schema}}.jobs;
  CREATE TRIGGER jobs_lineage AFTER INSERT ON {{schema}}.jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.jobs_lineage();
END
$$;

SELECT {{schema}}.install_lineage_trigger();

CREATE TRIGGER outbox_lineage AFTER INSERT ON {{schema}}.outbox
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.outbox_lineage();
