-- claim_jobs (0018, the SQL worker protocol) refuses a fair queue (0017), as it
-- refuses a queue a limit may govern: a SQL worker's claim in priority order would
-- take a backlog's jobs outside the queue's rotation, which only the Go fair claim
-- keeps (docs/fairness.md, "With the rest of skiplock"; docs/sql_workers.md). The Go
-- plain claim takes nothing from a fair queue for the same reason. Otherwise the
-- function is 0018's: the same arguments, checks and statement.

CREATE OR REPLACE FUNCTION {{schema}}.claim_jobs(
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
  is_fair   boolean;
  is_paused boolean;
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

  -- A fair queue (0017): its rotation is kept by the Go fair claim, which the Go
  -- client's workers and manual claims (and so the HTTP gateway) run; a claim in
  -- priority order here would take a backlog's jobs outside it. Refused, as the Go
  -- plain claim takes nothing from a fair queue. A paused queue claims nothing.
  SELECT p.fair, p.paused_at IS NOT NULL INTO is_fair, is_paused FROM {{schema}}.queues AS p WHERE p.name = q;
  IF is_fair THEN
    RAISE EXCEPTION 'skiplock: queue % cannot be claimed by a SQL worker: it is fair, and its rotation is kept by Go workers and the HTTP gateway only',
      to_json(q)
      USING ERRCODE = 'feature_not_supported',
            HINT = format('run a Go worker or the HTTP worker gateway (skiplock serve) for this queue, or make it plain again (skiplock queues fair %s --off)', q);
  END IF;
  IF is_paused THEN
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
