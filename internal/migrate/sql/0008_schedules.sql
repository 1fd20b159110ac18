-- Periodic jobs (docs/scheduling.md). One row per schedule, declared in code
-- (Config.Periodic, source 'config') or added at run time (Client.ScheduleAdd or
-- `skiplock schedules add`, source 'api'). The scheduler service fires a due schedule
-- by inserting its job through the ordinary insert statement, with the deduplication
-- key "periodic:<name>:<fire time>", and advancing next_fire_at in the same
-- transaction, holding the row FOR UPDATE: a fire time yields one job at most.
--
-- next_fire_at is computed in Go (the cron spec and its time zone are parsed there);
-- the database only compares it with the statement's time. It is NULL for a spec that
-- has no fire time left.
CREATE TABLE {{schema}}.schedules (
  name         text PRIMARY KEY,
  spec         text NOT NULL,
  timezone     text NOT NULL DEFAULT 'UTC',
  kind         text NOT NULL,
  payload      jsonb NOT NULL DEFAULT '{}',
  queue        text NOT NULL DEFAULT 'default',
  priority     integer NOT NULL DEFAULT 0,
  -- 0: the kind's WorkerOpts.MaxAttempts of the firing client (else 8).
  max_attempts integer NOT NULL DEFAULT 0,
  misfire      text NOT NULL DEFAULT 'run_once',
  max_catch_up integer NOT NULL DEFAULT 100,
  -- A random delay of 0..jitter_us microseconds is added to each job's run_at.
  jitter_us    bigint NOT NULL DEFAULT 0,
  enabled      boolean NOT NULL DEFAULT true,
  source       text NOT NULL DEFAULT 'api',
  next_fire_at timestamptz,
  last_fire_at timestamptz,
  last_job_id  uuid,
  -- Why the last fire inserted no job (a hook or a validation refused it); NULL after
  -- a fire that did.
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT schedules_misfire_valid CHECK (misfire IN ('skip', 'run_once', 'catch_up')),
  CONSTRAINT schedules_source_valid CHECK (source IN ('config', 'api')),
  CONSTRAINT schedules_max_attempts_range CHECK (max_attempts BETWEEN 0 AND 1000),
  CONSTRAINT schedules_max_catch_up_range CHECK (max_catch_up BETWEEN 1 AND 1000),
  CONSTRAINT schedules_jitter_range CHECK (jitter_us >= 0)
);

-- The scheduler's scan: enabled schedules by next fire time.
CREATE INDEX schedules_due_idx ON {{schema}}.schedules (next_fire_at) WHERE enabled;
