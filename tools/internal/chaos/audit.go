package chaos

// A round's schema: migrating it, installing the chaos audit (tables and the
// triggers that record every job transition) and dropping it after a clean round.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
)

// prepare migrates the round's schema and installs the audit tables and trigger.
func (r *round) prepare(ctx context.Context) error {
	if r.s.citus {
		if err := r.prepareCitus(ctx); err != nil {
			return err
		}
	} else {
		if _, err := skiplock.Migrate(ctx, r.h.pool, r.schema); err != nil {
			return fmt.Errorf("migrating %s: %w", r.schema, err)
		}
		if _, err := r.h.pool.Exec(ctx, auditDDL(r.schema)+auditTriggersDDL(r.schema)); err != nil {
			return fmt.Errorf("installing the audit in %s: %w", r.schema, err)
		}
	}
	r.h.consumer.reset(r.h.pool, r.schema)
	if r.s.broker {
		if err := declareQueue(r.h.rabbit.url, r.schema); err != nil {
			return err
		}
	}
	return nil
}

func (r *round) dropSchema() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r.s.citus {
		if _, err := r.h.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident.Quote(r.snapshotSchema())+" CASCADE"); err != nil {
			r.log.Debug("chaos: dropping schema", "schema", r.snapshotSchema(), "error", err)
		}
	}
	if _, err := r.h.pool.Exec(ctx, "DROP SCHEMA "+ident.Quote(r.schema)+" CASCADE"); err != nil {
		r.log.Debug("chaos: dropping schema", "schema", r.schema, "error", err)
	}
}

// auditDDL is the chaos audit of schema: tables, and the trigger functions that record
// every job transition with the token of the job's latest claim (auditTriggersDDL
// installs them).
func auditDDL(schema string) string {
	q := ident.Quote(schema)
	return strings.ReplaceAll(`
-- concurrency_key: the job's, so that on Citus (citus.go) the row sits in the shard
-- of its job (the tables that carry it are distributed and co-located with jobs
-- there); '' on one node. Every key below contains it for that reason.
CREATE TABLE {s}.chaos_enqueued (
  job_id   uuid NOT NULL,
  event_id uuid,
  concurrency_key text NOT NULL DEFAULT '',
  at       timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (job_id, concurrency_key)
);
CREATE TABLE {s}.chaos_audit (
  seq         bigserial PRIMARY KEY,
  job_id      uuid NOT NULL,
  worker      text NOT NULL,
  lease_token uuid,
  event       text NOT NULL,
  at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON {s}.chaos_audit (job_id, lease_token);
CREATE TABLE {s}.chaos_consumed (
  event_id text NOT NULL,
  at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE {s}.chaos_transitions (
  seq          bigserial NOT NULL,
  job_id       uuid NOT NULL,
  concurrency_key text NOT NULL DEFAULT '',
  old_status   text NOT NULL,
  new_status   text NOT NULL,
  old_token    uuid,
  new_token    uuid,
  new_attempts integer NOT NULL,
  worker       text,
  latest_claim uuid,
  stale        boolean NOT NULL,
  app          text NOT NULL DEFAULT current_setting('application_name'),
  at           timestamptz NOT NULL DEFAULT clock_timestamp(),
  -- For the flow-control audit (limitaudit.go): a claim's own time (the claim's
  -- attempted_at), and on a transition out of 'running' the lease it ended under.
  claimed_at      timestamptz,
  old_lease_until timestamptz,
  -- A claim's predecessor (a limit slot's handoff): the claimed job holds no slot
  -- while that job runs under that token with a valid lease.
  slot_of         uuid,
  slot_token      uuid,
  -- The reclaimer ended this run: its lease had expired (or so the reclaimer's
  -- statement judged; the failover scenarios check it against old_lease_until).
  reclaim         boolean NOT NULL DEFAULT false,
  PRIMARY KEY (seq, concurrency_key)
);
CREATE INDEX ON {s}.chaos_transitions (job_id, seq);
CREATE INDEX ON {s}.chaos_transitions (old_token);
-- A lease extended after it had expired (a heartbeat racing its expiry): the job
-- held no slot from expired_at until this write, and holds one again from it. Rows
-- share chaos_transitions' sequence, so seq orders them among the job's transitions.
CREATE TABLE {s}.chaos_revivals (
  seq        bigint NOT NULL DEFAULT nextval('{s}.chaos_transitions_seq_seq'),
  job_id     uuid NOT NULL,
  concurrency_key text NOT NULL DEFAULT '',
  token      uuid,
  expired_at timestamptz NOT NULL,
  lease_until timestamptz NOT NULL,
  at         timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (seq, concurrency_key)
);

-- Every change of status or token (a heartbeat changes neither and is skipped). A
-- transition out of 'running' is stale when the token it replaced is not the token
-- the job's latest claim received; a running→running change of token is a second
-- claim of a running job. Rows of one job are serialised by its row lock, so seq
-- order is the order of that job's transitions.
CREATE FUNCTION {s}.chaos_audit_transition() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  latest uuid;
BEGIN
  IF OLD.status = NEW.status AND OLD.lease_token IS NOT DISTINCT FROM NEW.lease_token THEN
    IF NEW.status = 'running' AND NEW.lease_until > OLD.lease_until AND OLD.lease_until <= clock_timestamp() THEN
      INSERT INTO {s}.chaos_revivals (job_id, concurrency_key, token, expired_at, lease_until)
      VALUES (NEW.id, NEW.concurrency_key, NEW.lease_token, OLD.lease_until, NEW.lease_until);
    END IF;
    RETURN NULL;
  END IF;
  IF OLD.status = 'running' THEN
    SELECT t.new_token INTO latest FROM {s}.chaos_transitions t
    WHERE t.job_id = NEW.id AND t.concurrency_key = NEW.concurrency_key
      AND t.new_status = 'running' AND t.old_status <> 'running'
    ORDER BY t.seq DESC LIMIT 1;
  END IF;
  INSERT INTO {s}.chaos_transitions (job_id, concurrency_key, old_status, new_status, old_token, new_token, new_attempts, worker, latest_claim, stale,
                                     claimed_at, old_lease_until, slot_of, slot_token, reclaim)
  VALUES (NEW.id, NEW.concurrency_key, OLD.status, NEW.status, OLD.lease_token, NEW.lease_token, NEW.attempts,
          coalesce(NEW.worker_id, OLD.worker_id), latest,
          OLD.status = 'running' AND (OLD.lease_token IS DISTINCT FROM latest
                                      OR (NEW.status = 'running' AND NEW.lease_token IS DISTINCT FROM OLD.lease_token)),
          CASE WHEN NEW.status = 'running' AND NEW.lease_token IS DISTINCT FROM OLD.lease_token THEN NEW.attempted_at END,
          CASE WHEN OLD.status = 'running' THEN OLD.lease_until END,
          CASE WHEN NEW.status = 'running' THEN NEW.slot_of END,
          CASE WHEN NEW.status = 'running' THEN NEW.slot_token END,
          OLD.status = 'running' AND NEW.status <> 'running' AND NEW.last_error LIKE 'lease expired on worker %'
            AND NEW.last_error IS DISTINCT FROM OLD.last_error);
  RETURN NULL;
END
$$;

-- A deleted job is recorded too: nothing in these scenarios deletes jobs.
CREATE FUNCTION {s}.chaos_audit_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {s}.chaos_transitions (job_id, concurrency_key, old_status, new_status, old_token, new_token, new_attempts, worker, latest_claim, stale)
  VALUES (OLD.id, OLD.concurrency_key, OLD.status, 'deleted', OLD.lease_token, NULL, OLD.attempts, OLD.worker_id, NULL, false);
  RETURN NULL;
END
$$;
`, "{s}", q)
}

// auditTriggersDDL puts auditDDL's functions on schema's jobs. On Citus they are
// created once the audit tables are distributed (citus.go).
func auditTriggersDDL(schema string) string {
	return strings.ReplaceAll(`
CREATE TRIGGER chaos_audit_transition AFTER UPDATE ON {s}.jobs
  FOR EACH ROW EXECUTE FUNCTION {s}.chaos_audit_transition();
CREATE TRIGGER chaos_audit_delete AFTER DELETE ON {s}.jobs
  FOR EACH ROW EXECUTE FUNCTION {s}.chaos_audit_delete();
`, "{s}", ident.Quote(schema))
}
