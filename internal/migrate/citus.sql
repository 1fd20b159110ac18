-- skiplock's distributed layout for Citus (docs/citus.md). Not a numbered migration: an
-- option (skiplock.MigrateOpts.Citus, `skiplock migrate up --citus`) applied after every
-- numbered migration, in one transaction, on the coordinator of a Citus cluster. The
-- single-node layout is untouched by it.
--
-- The distribution column is jobs.concurrency_key: the per-tenant key skiplock already
-- has (limits partition by it, fairness spreads claims over it). A user's own tables
-- distributed by the same key, as text and co-located with jobs, keep an EnqueueTx on
-- the node that holds their business rows.
--
-- Citus requires every primary key and unique index of a distributed table to contain
-- the distribution column, so the layout changes exactly those:
--   jobs        PRIMARY KEY (id) → (id, concurrency_key); ids stay unique (uuid_v7),
--               and a lookup by id still descends the index by its leading column.
--   jobs_dedup_idx (kind, deduplication_key) → (concurrency_key, kind,
--               deduplication_key): a deduplication key is scoped by the key.
--   outbox      gains concurrency_key (text NOT NULL DEFAULT '', a catalog-only change);
--               PRIMARY KEY (id) → (id, concurrency_key).
--   tx_lineage  gains concurrency_key, filled from the inserted rows; no key of its own.
--   job_unique  gains concurrency_key; PRIMARY KEY (kind, unique_key) →
--               (concurrency_key, kind, unique_key).
-- jobs, outbox, tx_lineage and job_unique are then distributed by concurrency_key,
-- co-located (one shard of each per hash range, on one node).
--
-- Triggers on a distributed table run on the worker node that holds the shard, so the
-- lineage trigger functions are redefined to write the co-located tx_lineage shard of
-- the same key. Citus calls such triggers unsafe because a trigger can reach other
-- nodes: these reach only rows of their own key, on their own node. The unique-key
-- triggers are unreachable while unique keys are refused (below); job_unique is laid
-- out for the step that scopes them by the key.
--
-- What cannot hold its guarantee here is refused when a job is inserted, with an error
-- naming it (SQLSTATE 0A000, feature_not_supported), by jobs_citus_refuse:
--   flows and batches: a parent, its children and a batch's members may have other
--     keys, and the settlement locks and counts across them;
--   deduplication and unique keys: the layout scopes them by concurrency_key, but the
--     statements that name a key's holder do not take the key yet (docs/citus.md, the
--     plan table), so a holder of another tenant could be reported.
--
-- The small tables (queues, limits, limit_windows) become reference tables: a copy on
-- every node, so the claim's joins with them stay on one node. schedules, batches,
-- inbox, partitioning, job_dedup and schema_migrations stay plain tables on the
-- coordinator. The partitioned layout is refused (Go checks it before this runs).
SET LOCAL citus.enable_unsafe_triggers = on;
SET LOCAL citus.multi_shard_modify_mode = 'sequential';

ALTER TABLE {{schema}}.jobs DROP CONSTRAINT jobs_pkey;
ALTER TABLE {{schema}}.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id, concurrency_key);
DROP INDEX {{schema}}.jobs_dedup_idx;
CREATE UNIQUE INDEX jobs_dedup_idx ON {{schema}}.jobs (concurrency_key, kind, deduplication_key)
  WHERE deduplication_key IS NOT NULL;

ALTER TABLE {{schema}}.outbox ADD COLUMN concurrency_key text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE {{schema}}.outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (id, concurrency_key);

ALTER TABLE {{schema}}.tx_lineage ADD COLUMN concurrency_key text NOT NULL DEFAULT '';

ALTER TABLE {{schema}}.job_unique ADD COLUMN concurrency_key text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.job_unique DROP CONSTRAINT job_unique_pkey;
ALTER TABLE {{schema}}.job_unique ADD CONSTRAINT job_unique_pkey PRIMARY KEY (concurrency_key, kind, unique_key);

-- The lineage rows of a statement's inserts, on the node and shard of their key. The
-- transaction id is the row's txid column (set where the insert was planned, the
-- coordinator), not the worker's own. Row by row: the worker cannot plan an insert
-- into a distributed table that reads the transition table (Citus reports "could not
-- find named tuplestore"), while each one-row insert is a router insert into the
-- co-located shard.
CREATE OR REPLACE FUNCTION {{schema}}.jobs_lineage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT txid, id, created_at, concurrency_key FROM new_rows LOOP
    INSERT INTO {{schema}}.tx_lineage (txid, job_id, created_at, concurrency_key)
    VALUES (coalesce(r.txid, pg_current_xact_id()), r.id, r.created_at, r.concurrency_key);
  END LOOP;
  RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.outbox_lineage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT txid, id, created_at, concurrency_key FROM new_rows LOOP
    INSERT INTO {{schema}}.tx_lineage (txid, event_id, created_at, concurrency_key)
    VALUES (coalesce(r.txid, pg_current_xact_id()), r.id, r.created_at, r.concurrency_key);
  END LOOP;
  RETURN NULL;
END
$$;

CREATE FUNCTION {{schema}}.jobs_citus_refuse() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
DECLARE
  feature text;
BEGIN
  IF NEW.parent_id IS NOT NULL OR NEW.flow_open IS NOT NULL THEN
    feature := 'flows (a parent job and its children)';
  ELSIF NEW.batch_id IS NOT NULL THEN
    feature := 'batches';
  ELSIF NEW.deduplication_key IS NOT NULL THEN
    feature := 'deduplication keys';
  ELSIF NEW.unique_key IS NOT NULL THEN
    feature := 'unique jobs';
  END IF;
  RAISE EXCEPTION 'skiplock: % are not supported on the Citus layout yet (job of kind %)', feature, to_json(NEW.kind)
    USING ERRCODE = 'feature_not_supported', HINT = 'see docs/citus.md, "What works on Citus"';
END
$$;

CREATE TRIGGER jobs_citus_refuse BEFORE INSERT ON {{schema}}.jobs FOR EACH ROW
  WHEN (NEW.parent_id IS NOT NULL OR NEW.flow_open IS NOT NULL OR NEW.batch_id IS NOT NULL
        OR NEW.deduplication_key IS NOT NULL OR NEW.unique_key IS NOT NULL)
  EXECUTE FUNCTION {{schema}}.jobs_citus_refuse();

SELECT create_distributed_table('{{schema}}.jobs', 'concurrency_key');
SELECT create_distributed_table('{{schema}}.outbox', 'concurrency_key', colocate_with => '{{schema}}.jobs');
SELECT create_distributed_table('{{schema}}.tx_lineage', 'concurrency_key', colocate_with => '{{schema}}.jobs');
SELECT create_distributed_table('{{schema}}.job_unique', 'concurrency_key', colocate_with => '{{schema}}.jobs');

SELECT create_reference_table('{{schema}}.queues');
SELECT create_reference_table('{{schema}}.limits');
SELECT create_reference_table('{{schema}}.limit_windows');
