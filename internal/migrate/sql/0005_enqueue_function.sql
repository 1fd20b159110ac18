-- skiplock schema, version 5: enqueueing from SQL, so that any language's driver, psql
-- or a trigger can add jobs that Go workers run (docs/sql_enqueue.md).
--
--   SELECT * FROM {{schema}}.enqueue('send_email', '{"to": "a@example.com"}', queue => 'mail');
--
-- The rules are the Go client's (enqueue.go insertParams and ValidatePayload,
-- internal/validate Name, internal/ident ValidateQueue), checked in the same order, and
-- every refusal is SQLSTATE 22023 (invalid_parameter_value) with a message naming the
-- argument ("skiplock: invalid <argument>: <reason>", as ValidationError prints) and the
-- argument's name in the error's column field. The insert is the Go statement's: the
-- same columns and defaults, ON CONFLICT DO NOTHING without a target for deduplication
-- (the plain layout's unique index, or the partitioned layout's job_dedup table kept by
-- the jobs_dedup_claim trigger), and a NOTIFY on "<schema>.jobs" with the queue as
-- payload, which PostgreSQL delivers when the caller's transaction commits and drops
-- when it rolls back.
--
-- Differences from the Go client, all documented in docs/sql_enqueue.md:
--   * NULL for an optional argument means its default (the Go zero values do the same
--     for queue, priority and max_attempts); an explicit '' queue or 0 max_attempts is
--     refused. An empty deduplication_key means none, as in Go.
--   * max_attempts defaults to 8: the database does not know a kind's
--     WorkerOpts.MaxAttempts.
--   * The payload limit is the default Config.MaxPayloadBytes (1 MiB), measured on the
--     jsonb's text form (what a worker receives), since the caller's original text is
--     gone once the argument is jsonb.
--   * A duplicate sends no NOTIFY (nothing new to claim).
--
-- PL/pgSQL: the checks need IF/RAISE, and the holder lookup a second statement; its
-- plans are cached per session (see uuid_v7 in 0001).
--
-- SECURITY INVOKER (the default, stated): the insert runs with the caller's privileges,
-- so INSERT on jobs stays the one privilege that decides who may enqueue, whichever
-- path (Go or SQL) is used, and row-level security or auditing on jobs applies to the
-- caller. A SECURITY DEFINER function would let anyone holding EXECUTE enqueue any kind
-- into any queue as the schema owner. The function needs nothing beyond the producer's
-- grants: INSERT on jobs, SELECT (id, kind, deduplication_key) for RETURNING and for
-- finding a key's holder; the partitioned layout's dedup triggers are SECURITY DEFINER
-- already. search_path is pinned so that the caller's search_path cannot change what
-- an unqualified operator or function in the body means.
CREATE FUNCTION {{schema}}.enqueue(
  kind              text,
  payload           jsonb       DEFAULT '{}',
  queue             text        DEFAULT 'default',
  priority          integer     DEFAULT 0,
  run_at            timestamptz DEFAULT NULL,
  max_attempts      integer     DEFAULT 8,
  deduplication_key text        DEFAULT NULL,
  OUT id            uuid,
  OUT duplicate     boolean)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog AS $$
DECLARE
  -- Client.Channel: "<schema>.jobs" cut to 63 bytes (schema names are ASCII).
  channel CONSTANT text := left((parse_ident('{{schema}}'))[1] || '.jobs', 63);
  reason  text;
  size    bigint;
BEGIN
  -- kind: validate.Name(kind, MaxKindLen = 255).
  IF kind IS NULL THEN
    reason := 'must not be NULL';
  ELSIF kind = '' THEN
    reason := 'must not be empty';
  ELSIF octet_length(kind) > 255 THEN
    reason := 'longer than 255 bytes';
  ELSIF kind ~ E'[\\x01-\\x1f\\x7f]' THEN
    reason := 'contains a control character';
  END IF;
  IF reason IS NOT NULL THEN
    RAISE EXCEPTION 'skiplock: invalid kind: %', reason
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'kind';
  END IF;

  -- payload: ValidatePayload with the default limit. jsonb itself refuses what else
  -- ValidatePayload checks (invalid JSON, \u0000) before the call begins.
  IF payload IS NULL THEN
    RAISE EXCEPTION 'skiplock: invalid payload: must not be NULL (use ''{}'' or ''null'' for no data)'
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'payload';
  END IF;
  size := octet_length(payload::text);
  IF size > 1048576 THEN
    RAISE EXCEPTION 'skiplock: invalid payload: % bytes exceeds the limit of 1048576', size
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'payload';
  END IF;

  -- queue: ident.ValidateQueue, reporting the first offence as it does.
  queue := coalesce(queue, 'default');
  IF queue = '' THEN
    reason := 'must not be empty';
  ELSIF octet_length(queue) > 63 THEN
    reason := 'longer than 63 bytes';
  ELSIF queue ~ '^[0-9.-]' THEN
    reason := 'must start with a letter or underscore';
  ELSIF queue ~ '[^A-Za-z0-9_.-]' THEN
    reason := format('character %s not allowed (use letters, digits, _, - and .)',
                     to_json(substring(queue FROM '[^A-Za-z0-9_.-]')));
  END IF;
  IF reason IS NOT NULL THEN
    RAISE EXCEPTION 'skiplock: invalid queue: name %: %', to_json(left(queue, 100)), reason
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'queue';
  END IF;

  priority := coalesce(priority, 0);
  IF priority NOT BETWEEN -1000 AND 1000 THEN
    RAISE EXCEPTION 'skiplock: invalid priority: % is outside -1000..1000', priority
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'priority';
  END IF;

  max_attempts := coalesce(max_attempts, 8);
  IF max_attempts NOT BETWEEN 1 AND 1000 THEN
    RAISE EXCEPTION 'skiplock: invalid max_attempts: % is outside 1..1000', max_attempts
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'max_attempts';
  END IF;

  -- run_at: MaxSchedule is 10*365*24 hours either side of now (hours, not days, so a
  -- daylight-saving change in the session's time zone moves nothing). now() is the
  -- transaction's start, as in the Go statement.
  IF run_at IS NULL THEN
    run_at := now();
  ELSIF run_at NOT BETWEEN now() - interval '87600 hours' AND now() + interval '87600 hours' THEN
    RAISE EXCEPTION 'skiplock: invalid run_at: % is more than 87600 hours (10 years) from now', run_at
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'run_at';
  END IF;

  deduplication_key := nullif(deduplication_key, '');
  IF octet_length(deduplication_key) > 512 THEN
    RAISE EXCEPTION 'skiplock: invalid deduplication_key: longer than 512 bytes'
      USING ERRCODE = 'invalid_parameter_value', COLUMN = 'deduplication_key';
  END IF;

  -- Insert, or find the job holding (kind, deduplication_key). Under READ COMMITTED
  -- each statement sees a fresh snapshot, so a holder the insert waited for (and then
  -- skipped) is visible to the lookup. If the holder is deleted between the two
  -- statements (retention, JobDelete) the key is free again: try once more. Under
  -- REPEATABLE READ a holder committed after the snapshot makes the insert itself fail
  -- with 40001, as in Go.
  FOR attempt IN 1..3 LOOP
    INSERT INTO {{schema}}.jobs AS j (queue, kind, payload, priority, run_at, max_attempts, deduplication_key)
    VALUES (enqueue.queue, enqueue.kind, enqueue.payload, enqueue.priority, enqueue.run_at,
            enqueue.max_attempts, enqueue.deduplication_key)
    ON CONFLICT DO NOTHING
    RETURNING j.id INTO enqueue.id;
    IF FOUND THEN
      PERFORM pg_notify(channel, queue);
      duplicate := false;
      RETURN;
    END IF;
    EXIT WHEN deduplication_key IS NULL;
    SELECT j.id INTO enqueue.id
    FROM {{schema}}.jobs AS j
    WHERE j.kind = enqueue.kind AND j.deduplication_key = enqueue.deduplication_key;
    IF FOUND THEN
      duplicate := true;
      RETURN;
    END IF;
  END LOOP;
  -- Not reached with skiplock's own schema unless the holder vanished three times.
  IF deduplication_key IS NULL THEN
    RAISE EXCEPTION 'skiplock: job of kind % was not inserted: a BEFORE INSERT trigger on jobs skipped it', to_json(kind)
      USING ERRCODE = 'triggered_action_exception';
  END IF;
  RAISE EXCEPTION 'skiplock: job of kind % was not inserted and no job holds its deduplication key', to_json(kind)
    USING ERRCODE = 'serialization_failure',
          HINT = 'the key''s holder was deleted concurrently, or a BEFORE INSERT trigger on jobs skipped the row; retry the transaction';
END
$$;

COMMENT ON FUNCTION {{schema}}.enqueue(text, jsonb, text, integer, timestamptz, integer, text) IS
  'skiplock: enqueue a job in the caller''s transaction, validated as the Go client does; returns its id, or the id of the job holding the deduplication key with duplicate = true. See docs/sql_enqueue.md.';

-- Only roles granted EXECUTE (the producer in RolesSQL; the owner always) may call it.
-- The function adds no privilege (SECURITY INVOKER), so this is tidiness, not a
-- defence: the grant list says who is meant to enqueue from SQL.
REVOKE ALL ON FUNCTION {{schema}}.enqueue(text, jsonb, text, integer, timestamptz, integer, text) FROM PUBLIC;
