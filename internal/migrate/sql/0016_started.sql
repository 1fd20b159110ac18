-- Whether a running job's handler has started (docs/state_machine.md, "claimed").
--
-- A claim leases jobs that do not all start at once: those beyond the worker's idle
-- executors wait in its local queue (the prefetch), and a limit slot's successor
-- waits for its predecessor's handler (0014). Such a job is running by its lease —
-- it holds the job, its limits count it where docs/limits.md says so — but no handler
-- runs it yet, and no view may call it running. Every claim writes this column:
-- false for the jobs that will wait, true for those an idle executor takes at once.
-- The worker writes true once a waiting job's handler starts (with the next lease
-- renewal, at most about a second after the start), and its outcome ends the run
-- anyway. The value means nothing for a job that is not running.
--
-- "Claimed" = status 'running' AND NOT started; "running" = status 'running' AND started.
-- NOT NULL with a constant default: a catalog-only change, no rewrite of the table.
ALTER TABLE {{schema}}.jobs ADD COLUMN started boolean NOT NULL DEFAULT true;

-- Every claim writes the column, so a role that may update a job's lease under a
-- column grant (the worker role of `skiplock roles`) may now update it too: an
-- upgrade must not stop a least-privilege worker from claiming.
DO $$
DECLARE
  g record;
BEGIN
  FOR g IN
    SELECT DISTINCT a.grantee FROM pg_attribute att, aclexplode(att.attacl) a
    WHERE att.attrelid = '{{schema}}.jobs'::regclass AND att.attname = 'lease_token' AND a.privilege_type = 'UPDATE'
  LOOP
    EXECUTE 'GRANT UPDATE (started) ON {{schema}}.jobs TO '
      || CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident((SELECT rolname FROM pg_roles WHERE oid = g.grantee)) END;
  END LOOP;
END
$$;
