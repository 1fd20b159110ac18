-- skiplock schema, version 18: the SQL worker protocol, so that a worker in any language
-- (or psql) can claim and finish jobs with the guarantees a Go worker has
-- (docs/sql_workers.md):
--
--   SELECT * FROM {{schema}}.claim_jobs('mail', 'py-worker-1', n => 10, lease => '30 seconds');
--   SELECT {{schema}}.heartbeat_job(id, lease_token, lease => '30 seconds');   -- renewed | busy | lost
--   SELECT {{schema}}.complete_job(id, lease_token, output => '{"sent": true}');   -- succeeded | lost
--   SELECT {{schema}}.fail_job(id, lease_token, 'smtp: 451');   -- pending (retry) | failed | lost
--   SELECT {{schema}}.snooze_job(id, lease_token, interval '5 minutes');   -- pending | lost
--   SELECT {{schema}}.cancel_job(id, lease_token, 'order withdrawn');   -- cancelled | lost
--   SELECT * FROM {{schema}}.finish_jobs(ids, tokens, actions, delays, errors, outputs);   -- many at once
--   SELECT {{schema}}.reclaim_jobs();   -- expired leases back to the queue
--
-- The statements are the Go runtime's: the claim is store.Claim
-- (internal/store/lease.go) started at the index head — due pending jobs in
-- priority, run_at, id order, FOR UPDATE SKIP LOCKED, one fresh token per claim, the
-- pause and sequence checks, slot_of/slot_token cleared — and the outcomes are
-- store.Finish's fenced UPDATE (internal/store/finish.go, finishUpdate), and the
-- reclaim store.Reclaim's (internal/store/reclaim.go), column for column: status, run_at, attempts, last_error, output, attempt_history (the same
-- entry, kept to the newest 20), lease and worker cleared, updated_at. The triggers of
-- flows, batches, unique keys and sequences fire on the same status changes. Go's
-- TestSQLWorkerAgreesWithGo drives one job through each path and compares the rows.
--
-- Fencing: every outcome and heartbeat matches (id, lease_token), as Go's do. A call
-- whose lease is gone changes nothing and returns 'lost' — a result, not an error —
-- unless abort_if_lost is true, when it raises SK409 (lease_lost, migration 0004) and
-- aborts the caller's transaction, exactly like Client.CompleteTx.
--
-- Text: an error text goes through Go's text policy (internal/safetext): PostgreSQL
-- text is already valid UTF-8 without NUL, so what remains is the 16 KiB bound, cut
-- at a character boundary with the same "… [truncated: N of M bytes shown]" marker.
-- Refusals (a NULL id, an out-of-range delay, an output over 64 KiB, a bad queue name)
-- are SQLSTATE 22023 with "skiplock: invalid <argument>: <reason>" and the argument in
-- the error's column field, as enqueue (0005) reports them; nothing is written.
--
-- Limits (0012) are evaluated by the Go limited claim only. claim_jobs refuses, with
-- SQLSTATE 0A000 (feature_not_supported) naming the limit, a queue a limit may govern:
-- one with a queue limit, or — unless the claim names its kinds and none of them has a
-- limit — any queue while some kind has one. This is the Go plain claim's own guard
-- (store.unlimited), so no limit is ever exceeded by a SQL worker.
--
-- now: every function takes the statement's time from its last argument, NULL meaning
-- the database's now(), as queue_depth (0015) does; it is there for clients and tests
-- with an injected clock (the Go client passes its Config.Clock the same way). It grants
-- nothing: the worker role may write these columns directly.
--
-- SECURITY INVOKER, search_path pinned, EXECUTE revoked from PUBLIC: the caller needs the
-- worker role's grants (docs/roles.md), to which `skiplock roles sql` adds EXECUTE on
-- these functions. The planner settings are the store's plan guard (planguard.go):
-- index plans only, no JIT, whatever the statistics when PL/pgSQL cached the plan.

-- Three helpers the functions below share (EXECUTE stays with PUBLIC: they read and
-- write nothing).
--
-- interval_us: an interval argument in microseconds, refused (22023 naming the
-- argument) outside lo_us..87600 hours; NULL stays NULL. at is appended to the
-- message (finish_jobs: which outcome).
CREATE FUNCTION {{schema}}.interval_us(v interval, argument text, lo_us bigint, bounds text, at text DEFAULT '')
RETURNS bigint LANGUAGE plpgsql STABLE SET search_path = pg_catalog AS $$
DECLARE
  us CONSTANT numeric := trunc(extract(epoch FROM v) * 1000000);
BEGIN
  IF us NOT BETWEEN lo_us AND 315360000000000 THEN
    RAISE EXCEPTION '%', format('skiplock: invalid %s: %s is outside %s%s', argument, v, bounds, at)
      USING ERRCODE = 'invalid_parameter_value', COLUMN = argument;
  END IF;
  RETURN us;
END
$$;

-- backoff_us: the default retry policy's delay after attempt (ExponentialBackoff{},
-- retry.go): min(1s·2^(attempt−1), 1h) plus up to 10% jitter, in microseconds.
CREATE FUNCTION {{schema}}.backoff_us(attempt integer) RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog AS $$
  SELECT (d + floor(random() * 0.1 * d))::bigint
  FROM (SELECT least(power(2, least(greatest(attempt, 1) - 1, 32)) * 1000000, 3600000000) AS d) x
$$;

-- history_append: store.historyAppend — one finished attempt appended to a job's
-- attempt_history, keeping the newest 20 (store.MaxHistory). No SET clause, so that
-- it is inlined into the statements that call it; STABLE, as jsonb_build_object is
-- (a timestamptz is written in the session's time zone, as in the Go statement).
CREATE FUNCTION {{schema}}.history_append(history jsonb, attempt integer, started_at timestamptz,
  finished_at timestamptz, worker_id text, outcome text, error text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_path_query_array(coalesce(history, '[]'::jsonb) || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
           'attempt', attempt, 'started_at', started_at, 'finished_at', finished_at,
           'worker_id', worker_id, 'outcome', outcome, 'error', error))),
         '$[last - 19 to last]')
$$;

CREATE FUNCTION {{schema}}.claim_jobs(
  queue  text,
  worker text,
  n      integer   DEFAULT 1,
  lease  interval  DEFAULT '30 seconds',
  kinds  text[]    DEFAULT NULL,
  now    timestamptz DEFAULT NULL)
RETURNS TABLE (id uuid, kind text, args jsonb, attempt integer, max_attempts integer,
               priority integer, run_at timestamptz, metadata jsonb, tags text[],
               created_at timestamptz, lease_token uuid, lease_until timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog SET enable_seqscan = off SET enable_hashjoin = off
SET enable_mergejoin = off SET jit = off AS $$
DECLARE
  q      CONSTANT text := claim_jobs.queue;
  t      CONSTANT timestamptz := coalesce(claim_jobs.now, pg_catalog.now());
  reason text;
  lim    record;
  us     numeric;
BEGIN
  -- queue: ident.ValidateQueue, as enqueue checks it.
  IF q IS NULL OR q = '' THEN
    reason := 'must not be empty';
  ELSIF octet_length(q) > 63 THEN
    reason := 'longer than 63 bytes';
  ELSIF q ~ '^[0-9.-]' THEN
    reason := 'must start with a letter or underscore';
  ELSIF q ~ '[^A-Za-z0-9_.-]' THEN
    reason := format('character %s not allowed (use letters, digits, _, - and .)',
                     to_json(substring(q FROM '[^A-Za-z0-9_.-]')));
  END IF;
  IF reason IS NOT NULL THEN
    RAISE EXCEPTION 'skiplock: invalid queue: name %: %', to_json(left(coalesce(q, ''), 100)), reason
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'queue';
  END IF;

  -- worker: the name written to worker_id and the attempt history, like Config.ID.
  IF worker IS NULL OR worker = '' THEN
    reason := 'must not be empty';
  ELSIF octet_length(worker) > 255 THEN
    reason := 'longer than 255 bytes';
  ELSIF worker ~ E'[\\x01-\\x1f\\x7f]' THEN
    reason := 'contains a control character';
  END IF;
  IF reason IS NOT NULL THEN
    RAISE EXCEPTION 'skiplock: invalid worker: %', reason
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'worker';
  END IF;

  IF n IS NULL OR n NOT BETWEEN 1 AND 1000 THEN
    RAISE EXCEPTION 'skiplock: invalid n: % is outside 1..1000', coalesce(n::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'n';
  END IF;

  -- lease: Config.LeaseDuration's floor of 1s; at most MaxSchedule.
  us := {{schema}}.interval_us(coalesce(lease, '0'), 'lease', 1000000, '1 second..87600 hours');

  IF kinds IS NOT NULL AND (cardinality(kinds) = 0 OR array_position(kinds, NULL) IS NOT NULL) THEN
    RAISE EXCEPTION 'skiplock: invalid kinds: must be NULL (every kind) or a non-empty array without NULLs'
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'kinds';
  END IF;

  -- A limit this claim might have to honour: refuse, naming it.
  SELECT l.scope, l.target, l.key INTO lim FROM {{schema}}.limits AS l
  WHERE (l.scope = 'queue' AND l.target = q)
     OR (l.scope = 'kind' AND (kinds IS NULL OR l.target = ANY(kinds)))
  ORDER BY l.scope DESC, l.target, l.key LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'skiplock: queue % cannot be claimed by a SQL worker: the % limit on % (key %) is evaluated by Go workers only',
      to_json(q), lim.scope, to_json(lim.target), to_json(lim.key)
      USING ERRCODE = 'feature_not_supported',
            HINT = CASE WHEN lim.scope = 'kind' AND kinds IS NULL
                        THEN 'pass kinds => ARRAY[...] without the limited kinds, or run a Go worker for this queue'
                        ELSE 'run a Go worker for this queue, or remove the limit' END;
  END IF;

  -- A paused queue claims nothing.
  IF EXISTS (SELECT 1 FROM {{schema}}.queues AS p WHERE p.name = q AND p.paused_at IS NOT NULL) THEN
    RETURN;
  END IF;

  RETURN QUERY
  WITH tok AS (SELECT gen_random_uuid() AS token),
  claimed AS (
    SELECT c.id FROM {{schema}}.jobs AS c
    WHERE c.status = 'pending' AND c.queue = q AND c.run_at <= t
      AND (kinds IS NULL OR c.kind = ANY(kinds))
      AND (c.sequence_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM {{schema}}.jobs e
        WHERE e.sequence_key = c.sequence_key AND e.id < c.id
          AND e.status IN ('pending', 'running', 'failed')
          AND (e.status <> 'failed' OR NOT e.sequence_skip_failed)))
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT n
    FOR UPDATE SKIP LOCKED
  ),
  u AS (
    UPDATE {{schema}}.jobs AS j
    SET status = 'running',
        attempts = j.attempts + 1,
        lease_until = t + us * interval '1 microsecond',
        lease_token = tok.token,
        worker_id = worker,
        attempted_at = t,
        updated_at = t,
        slot_of = NULL, slot_token = NULL,
        started = true -- the SQL worker takes every job it claims (0016: claimed vs running)
    FROM tok
    WHERE j.id = ANY(ARRAY(SELECT c.id FROM claimed c))
    RETURNING j.id, j.kind, j.payload, j.attempts, j.max_attempts, j.priority, j.run_at,
              j.metadata, j.tags, j.created_at, j.lease_token, j.lease_until
  )
  SELECT * FROM u ORDER BY u.priority DESC, u.run_at, u.id;
END
$$;

COMMENT ON FUNCTION {{schema}}.claim_jobs(text, text, integer, interval, text[], timestamptz) IS
  'skiplock: lease up to n due jobs of a queue (optionally of the given kinds) to a named worker under one fresh lease token, as the Go claim does. See docs/sql_workers.md.';

CREATE FUNCTION {{schema}}.heartbeat_job(
  job_id      uuid,
  lease_token uuid,
  lease       interval DEFAULT '30 seconds',
  now         timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog SET enable_seqscan = off SET enable_hashjoin = off
SET enable_mergejoin = off SET jit = off AS $$
DECLARE
  tok    CONSTANT uuid := heartbeat_job.lease_token;
  t      CONSTANT timestamptz := coalesce(heartbeat_job.now, pg_catalog.now());
  us     numeric;
  margin interval;
BEGIN
  IF job_id IS NULL OR tok IS NULL THEN
    RAISE EXCEPTION 'skiplock: invalid %: must not be NULL', CASE WHEN job_id IS NULL THEN 'job_id' ELSE 'lease_token' END
      USING ERRCODE = 'invalid_parameter_value', COLUMN = CASE WHEN job_id IS NULL THEN 'job_id' ELSE 'lease_token' END;
  END IF;
  us := {{schema}}.interval_us(coalesce(lease, '0'), 'lease', 1000000, '1 second..87600 hours');
  -- store.HeartbeatMargin: a lease with less than a tenth (at most a second) left is not
  -- revived, so a limited claim that saw it expire cannot be contradicted.
  margin := least(us / 10, 1000000) * interval '1 microsecond';

  -- Never wait for the row: a job locked elsewhere (its outcome being written, a
  -- transaction completing it still open) is reported busy, as Go's heartbeat skips it.
  PERFORM 1 FROM {{schema}}.jobs AS j
  WHERE j.id = job_id AND j.lease_token = tok AND j.lease_until > t + margin
  FOR UPDATE OF j SKIP LOCKED;
  IF NOT FOUND THEN
    PERFORM 1 FROM {{schema}}.jobs AS j
    WHERE j.id = job_id AND j.lease_token = tok AND j.lease_until > t + margin;
    RETURN CASE WHEN FOUND THEN 'busy' ELSE 'lost' END;
  END IF;
  UPDATE {{schema}}.jobs AS j
  SET lease_until = t + us * interval '1 microsecond', updated_at = t
  WHERE j.id = job_id AND j.lease_token = tok;
  RETURN 'renewed';
END
$$;

COMMENT ON FUNCTION {{schema}}.heartbeat_job(uuid, uuid, interval, timestamptz) IS
  'skiplock: extend a running job''s lease (the token never changes): renewed, busy (locked elsewhere: try again) or lost. See docs/sql_workers.md.';

-- finish_jobs records outcomes under their jobs' leases: store.Finish. The four
-- single-job functions below are its public forms; a worker with many jobs in flight
-- batches its outcomes into one call, as Go's completer does. The arrays are one
-- outcome per position: action is 'complete', 'retry', 'fail', 'snooze' or 'cancel'
-- (store.Action); delay NULL on a retry means the default retry policy
-- (ExponentialBackoff{}: 1s·2^(attempt−1) capped at 1h, plus up to 10% jitter). It
-- returns one row per outcome, in their order: the job's new status, or 'lost'.
CREATE FUNCTION {{schema}}.finish_jobs(
  job_ids       uuid[],
  lease_tokens  uuid[],
  actions       text[],
  delays        interval[],
  errors        text[],
  outputs       jsonb[],
  now           timestamptz DEFAULT NULL)
RETURNS TABLE (job_id uuid, status text)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog SET enable_seqscan = off SET enable_hashjoin = off
SET enable_mergejoin = off SET jit = off AS $$
DECLARE
  t     CONSTANT timestamptz := coalesce(finish_jobs.now, pg_catalog.now());
  k     CONSTANT integer := coalesce(cardinality(job_ids), 0);
  us    bigint[] := array_fill(NULL::bigint, ARRAY[k]);
  errs  text[] := array_fill(NULL::text, ARRAY[k]);
  at    text;
  e     text;
  size  bigint;
  total bigint;
  cut   integer;
  b     bytea;
  ns    bigint[];
  sts   text[];
  res   text[];
BEGIN
  IF k = 0 OR k > 10000 THEN
    RAISE EXCEPTION 'skiplock: invalid job_ids: % outcomes; give 1..10000', k
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'job_ids';
  END IF;
  IF coalesce(cardinality(lease_tokens), -1) <> k OR coalesce(cardinality(actions), -1) <> k
     OR coalesce(cardinality(delays), -1) <> k OR coalesce(cardinality(errors), -1) <> k
     OR coalesce(cardinality(outputs), -1) <> k THEN
    RAISE EXCEPTION 'skiplock: invalid job_ids: the arrays must have one element per outcome (% job ids)', k
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'job_ids';
  END IF;
  FOR i IN 1..k LOOP
    at := CASE WHEN k > 1 THEN format(' (outcome %s)', i) ELSE '' END;
    IF job_ids[i] IS NULL OR lease_tokens[i] IS NULL THEN
      RAISE EXCEPTION 'skiplock: invalid %: must not be NULL%', CASE WHEN job_ids[i] IS NULL THEN 'job_id' ELSE 'lease_token' END, at
        USING ERRCODE = 'invalid_parameter_value', COLUMN = CASE WHEN job_ids[i] IS NULL THEN 'job_id' ELSE 'lease_token' END;
    END IF;
    IF actions[i] IS NULL OR actions[i] NOT IN ('complete', 'retry', 'fail', 'snooze', 'cancel') THEN
      RAISE EXCEPTION 'skiplock: invalid action: % is not complete, retry, fail, snooze or cancel%', to_json(actions[i]), at
        USING ERRCODE = 'invalid_parameter_value', COLUMN = 'action';
    END IF;

    -- delay: 0..MaxSchedule (87600 hours). Go clamps a handler's delay; a SQL caller's
    -- is an argument, refused rather than changed.
    us[i] := {{schema}}.interval_us(delays[i], 'delay', 0, '0..87600 hours', at);
    IF us[i] IS NULL AND actions[i] = 'snooze' THEN
      RAISE EXCEPTION 'skiplock: invalid delay: must not be NULL (use interval ''0'' to run again at once)%', at
        USING ERRCODE = 'invalid_parameter_value', COLUMN = 'delay';
    END IF;

    -- output: SetOutput's limit, MaxOutputBytes, on the jsonb's text form.
    size := octet_length(outputs[i]::text);
    IF size > 65536 THEN
      RAISE EXCEPTION 'skiplock: invalid output: % bytes exceeds the limit of 65536%', size, at
        USING ERRCODE = 'invalid_parameter_value', COLUMN = 'output';
    END IF;

    -- error: safetext.Clean. Over 16 KiB it is cut at a character boundary and
    -- marked; the marker's length is measured with the limit, as Go measures it.
    e := nullif(errors[i], '');
    total := octet_length(e);
    IF total > 16384 THEN
      b := convert_to(e, 'UTF8');
      cut := 16384 - octet_length(format('… [truncated: %s of %s bytes shown]', 16384, total));
      WHILE cut > 0 AND (get_byte(b, cut) & 192) = 128 LOOP
        cut := cut - 1;
      END LOOP;
      e := convert_from(substring(b FROM 1 FOR cut), 'UTF8') || format('… [truncated: %s of %s bytes shown]', cut, total);
    END IF;
    errs[i] := e;
  END LOOP;

  -- store.finishUpdate. The outcomes are joined in id order — a nested loop from
  -- them into the primary key, the only join the planner settings leave — so the rows
  -- are locked in id order, as Go's completer orders its batches, and two batches
  -- never wait for each other in opposite orders. Each outcome's result lands at its
  -- ordinal; an outcome the update did not match stays 'lost'.
  WITH o AS MATERIALIZED (
    SELECT * FROM unnest(job_ids, lease_tokens, actions, us, errs, outputs) WITH ORDINALITY
      AS o(id, token, action, delay_us, error, output, n)
    ORDER BY o.id
  ), u AS (
    UPDATE {{schema}}.jobs AS j
    SET status = (CASE o.action
                    WHEN 'complete' THEN 'succeeded'
                    WHEN 'fail' THEN 'failed'
                    WHEN 'cancel' THEN 'cancelled'
                    WHEN 'snooze' THEN 'pending'
                    ELSE CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END
                  END)::{{schema}}.job_status,
        run_at = CASE
                   WHEN o.action = 'snooze' OR (o.action = 'retry' AND j.attempts < j.max_attempts)
                   THEN t + coalesce(o.delay_us, {{schema}}.backoff_us(j.attempts)) * interval '1 microsecond'
                   ELSE j.run_at
                 END,
        attempts = CASE WHEN o.action = 'snooze' THEN j.attempts - 1 ELSE j.attempts END,
        last_error = CASE WHEN o.action IN ('retry', 'fail', 'cancel') THEN o.error ELSE j.last_error END,
        output = CASE WHEN o.action = 'complete' THEN o.output ELSE j.output END,
        attempt_history = CASE WHEN o.action = 'complete' THEN j.attempt_history
                          ELSE {{schema}}.history_append(j.attempt_history, j.attempts, j.attempted_at, t, j.worker_id,
                                 CASE o.action
                                   WHEN 'fail' THEN 'failed' WHEN 'cancel' THEN 'cancelled' WHEN 'snooze' THEN 'snoozed'
                                   ELSE CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'retried' END END,
                                 o.error) END,
        lease_until = NULL,
        lease_token = NULL,
        worker_id = CASE WHEN o.action = 'complete' THEN j.worker_id END,
        updated_at = t
    FROM o
    WHERE j.id = o.id AND j.lease_token = o.token
    RETURNING o.n, j.status::text AS st
  )
  SELECT array_agg(u.n), array_agg(u.st) INTO ns, sts FROM u;
  res := array_fill('lost'::text, ARRAY[k]);
  FOR i IN 1..coalesce(cardinality(ns), 0) LOOP
    res[ns[i]] := sts[i];
  END LOOP;
  RETURN QUERY SELECT job_ids[i], res[i] FROM generate_series(1, k) AS i;
END
$$;

COMMENT ON FUNCTION {{schema}}.finish_jobs(uuid[], uuid[], text[], interval[], text[], jsonb[], timestamptz) IS
  'skiplock: record outcomes of running jobs under their leases, one row per outcome: the new status or lost (what complete_job, fail_job, snooze_job and cancel_job call). See docs/sql_workers.md.';

-- The public forms, one outcome each.
CREATE FUNCTION {{schema}}.complete_job(job_id uuid, lease_token uuid, output jsonb DEFAULT NULL,
                                        abort_if_lost boolean DEFAULT false, now timestamptz DEFAULT NULL)
RETURNS text LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog AS $$
DECLARE
  st text;
BEGIN
  SELECT f.status INTO st FROM {{schema}}.finish_jobs(ARRAY[complete_job.job_id], ARRAY[complete_job.lease_token],
    ARRAY['complete'], ARRAY[NULL::interval], ARRAY[NULL::text], ARRAY[complete_job.output], complete_job.now) AS f;
  IF st = 'lost' AND abort_if_lost THEN
    PERFORM {{schema}}.lease_lost(complete_job.job_id);
  END IF;
  RETURN st;
END
$$;

CREATE FUNCTION {{schema}}.fail_job(job_id uuid, lease_token uuid, error text, permanent boolean DEFAULT false,
                                    delay interval DEFAULT NULL, now timestamptz DEFAULT NULL)
RETURNS text LANGUAGE sql VOLATILE SECURITY INVOKER AS $$
  SELECT f.status FROM {{schema}}.finish_jobs(ARRAY[$1], ARRAY[$2], ARRAY[CASE WHEN $4 THEN 'fail' ELSE 'retry' END],
    ARRAY[$5], ARRAY[$3], ARRAY[NULL::jsonb], $6) AS f
$$;

CREATE FUNCTION {{schema}}.snooze_job(job_id uuid, lease_token uuid, delay interval, now timestamptz DEFAULT NULL)
RETURNS text LANGUAGE sql VOLATILE SECURITY INVOKER AS $$
  SELECT f.status FROM {{schema}}.finish_jobs(ARRAY[$1], ARRAY[$2], ARRAY['snooze'],
    ARRAY[$3], ARRAY[NULL::text], ARRAY[NULL::jsonb], $4) AS f
$$;

CREATE FUNCTION {{schema}}.cancel_job(job_id uuid, lease_token uuid, error text DEFAULT NULL, now timestamptz DEFAULT NULL)
RETURNS text LANGUAGE sql VOLATILE SECURITY INVOKER AS $$
  SELECT f.status FROM {{schema}}.finish_jobs(ARRAY[$1], ARRAY[$2], ARRAY['cancel'],
    ARRAY[NULL::interval], ARRAY[$3], ARRAY[NULL::jsonb], $4) AS f
$$;

COMMENT ON FUNCTION {{schema}}.complete_job(uuid, uuid, jsonb, boolean, timestamptz) IS
  'skiplock: mark a running job succeeded under its lease, in the caller''s transaction: succeeded, or lost (nothing written; abort_if_lost raises SK409 instead). See docs/sql_workers.md.';
COMMENT ON FUNCTION {{schema}}.fail_job(uuid, uuid, text, boolean, interval, timestamptz) IS
  'skiplock: record a failed attempt under the lease: pending (retried after delay, default the exponential backoff), failed (permanent, or attempts exhausted) or lost. See docs/sql_workers.md.';
COMMENT ON FUNCTION {{schema}}.snooze_job(uuid, uuid, interval, timestamptz) IS
  'skiplock: make a running job pending again after delay, giving back its attempt: pending or lost. See docs/sql_workers.md.';
COMMENT ON FUNCTION {{schema}}.cancel_job(uuid, uuid, text, timestamptz) IS
  'skiplock: cancel a running job under its lease: cancelled or lost. See docs/sql_workers.md.';

-- reclaim_jobs is the reclaimer (internal/store/reclaim.go, maint.Reclaimer) for
-- deployments without a running Go client: up to n running jobs (of queue, or of every
-- queue) whose lease ran out go back to pending after delay (NULL: the default retry
-- policy, as fail_job), or to failed at max_attempts, with the Go reclaimer's error text
-- and history entry. Fenced by the lease still being expired under the same token; a
-- job locked elsewhere is skipped, not waited for. Returns how many it reclaimed.
CREATE FUNCTION {{schema}}.reclaim_jobs(
  queue text     DEFAULT NULL,
  n     integer  DEFAULT 100,
  delay interval DEFAULT NULL,
  now   timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog SET enable_seqscan = off SET enable_hashjoin = off
SET enable_mergejoin = off SET jit = off AS $$
DECLARE
  q        CONSTANT text := reclaim_jobs.queue;
  t        CONSTANT timestamptz := coalesce(reclaim_jobs.now, pg_catalog.now());
  delay_us bigint;
  done     integer;
BEGIN
  IF n IS NULL OR n NOT BETWEEN 1 AND 10000 THEN
    RAISE EXCEPTION 'skiplock: invalid n: % is outside 1..10000', coalesce(n::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'n';
  END IF;
  delay_us := {{schema}}.interval_us(delay, 'delay', 0, '0..87600 hours');

  WITH r AS MATERIALIZED (
    SELECT x.id FROM {{schema}}.jobs AS x
    WHERE x.status = 'running' AND x.lease_until < t AND (q IS NULL OR x.queue = q)
    ORDER BY x.lease_until
    LIMIT n
    FOR UPDATE OF x SKIP LOCKED
  ), u AS (
    UPDATE {{schema}}.jobs AS j
    SET status = (CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END)::{{schema}}.job_status,
        run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                      ELSE t + coalesce(delay_us, {{schema}}.backoff_us(j.attempts)) * interval '1 microsecond' END,
        last_error = 'lease expired on worker ' || coalesce(j.worker_id, '?') || ' (attempt ' || j.attempts || ')',
        attempt_history = {{schema}}.history_append(j.attempt_history, j.attempts, j.attempted_at, t, j.worker_id,
                                                     'lease_expired', 'lease expired'),
        lease_until = NULL,
        lease_token = NULL,
        worker_id = NULL,
        updated_at = t
    FROM r
    WHERE j.id = r.id AND j.lease_until < t
    RETURNING j.id
  )
  SELECT count(*) INTO done FROM u;
  RETURN done;
END
$$;

COMMENT ON FUNCTION {{schema}}.reclaim_jobs(text, integer, interval, timestamptz) IS
  'skiplock: return running jobs whose lease ran out to the queue (or fail them at max_attempts), as the Go reclaimer does. See docs/sql_workers.md.';

-- The worker role's (RolesSQL grants EXECUTE); the owner always may.
REVOKE ALL ON FUNCTION {{schema}}.claim_jobs(text, text, integer, interval, text[], timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION {{schema}}.heartbeat_job(uuid, uuid, interval, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION {{schema}}.finish_jobs(uuid[], uuid[], text[], interval[], text[], jsonb[], timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION {{schema}}.complete_job(uuid, uuid, jsonb, boolean, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION {{schema}}.fail_job(uuid, uuid, text, boolean, interval, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION {{schema}}.snooze_job(uuid, uuid, interval, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION {{schema}}.cancel_job(uuid, uuid, text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION {{schema}}.reclaim_jobs(text, integer, interval, timestamptz) FROM PUBLIC;
