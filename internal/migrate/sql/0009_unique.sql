-- Uniqueness by state and by period (EnqueueOpts.Unique). A job enqueued with a unique
-- key holds (kind, unique_key) while its status is one of its unique_states; when it
-- leaves them (succeeds, say) the key is free for a new job. unique_key already carries
-- the period bucket when the uniqueness is per period.
--
-- The keys live in a side table kept by triggers, in both layouts: a partial unique
-- index on jobs could not include the partition key of the partitioned layout, and
-- one mechanism for both keeps them alike. Every trigger has a WHEN clause on
-- unique_key, so jobs without a unique key (the common case, and every job of the
-- claim and completion hot path) pay only that test.
ALTER TABLE {{schema}}.jobs ADD COLUMN unique_key text, ADD COLUMN unique_states {{schema}}.job_status[];

CREATE TABLE {{schema}}.job_unique (
  kind       text NOT NULL,
  unique_key text NOT NULL,
  job_id     uuid NOT NULL,
  PRIMARY KEY (kind, unique_key)
);
CREATE INDEX job_unique_job_idx ON {{schema}}.job_unique (job_id);

-- BEFORE INSERT: take the key, or skip the row when another job holds it — which the
-- insert statements' ON CONFLICT DO NOTHING reports exactly like a conflict. A
-- concurrent insert of the same key waits on the side table's unique index for the
-- first to commit or roll back, so the check is race-free.
CREATE FUNCTION {{schema}}.jobs_unique_claim() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  IF NEW.status = ANY (NEW.unique_states) THEN
    INSERT INTO {{schema}}.job_unique (kind, unique_key, job_id)
    VALUES (NEW.kind, NEW.unique_key, NEW.id)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
  END IF;
  RETURN NEW;
END
$$;

-- AFTER UPDATE OF status: release the key when the job leaves its unique states; take
-- it again when it comes back (an operator's retry of a failed job) if it is free.
CREATE FUNCTION {{schema}}.jobs_unique_track() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  IF OLD.status = ANY (OLD.unique_states) AND NOT (NEW.status = ANY (NEW.unique_states)) THEN
    DELETE FROM {{schema}}.job_unique
    WHERE kind = OLD.kind AND unique_key = OLD.unique_key AND job_id = OLD.id;
  ELSIF NEW.status = ANY (NEW.unique_states) AND NOT (OLD.status = ANY (OLD.unique_states)) THEN
    INSERT INTO {{schema}}.job_unique (kind, unique_key, job_id)
    VALUES (NEW.kind, NEW.unique_key, NEW.id)
    ON CONFLICT DO NOTHING;
  END IF;
  RETURN NULL;
END
$$;

CREATE FUNCTION {{schema}}.jobs_unique_release() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  DELETE FROM {{schema}}.job_unique
  WHERE kind = OLD.kind AND unique_key = OLD.unique_key AND job_id = OLD.id;
  RETURN NULL;
END
$$;

-- (Re)creates the three triggers on jobs: here, and again by the conversion to the
-- partitioned layout, whose new parent table must carry them (triggers on a
-- partitioned table are cloned to every partition).
CREATE FUNCTION {{schema}}.install_unique_triggers() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
  IF to_regclass('{{schema}}.jobs_legacy') IS NOT NULL THEN
    DROP TRIGGER IF EXISTS jobs_unique_claim ON {{schema}}.jobs_legacy;
    DROP TRIGGER IF EXISTS jobs_unique_track ON {{schema}}.jobs_legacy;
    DROP TRIGGER IF EXISTS jobs_unique_release ON {{schema}}.jobs_legacy;
  END IF;
  DROP TRIGGER IF EXISTS jobs_unique_claim ON {{schema}}.jobs;
  DROP TRIGGER IF EXISTS jobs_unique_track ON {{schema}}.jobs;
  DROP TRIGGER IF EXISTS jobs_unique_release ON {{schema}}.jobs;
  CREATE TRIGGER jobs_unique_claim BEFORE INSERT ON {{schema}}.jobs FOR EACH ROW
    WHEN (NEW.unique_key IS NOT NULL) EXECUTE FUNCTION {{schema}}.jobs_unique_claim();
  CREATE TRIGGER jobs_unique_track AFTER UPDATE OF status ON {{schema}}.jobs FOR EACH ROW
    WHEN (OLD.unique_key IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {{schema}}.jobs_unique_track();
  CREATE TRIGGER jobs_unique_release AFTER DELETE ON {{schema}}.jobs FOR EACH ROW
    WHEN (OLD.unique_key IS NOT NULL) EXECUTE FUNCTION {{schema}}.jobs_unique_release();
END
$$;

SELECT {{schema}}.install_unique_triggers();
