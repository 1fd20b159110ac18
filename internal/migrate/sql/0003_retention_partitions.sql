-- skiplock schema, version 3: what retention, stats and the partitioned mode need.
-- Nothing here changes the jobs table: an unpartitioned installation only gains the
-- helper functions and two small, empty tables. `skiplock partitions enable` (or
-- skiplock.PartitionJobs) converts jobs to the partitioned layout later, and uses them.

-- The smallest UUIDv7 of the millisecond of ts: every id uuid_v7 generates at or after
-- ts sorts at or above it (uuids compare bytewise, and the first 48 bits are the Unix
-- milliseconds). Partition bounds of the partitioned mode are these values.
CREATE FUNCTION {{schema}}.uuid_v7_floor(ts timestamptz)
RETURNS uuid LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT (lpad(to_hex(floor(extract(epoch FROM ts) * 1000)::bigint << 16 | 28672), 16, '0')
          || '0000000000000000')::uuid
$$;

-- The instant (millisecond) a UUIDv7 was generated at: for operators reading
-- partition bounds and ids.
CREATE FUNCTION {{schema}}.uuid_v7_time(id uuid)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT to_timestamp(('x' || lpad(substr(replace(id::text, '-', ''), 1, 12), 16, '0'))::bit(64)::bigint / 1000.0)
$$;

-- Partitioned mode: a partitioned table's unique indexes must contain the partition
-- key (id), so "one job per (kind, deduplication_key)" cannot be an index on jobs
-- there. This table holds the keys instead; a BEFORE INSERT trigger on jobs claims
-- the key in the same statement (and skips the row when another job holds it, which
-- the insert statements' ON CONFLICT DO NOTHING reports exactly like a conflict), and
-- an AFTER DELETE trigger releases it. Unused (empty) in the unpartitioned layout.
CREATE TABLE {{schema}}.job_dedup (
  kind              text NOT NULL,
  deduplication_key text NOT NULL,
  job_id            uuid NOT NULL,
  PRIMARY KEY (kind, deduplication_key)
);

-- Dropping a partition releases its jobs' keys by id range.
CREATE INDEX job_dedup_job_idx ON {{schema}}.job_dedup (job_id);

-- SECURITY DEFINER: the producer and worker roles need no privilege on job_dedup.
CREATE FUNCTION {{schema}}.jobs_dedup_claim() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  INSERT INTO {{schema}}.job_dedup (kind, deduplication_key, job_id)
  VALUES (NEW.kind, NEW.deduplication_key, NEW.id)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RETURN NULL; -- another job holds the key: insert nothing, as the unique index would
  END IF;
  RETURN NEW;
END
$$;

CREATE FUNCTION {{schema}}.jobs_dedup_release() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  DELETE FROM {{schema}}.job_dedup
  WHERE kind = OLD.kind AND deduplication_key = OLD.deduplication_key AND job_id = OLD.id;
  RETURN NULL;
END
$$;

-- The partition manager's settings, one row per partitioned table. A row for 'jobs'
-- is what makes an installation partitioned.
CREATE TABLE {{schema}}.partitioning (
  table_name text PRIMARY KEY,
  period     text NOT NULL CHECK (period IN ('day', 'week')),
  premake    integer NOT NULL CHECK (premake BETWEEN 1 AND 60),
  enabled_at timestamptz NOT NULL DEFAULT now()
);
