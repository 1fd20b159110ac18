-- Flow control: cluster-wide concurrency and rate limits (docs/limits.md).

-- The key a job is limited by within its queue or kind (a tenant, an API account).
-- '' means none. NOT NULL with a constant default is a catalog-only change.
ALTER TABLE {{schema}}.jobs ADD COLUMN concurrency_key text NOT NULL DEFAULT '';

-- A limit governs a queue or a kind (scope, target):
--   key ''     all its jobs together;
--   key '*'    each concurrency key separately (the default for every key);
--   other key  that key, overriding '*'.
-- max_running caps the jobs holding a valid lease at once; rate caps the claims
-- (starts) in any window of per_us microseconds. No process keeps a copy that matters:
-- every limited claim reads this table.
CREATE TABLE {{schema}}.limits (
  scope       text NOT NULL CHECK (scope IN ('queue', 'kind')),
  target      text NOT NULL,
  key         text NOT NULL DEFAULT '',
  max_running integer CHECK (max_running > 0),
  rate        integer CHECK (rate > 0),
  per_us      bigint CHECK (per_us > 0),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, target, key),
  CONSTRAINT limits_rate_has_period CHECK ((rate IS NULL) = (per_us IS NULL)),
  CONSTRAINT limits_limit_something CHECK (max_running IS NOT NULL OR rate IS NOT NULL)
);

-- The starts each rate-limited bucket made within its window: a sliding log compressed
-- to one (time, count) pair per claim, trimmed as it slides. Exact: no window of
-- per_us ever holds more than rate starts. Rows of idle buckets are swept.
CREATE TABLE {{schema}}.limit_windows (
  scope   text NOT NULL,
  target  text NOT NULL,
  key     text NOT NULL,
  per_us  bigint NOT NULL,
  starts  timestamptz[] NOT NULL,
  counts  integer[] NOT NULL,
  PRIMARY KEY (scope, target, key)
);

-- Pending jobs by (kind, concurrency key) within a queue: lets a limited claim find
-- the jobs of keys and kinds that still have room when the head of the queue belongs
-- to saturated ones (no head-of-line blocking), one probe per group. Partial over
-- pending rows, so a claim or a completion never writes to it.
CREATE INDEX jobs_group_ready_idx ON {{schema}}.jobs (queue, kind, concurrency_key, priority DESC, run_at, id)
  WHERE status = 'pending';
