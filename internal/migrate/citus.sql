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
-- triggers are redefined the same way: a job holds (concurrency_key, kind, unique_key)
-- in the co-located job_unique shard of its key.
--
-- Deduplication and unique keys are therefore scoped by the key: the same key string
-- in two tenants is two jobs, and the store's holder lookups on this layout
-- (dedup_holders_citus, unique_holders_citus) name the key, so a skipped insert
-- reports the holder of its own key, never another tenant's.
--
-- What cannot hold its guarantee here is refused when a job is inserted, with an error
-- naming it (SQLSTATE 0A000, feature_not_supported), by jobs_citus_refuse:
--   flows and batches: a parent, its children and a batch's members may have other
--     keys, and the settlement locks and counts across them.
--
-- The small tables (queues, limits, limit_windows) become reference tables: a copy on
-- every node, so the claim's joins with them stay on one node. schedules, batches,
-- inbox, partitioning, job_dedup and schema_migrations stay plain tables on the
-- coordinator. The partitioned layout is refused (Go checks it before this runs).
SET LOCAL citus.enable_unsafe_triggers = on;
SET LOCAL citus.multi_shard_modify_mode = 'sequential';

-- An existing schema: unfinished flows and batches would settle across keys.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM {{schema}}.jobs
             WHERE (parent_id IS NOT NULL OR batch_id IS NOT NULL OR flow_open IS NOT NULL)
               AND status NOT IN ('succeeded', 'failed', 'cancelled')) THEN
    RAISE EXCEPTION 'skiplock: the Citus layout: {{schema}}.jobs holds unfinished flows or batches, which the layout does not support; let them finish (or cancel them) first'
      USING ERRCODE = 'feature_not_supported';
  END IF;
END
$$;

-- The triggers go while the rows are copied into the shards (a copy would fire them
-- on the worker nodes, before their side tables are distributed) and come back below.
DROP TRIGGER jobs_unique_claim ON {{schema}}.jobs;
DROP TRIGGER jobs_unique_track ON {{schema}}.jobs;
DROP TRIGGER jobs_unique_release ON {{schema}}.jobs;
DROP TRIGGER jobs_lineage ON {{schema}}.jobs;
DROP TRIGGER jobs_flow_note ON {{schema}}.jobs;
DROP TRIGGER jobs_flow_note_delete ON {{schema}}.jobs;
DROP TRIGGER jobs_flow_settle ON {{schema}}.jobs;
DROP TRIGGER jobs_flow_settle_delete ON {{schema}}.jobs;
DROP TRIGGER jobs_flow_cascade ON {{schema}}.jobs;
DROP TRIGGER outbox_lineage ON {{schema}}.outbox;

-- Limits are refused on this layout (a limit counts running jobs across keys), so the
-- trigger that keeps job_grouped in step with them (migration 0022) goes, and the
-- function says true: a job inserted here stays in jobs_group_ready_idx, as the
-- layout's own inserts (which do not call it) leave it.
DROP TRIGGER limits_lanes ON {{schema}}.limits;
CREATE OR REPLACE FUNCTION {{schema}}.job_grouped(queue text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT true $$;

-- Fair settings are refused here too, and the claim reads the jobs of every queue
-- through jobs_fair_idx (its range of one key), so the index holds every pending job
-- again, as before migration 0024: the queues' triggers that keep job_fair in step
-- with the fair queues go, the function says true, and the index drops its mark.
DROP TRIGGER queues_fair_lanes_insert ON {{schema}}.queues;
DROP TRIGGER queues_fair_lanes_update ON {{schema}}.queues;
DROP TRIGGER queues_fair_lanes_delete ON {{schema}}.queues;
DROP TRIGGER queues_fair_lanes_truncate ON {{schema}}.queues;
CREATE OR REPLACE FUNCTION {{schema}}.job_fair(queue text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT true $$;
UPDATE {{schema}}.jobs SET fair_indexed = true WHERE NOT fair_indexed;
DROP INDEX {{schema}}.jobs_fair_idx;
CREATE INDEX jobs_fair_idx ON {{schema}}.jobs (queue, concurrency_key, priority DESC, run_at, id)
  WHERE status = 'pending';

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

-- A statement's lineage written as one row of ids (job_ids, migration 0021) becomes a
-- row per job, as this layout writes it, so that each can take its job's key below.
INSERT INTO {{schema}}.tx_lineage (txid, job_id, created_at)
SELECT l.txid, x.id, l.created_at FROM {{schema}}.tx_lineage l CROSS JOIN LATERAL unnest(l.job_ids) AS x(id)
WHERE l.job_ids IS NOT NULL;
DELETE FROM {{schema}}.tx_lineage WHERE job_ids IS NOT NULL;

-- Existing side rows take the key of their job, so they land beside it.
UPDATE {{schema}}.tx_lineage l SET concurrency_key = j.concurrency_key
FROM {{schema}}.jobs j WHERE l.job_id = j.id AND j.concurrency_key <> '';
UPDATE {{schema}}.job_unique u SET concurrency_key = j.concurrency_key
FROM {{schema}}.jobs j WHERE u.job_id = j.id AND j.concurrency_key <> '';

-- The lineage rows of a statement's inserts, on the node and shard of their key. The
-- transaction id is the row's txid column (set where the insert was planned, the
-- coordinator), not the worker's own.
--
-- The trigger runs on the shard of jobs (or outbox) that took the rows, and writes the
-- co-located shard of tx_lineage on the same node by its own name, as one local
-- insert from the transition table. Not through the distributed name: an insert into
-- a distributed table, run from a trigger on a worker node, is a distributed query,
-- planned and executed by Citus there, and the worker backend that serves the
-- coordinator's connection kept ~55 KB per such call until that connection closed
-- (TestCitusWorkerMemoryPerJob). The shard is looked up at each call in the node's
-- Citus metadata (get_shard_id_for_distribution_column, a cache read), never stored: a
-- shard moved by the rebalancer keeps its name, a split one gets new names, and the
-- lookup follows either. Every row of a statement's transition table is in one shard
-- of jobs, so one row's key names the shard of all of them.
--
-- citus_colocated_shard has no SET clause so that it is inlined into its callers,
-- which run with search_path = pg_catalog.
CREATE FUNCTION {{schema}}.citus_colocated_shard(rel regclass, key text) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT pg_catalog.shard_name(rel, pg_catalog.get_shard_id_for_distribution_column(rel, key))
$$;

CREATE OR REPLACE FUNCTION {{schema}}.jobs_lineage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  k text;
BEGIN
  SELECT concurrency_key INTO k FROM new_rows LIMIT 1;
  IF FOUND THEN
    EXECUTE format('INSERT INTO %s (txid, job_id, created_at, concurrency_key) '
                   'SELECT coalesce(txid, pg_current_xact_id()), id, created_at, concurrency_key FROM new_rows',
                   {{schema}}.citus_colocated_shard('{{schema}}.tx_lineage', k));
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.outbox_lineage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  k text;
BEGIN
  SELECT concurrency_key INTO k FROM new_rows LIMIT 1;
  IF FOUND THEN
    EXECUTE format('INSERT INTO %s (txid, event_id, created_at, concurrency_key) '
                   'SELECT coalesce(txid, pg_current_xact_id()), id, created_at, concurrency_key FROM new_rows',
                   {{schema}}.citus_colocated_shard('{{schema}}.tx_lineage', k));
  END IF;
  RETURN NULL;
END
$$;

-- The unique-key triggers of 0009_unique.sql, keyed: the side row is written to,
-- and released from, the shard of the job's own key.
CREATE OR REPLACE FUNCTION {{schema}}.jobs_unique_claim() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  IF NEW.status = ANY (NEW.unique_states) THEN
    INSERT INTO {{schema}}.job_unique (concurrency_key, kind, unique_key, job_id)
    VALUES (NEW.concurrency_key, NEW.kind, NEW.unique_key, NEW.id)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.jobs_unique_track() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  IF OLD.status = ANY (OLD.unique_states) AND NOT (NEW.status = ANY (NEW.unique_states)) THEN
    DELETE FROM {{schema}}.job_unique
    WHERE concurrency_key = OLD.concurrency_key AND kind = OLD.kind AND unique_key = OLD.unique_key AND job_id = OLD.id;
  ELSIF NEW.status = ANY (NEW.unique_states) AND NOT (OLD.status = ANY (OLD.unique_states)) THEN
    INSERT INTO {{schema}}.job_unique (concurrency_key, kind, unique_key, job_id)
    VALUES (NEW.concurrency_key, NEW.kind, NEW.unique_key, NEW.id)
    ON CONFLICT DO NOTHING;
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.jobs_unique_release() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  DELETE FROM {{schema}}.job_unique
  WHERE concurrency_key = OLD.concurrency_key AND kind = OLD.kind AND unique_key = OLD.unique_key AND job_id = OLD.id;
  RETURN NULL;
END
$$;

-- The SQL enqueue() inserts its jobs under the key '' (it takes no key); its lookup of
-- a deduplication key's holder names that key, so it finds the holder its insert
-- conflicted with (a router query), never another tenant's job of the same key string.
-- The function is 0005's, with that one condition added; the edit fails loudly should
-- the line it changes ever move.
DO $$
DECLARE
  def   text := pg_get_functiondef('{{schema}}.enqueue(text, jsonb, text, integer, timestamptz, integer, text)'::regprocedure);
  keyed text;
BEGIN
  keyed := replace(def, 'WHERE j.kind = enqueue.kind AND j.deduplication_key = enqueue.deduplication_key;',
                        'WHERE j.concurrency_key = '''' AND j.kind = enqueue.kind AND j.deduplication_key = enqueue.deduplication_key;');
  IF keyed = def THEN
    RAISE EXCEPTION 'skiplock: the Citus layout: enqueue()''s lookup of a deduplication key''s holder was not found to scope it by the key';
  END IF;
  EXECUTE keyed;
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
  END IF;
  RAISE EXCEPTION 'skiplock: % are not supported on the Citus layout yet (job of kind %)', feature, to_json(NEW.kind)
    USING ERRCODE = 'feature_not_supported', HINT = 'see docs/citus.md, "What works on Citus"';
END
$$;

-- The workers' statements on this layout (internal/store/citusclaim.go) are router
-- queries: each names one key. Citus evaluates a STABLE function whose arguments are
-- all parameters on the coordinator before it sends the statement to the node of the
-- key, but refuses one inside CASE or COALESCE, and one applied to columns in an
-- UPDATE. citus_clock is the statement's time (the injected clock's reading, or the
-- coordinator's now()), a constant by the time the statement reaches the node;
-- citus_after and citus_history are the finish's and the reclaim's per-row
-- arithmetic, fixed to UTC so that they are immutable in fact as well as in name.
CREATE FUNCTION {{schema}}.citus_clock(at timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$ SELECT coalesce(at, now()) $$;

CREATE FUNCTION {{schema}}.citus_after(at timestamptz, us bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog SET TimeZone = 'UTC'
AS $$ SELECT at + us * interval '1 microsecond' $$;

CREATE FUNCTION {{schema}}.citus_history(h jsonb, attempt int, started timestamptz, finished timestamptz,
  worker text, outcome text, err text) RETURNS jsonb
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog SET TimeZone = 'UTC' AS $$
  SELECT jsonb_path_query_array(coalesce(h, '[]'::jsonb) || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
    'attempt', attempt, 'started_at', started, 'finished_at', finished, 'worker_id', worker, 'outcome', outcome, 'error', err))),
    '$[last - 19 to last]')
$$;

-- Which keys have pending jobs, per queue: what a worker walks to spread its claims
-- over keys (each claim names one key), instead of reading the jobs themselves. One
-- row per (key, queue) in the shard of the key. The outbox's keys with unpublished
-- events are listed under the queue chr(1) || 'outbox', a name no queue can have (a
-- queue's name has no control characters), for the relay. A job that becomes pending (inserted,
-- retried, reclaimed, snoozed) makes sure its row is there and holds it (FOR KEY
-- SHARE) until its transaction ends; a worker whose claim of a key finds nothing
-- removes the row in a transaction that first locks it (FOR UPDATE SKIP LOCKED: never
-- while a pending job of the key is being written) and then checks, with a snapshot
-- taken after the lock, that the key has no pending job (Store.CitusKeyIdle).
--
-- run_at is no later than the run_at of every pending job of the key and queue (NULL:
-- due): the walk skips a key until then, so a key whose jobs are all scheduled for
-- later costs no claim that finds nothing on each pass. A job made pending with an
-- earlier run_at (inserted, retried, snoozed, reclaimed, or its run_at moved) lowers
-- it under the row's lock; a worker whose claim of the key finds nothing raises it to
-- the key's earliest pending run_at, under the same lock as the removal, and only when
-- no pending job of the key is due (Store.CitusKeyIdle).
CREATE TABLE {{schema}}.citus_keys (
  concurrency_key text NOT NULL,
  queue           text NOT NULL,
  run_at          timestamptz,
  PRIMARY KEY (concurrency_key, queue)
);
CREATE INDEX citus_keys_queue_idx ON {{schema}}.citus_keys (queue, concurrency_key) INCLUDE (run_at);
INSERT INTO {{schema}}.citus_keys (concurrency_key, queue, run_at)
SELECT concurrency_key, queue, min(run_at) FROM {{schema}}.jobs WHERE status = 'pending' GROUP BY 1, 2
UNION ALL
SELECT DISTINCT concurrency_key, chr(1) || 'outbox', NULL::timestamptz FROM {{schema}}.outbox WHERE published_at IS NULL AND dead_at IS NULL;

-- The trigger of jobs (the row's queue) and of the outbox (its argument, the outbox's
-- queue name).
--
-- It writes the co-located shard of citus_keys on its own node by name, as the
-- lineage triggers do (above: a distributed query per call from a worker node kept
-- memory in the worker's backend per job).
CREATE FUNCTION {{schema}}.jobs_citus_key() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  q     text;
  at    timestamptz; -- the job's run_at; NULL for the outbox's events
  shard text := {{schema}}.citus_colocated_shard('{{schema}}.citus_keys', NEW.concurrency_key);
  k_at  timestamptz;
  n     bigint;
BEGIN
  IF TG_NARGS > 0 THEN
    q := chr(1) || TG_ARGV[0];
  ELSE
    q := NEW.queue;
    at := NEW.run_at;
  END IF;
  LOOP
    EXECUTE format('SELECT run_at FROM %s WHERE concurrency_key = $1 AND queue = $2 FOR KEY SHARE', shard)
      INTO k_at USING NEW.concurrency_key, q;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
      IF k_at > at THEN
        EXECUTE format('UPDATE %s SET run_at = $3 WHERE concurrency_key = $1 AND queue = $2 AND run_at > $3', shard)
          USING NEW.concurrency_key, q, at;
      END IF;
      EXIT;
    END IF;
    EXECUTE format('INSERT INTO %s (concurrency_key, queue, run_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', shard)
      USING NEW.concurrency_key, q, at;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXIT WHEN n > 0;
  END LOOP;
  RETURN NULL;
END
$$;

SELECT create_distributed_table('{{schema}}.jobs', 'concurrency_key');
SELECT create_distributed_table('{{schema}}.outbox', 'concurrency_key', colocate_with => '{{schema}}.jobs');
SELECT create_distributed_table('{{schema}}.tx_lineage', 'concurrency_key', colocate_with => '{{schema}}.jobs');
SELECT create_distributed_table('{{schema}}.job_unique', 'concurrency_key', colocate_with => '{{schema}}.jobs');
SELECT create_distributed_table('{{schema}}.citus_keys', 'concurrency_key', colocate_with => '{{schema}}.jobs');

-- The triggers again, now on the distributed tables (Citus creates them on every
-- shard), and the refusal.
SELECT {{schema}}.install_unique_triggers();
SELECT {{schema}}.install_lineage_trigger();
SELECT {{schema}}.install_flow_triggers();
CREATE TRIGGER outbox_lineage AFTER INSERT ON {{schema}}.outbox
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.outbox_lineage();
CREATE TRIGGER jobs_citus_key AFTER INSERT OR UPDATE OF status, run_at ON {{schema}}.jobs FOR EACH ROW
  WHEN (NEW.status = 'pending') EXECUTE FUNCTION {{schema}}.jobs_citus_key();
CREATE TRIGGER outbox_citus_key AFTER INSERT OR UPDATE OF dead_at ON {{schema}}.outbox FOR EACH ROW
  WHEN (NEW.published_at IS NULL AND NEW.dead_at IS NULL) EXECUTE FUNCTION {{schema}}.jobs_citus_key('outbox');
CREATE TRIGGER jobs_citus_refuse BEFORE INSERT ON {{schema}}.jobs FOR EACH ROW
  WHEN (NEW.parent_id IS NOT NULL OR NEW.flow_open IS NOT NULL OR NEW.batch_id IS NOT NULL)
  EXECUTE FUNCTION {{schema}}.jobs_citus_refuse();

SELECT create_reference_table('{{schema}}.queues');
SELECT create_reference_table('{{schema}}.limits');
SELECT create_reference_table('{{schema}}.limit_windows');

-- An existing schema's rows were copied into the shards; the coordinator's own copies
-- are hidden behind the distributed tables from now on, and only take space.
SELECT truncate_local_data_after_distributing_table('{{schema}}.jobs');
SELECT truncate_local_data_after_distributing_table('{{schema}}.outbox');
SELECT truncate_local_data_after_distributing_table('{{schema}}.tx_lineage');
SELECT truncate_local_data_after_distributing_table('{{schema}}.job_unique');
SELECT truncate_local_data_after_distributing_table('{{schema}}.citus_keys');
