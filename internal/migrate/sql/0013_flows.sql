-- Flows and batches (docs/flows.md).
--
-- A flow is a tree of jobs: a parent waits (status 'waiting') until each of its
-- children has finished, then becomes pending. A batch is a group of independent jobs
-- with callback jobs released once every member finished (and at the first failure).
--
-- Children point at their parent (parent_id) and members at their batch (batch_id).
-- A parent carries its policy (flow_policy) and the number of its children that have
-- not finished (flow_open); a batch's counters live in the batches table.
--
-- Counting happens in the child's own transaction, in two triggers whose WHEN clauses
-- test parent_id and batch_id, so jobs that belong to neither (every job of the
-- ordinary claim and completion path) pay only that test:
--   * jobs_flow_note, an ordinary row trigger, runs for each row whose status enters or
--     leaves a finished state (or that is deleted) and appends a note to a
--     transaction-local setting: which parent or batch, from which bucket to which.
--   * jobs_flow_settle, a deferred constraint trigger queued by the same rows, runs at
--     commit: the first one consumes the notes, locks the parents (their job rows)
--     and the batches in id order — so two committing transactions never wait for
--     each other in opposite orders — applies the counts, and releases or fails the
--     parents and fires the batches' callbacks. The others find no notes left.
-- The counts change only when a child's row really changed: a zombie worker's fenced
-- update matches no row, fires no trigger and counts nothing. A parent is released by
-- "UPDATE … WHERE status = 'waiting'" under its row lock, so at most once.
--
-- 'waiting' is added at the end of the enum (an even OID, so comparisons stay cheap).
-- A value added by ALTER TYPE … ADD VALUE cannot be used in the transaction that
-- added it, and `skiplock migrate sql` prints every migration in one transaction, so
-- nothing below names it outside a function body: the partial index of waiting jobs
-- is written "status > 'cancelled'" (only 'waiting' sorts after 'cancelled').
ALTER TYPE {{schema}}.job_status ADD VALUE IF NOT EXISTS 'waiting';

ALTER TABLE {{schema}}.jobs
  ADD COLUMN parent_id uuid,
  ADD COLUMN batch_id uuid,
  ADD COLUMN flow_policy text,
  ADD COLUMN flow_open integer;

-- Children of a parent (Children, the cascade of a cancelled parent, flows show) and
-- members of a batch; waiting jobs per queue (Stats). Only such jobs are in them.
CREATE INDEX jobs_parent_idx ON {{schema}}.jobs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX jobs_batch_idx ON {{schema}}.jobs (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX jobs_waiting_idx ON {{schema}}.jobs (queue) WHERE status > 'cancelled';

CREATE TABLE {{schema}}.batches (
  id                 uuid PRIMARY KEY,
  description        text NOT NULL DEFAULT '',
  on_complete        uuid,          -- the waiting callback job released when all finished
  on_failure         uuid,          -- the waiting callback job released at the first failure
  total              integer,       -- members, counted when the batch is sealed
  succeeded          integer NOT NULL DEFAULT 0,
  failed             integer NOT NULL DEFAULT 0,
  cancelled          integer NOT NULL DEFAULT 0,
  removed            integer NOT NULL DEFAULT 0, -- members deleted (counted into total at seal)
  created_at         timestamptz NOT NULL,
  sealed_at          timestamptz,
  completed_at       timestamptz,
  failure_fired_at   timestamptz
);
CREATE INDEX batches_open_idx ON {{schema}}.batches (id) WHERE completed_at IS NULL;

-- The bucket of a status: open, succeeded, failed, cancelled.
CREATE FUNCTION {{schema}}.flow_bucket(s {{schema}}.job_status) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE s::text WHEN 'succeeded' THEN 's' WHEN 'failed' THEN 'f' WHEN 'cancelled' THEN 'c' ELSE 'o' END
$$;

-- Notes are "<f|b><parent or batch id><from bucket><to bucket>;" ('x': deleted); the
-- greatest updated_at of the noted rows (the statement's clock, injected or not) is
-- kept beside them and stamps what the settlement changes.
CREATE FUNCTION {{schema}}.jobs_flow_note() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  var CONSTANT text := 'skiplock.flows_' || md5('{{schema}}');
  r record;
  moved text;
  note text := '';
BEGIN
  IF TG_OP = 'DELETE' THEN
    r := OLD;
    moved := {{schema}}.flow_bucket(OLD.status) || 'x';
  ELSE
    r := NEW;
    moved := {{schema}}.flow_bucket(OLD.status) || {{schema}}.flow_bucket(NEW.status);
  END IF;
  IF r.parent_id IS NOT NULL THEN
    note := 'f' || r.parent_id::text || moved || ';';
  END IF;
  IF r.batch_id IS NOT NULL THEN
    note := note || 'b' || r.batch_id::text || moved || ';';
  END IF;
  PERFORM set_config(var, coalesce(current_setting(var, true), '') || note, true);
  IF coalesce(current_setting(var || '_t', true), '') = '' OR current_setting(var || '_t')::timestamptz < r.updated_at THEN
    PERFORM set_config(var || '_t', r.updated_at::text, true);
  END IF;
  RETURN NULL;
END
$$;

-- Releases a batch's callbacks that are due (the caller holds the batch's row lock):
-- the failure callback at the first failed or cancelled member, the completion
-- callback once the batch is sealed and every member finished (then a failure
-- callback that never fired is cancelled). The counts go to the callback's metadata
-- under "skiplock_batch" (skiplock.BatchResultOf reads them); batch_release releases
-- one callback with the batch's counts and wakes its queue.
CREATE FUNCTION {{schema}}.batch_release(b {{schema}}.batches, callback uuid, complete boolean, at timestamptz)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  channel CONSTANT text := left((parse_ident('{{schema}}'))[1] || '.jobs', 63);
  q text;
BEGIN
  UPDATE {{schema}}.jobs SET status = 'pending', updated_at = greatest(updated_at, at),
    metadata = coalesce(metadata, '{}'::jsonb) || jsonb_build_object('skiplock_batch',
      json_build_object('id', b.id, 'total', b.total, 'succeeded', b.succeeded, 'failed', b.failed,
                        'cancelled', b.cancelled, 'complete', complete)::text)
  WHERE id = callback AND status = 'waiting'
  RETURNING queue INTO q;
  IF q IS NOT NULL THEN PERFORM pg_notify(channel, q); END IF;
END
$$;

CREATE FUNCTION {{schema}}.batch_fire(batch uuid, at timestamptz) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  b {{schema}}.batches;
BEGIN
  UPDATE {{schema}}.batches SET failure_fired_at = at
  WHERE id = batch AND failure_fired_at IS NULL AND on_failure IS NOT NULL AND failed + cancelled > 0
  RETURNING * INTO b;
  IF FOUND THEN
    PERFORM {{schema}}.batch_release(b, b.on_failure, false, at);
  END IF;
  UPDATE {{schema}}.batches SET completed_at = at
  WHERE id = batch AND completed_at IS NULL AND sealed_at IS NOT NULL AND succeeded + failed + cancelled >= total
  RETURNING * INTO b;
  IF FOUND THEN
    PERFORM {{schema}}.batch_release(b, b.on_complete, true, at);
    UPDATE {{schema}}.jobs SET status = 'cancelled', updated_at = greatest(updated_at, at),
      last_error = 'batch ' || b.id || ' finished without a failure'
    WHERE id = b.on_failure AND status = 'waiting';
  END IF;
END
$$;

CREATE FUNCTION {{schema}}.jobs_flow_settle() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  var CONSTANT text := 'skiplock.flows_' || md5('{{schema}}');
  channel CONSTANT text := left((parse_ident('{{schema}}'))[1] || '.jobs', 63);
  notes text;
  at timestamptz;
  r record;
BEGIN
  LOOP -- settling can fail a parent, which is a note for its own parent
    notes := current_setting(var, true);
    EXIT WHEN notes IS NULL OR notes = '';
    at := current_setting(var || '_t')::timestamptz;
    PERFORM set_config(var, '', true);

    -- Flows: lock the parents in id order, count, then fail or release them.
    PERFORM 1 FROM {{schema}}.jobs p
    WHERE p.id = ANY(ARRAY(SELECT DISTINCT substr(n, 2, 36)::uuid FROM unnest(string_to_array(notes, ';')) AS n
                           WHERE left(n, 1) = 'f'))
    ORDER BY p.id
    FOR NO KEY UPDATE OF p;
    FOR r IN
      WITH e AS (
        SELECT substr(n, 2, 36)::uuid AS id, substr(n, 38, 1) AS fr, substr(n, 39, 1) AS t
        FROM unnest(string_to_array(notes, ';')) AS n WHERE left(n, 1) = 'f'
      ), d AS (
        SELECT id, sum((t = 'o')::int - (fr = 'o')::int) AS open_delta, bool_or(t IN ('f', 'c')) AS failure
        FROM e GROUP BY id
      )
      UPDATE {{schema}}.jobs AS p SET flow_open = p.flow_open + d.open_delta
      FROM d WHERE p.id = d.id AND p.flow_open IS NOT NULL
      RETURNING p.id, p.flow_policy, p.flow_open, d.failure
    LOOP
      IF r.failure AND r.flow_policy = 'fail' THEN
        UPDATE {{schema}}.jobs SET status = 'failed', updated_at = greatest(updated_at, at),
          last_error = 'a child job failed or was cancelled (skiplock flows show ' || r.id || ')'
        WHERE id = r.id AND status = 'waiting';
      ELSIF r.flow_open <= 0 THEN
        UPDATE {{schema}}.jobs SET status = 'pending', updated_at = greatest(updated_at, at)
        WHERE id = r.id AND status = 'waiting';
        IF FOUND THEN
          PERFORM pg_notify(channel, (SELECT queue FROM {{schema}}.jobs WHERE id = r.id));
        END IF;
      END IF;
    END LOOP;

    -- Batches: lock in id order, count, fire the callbacks that are due.
    PERFORM 1 FROM {{schema}}.batches b
    WHERE b.id = ANY(ARRAY(SELECT DISTINCT substr(n, 2, 36)::uuid FROM unnest(string_to_array(notes, ';')) AS n
                           WHERE left(n, 1) = 'b'))
    ORDER BY b.id
    FOR NO KEY UPDATE OF b;
    FOR r IN
      WITH e AS (
        SELECT substr(n, 2, 36)::uuid AS id, substr(n, 38, 1) AS fr, substr(n, 39, 1) AS t
        FROM unnest(string_to_array(notes, ';')) AS n WHERE left(n, 1) = 'b'
      ), d AS (
        -- A deleted member that had not finished counts as cancelled; a deleted one
        -- keeps its count. Deletions before the seal are added to the member count.
        SELECT id,
               sum((t = 's')::int - (fr = 's' AND t <> 'x')::int) AS s,
               sum((t = 'f')::int - (fr = 'f' AND t <> 'x')::int) AS f,
               sum((t = 'c' OR (t = 'x' AND fr = 'o'))::int - (fr = 'c' AND t <> 'x')::int) AS c,
               sum((t = 'x')::int) AS x
        FROM e GROUP BY id
      )
      UPDATE {{schema}}.batches AS b
      SET succeeded = b.succeeded + d.s, failed = b.failed + d.f, cancelled = b.cancelled + d.c, removed = b.removed + d.x
      FROM d WHERE b.id = d.id
      RETURNING b.id
    LOOP
      PERFORM {{schema}}.batch_fire(r.id, at);
    END LOOP;
  END LOOP;
  RETURN NULL;
END
$$;

-- A parent that fails or is cancelled while it waits cancels its children that have
-- not started (pending or waiting; running ones finish), and so on down the tree.
CREATE FUNCTION {{schema}}.jobs_flow_cascade() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  IF OLD.status::text = 'waiting' THEN
    UPDATE {{schema}}.jobs SET status = 'cancelled', updated_at = NEW.updated_at,
      last_error = 'parent ' || NEW.id || ' ' || NEW.status::text
    WHERE parent_id = NEW.id AND status IN ('pending', 'waiting');
  END IF;
  RETURN NULL;
END
$$;

-- Seals a batch: no member can be added any more, and the member count is taken. The
-- row lock waits for transactions still adding members (they hold KEY SHARE on the
-- row), and the count is a statement of its own, so it sees what they committed.
-- Returns false when no batch has the id.
CREATE FUNCTION {{schema}}.batch_seal(batch uuid, at timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  PERFORM 1 FROM {{schema}}.batches WHERE id = batch FOR UPDATE;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  UPDATE {{schema}}.batches
  SET sealed_at = at, total = (SELECT count(*) FROM {{schema}}.jobs WHERE batch_id = batch) + removed
  WHERE id = batch AND sealed_at IS NULL;
  PERFORM {{schema}}.batch_fire(batch, at);
  RETURN true;
END
$$;

-- (Re)creates the triggers on jobs: here, and again by the conversion to the
-- partitioned layout, whose new parent table must carry them.
CREATE FUNCTION {{schema}}.install_flow_triggers() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
  IF to_regclass('{{schema}}.jobs_legacy') IS NOT NULL THEN
    DROP TRIGGER IF EXISTS jobs_flow_note ON {{schema}}.jobs_legacy;
    DROP TRIGGER IF EXISTS jobs_flow_note_delete ON {{schema}}.jobs_legacy;
    DROP TRIGGER IF EXISTS jobs_flow_settle ON {{schema}}.jobs_legacy;
    DROP TRIGGER IF EXISTS jobs_flow_settle_delete ON {{schema}}.jobs_legacy;
    DROP TRIGGER IF EXISTS jobs_flow_cascade ON {{schema}}.jobs_legacy;
  END IF;
  DROP TRIGGER IF EXISTS jobs_flow_note ON {{schema}}.jobs;
  DROP TRIGGER IF EXISTS jobs_flow_note_delete ON {{schema}}.jobs;
  DROP TRIGGER IF EXISTS jobs_flow_settle ON {{schema}}.jobs;
  DROP TRIGGER IF EXISTS jobs_flow_settle_delete ON {{schema}}.jobs;
  DROP TRIGGER IF EXISTS jobs_flow_cascade ON {{schema}}.jobs;
  CREATE TRIGGER jobs_flow_note AFTER UPDATE OF status ON {{schema}}.jobs FOR EACH ROW
    WHEN ((OLD.parent_id IS NOT NULL OR OLD.batch_id IS NOT NULL) AND OLD.status IS DISTINCT FROM NEW.status
          AND (OLD.status IN ('succeeded', 'failed', 'cancelled') OR NEW.status IN ('succeeded', 'failed', 'cancelled')))
    EXECUTE FUNCTION {{schema}}.jobs_flow_note();
  CREATE TRIGGER jobs_flow_note_delete AFTER DELETE ON {{schema}}.jobs FOR EACH ROW
    WHEN (OLD.parent_id IS NOT NULL OR OLD.batch_id IS NOT NULL)
    EXECUTE FUNCTION {{schema}}.jobs_flow_note();
  CREATE CONSTRAINT TRIGGER jobs_flow_settle AFTER UPDATE OF status ON {{schema}}.jobs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.parent_id IS NOT NULL OR OLD.batch_id IS NOT NULL) AND OLD.status IS DISTINCT FROM NEW.status
          AND (OLD.status IN ('succeeded', 'failed', 'cancelled') OR NEW.status IN ('succeeded', 'failed', 'cancelled')))
    EXECUTE FUNCTION {{schema}}.jobs_flow_settle();
  CREATE CONSTRAINT TRIGGER jobs_flow_settle_delete AFTER DELETE ON {{schema}}.jobs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.parent_id IS NOT NULL OR OLD.batch_id IS NOT NULL)
    EXECUTE FUNCTION {{schema}}.jobs_flow_settle();
  CREATE TRIGGER jobs_flow_cascade AFTER UPDATE OF status ON {{schema}}.jobs FOR EACH ROW
    WHEN (OLD.flow_open IS NOT NULL AND NEW.status IN ('failed', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {{schema}}.jobs_flow_cascade();
END
$$;

SELECT {{schema}}.install_flow_triggers();
