-- Slot handoff for concurrency limits (docs/limits.md, "Handoff").
--
-- A limited claim may take a job that no slot is free for as the successor of a job
-- the same worker is running under the same buckets: the successor starts on the
-- worker only once its predecessor's handler has returned, and it holds no slot of
-- its own while its predecessor still runs under the lease recorded here. A running
-- job therefore counts against its limits unless slot_of names a job that is still
-- running under slot_token with an unexpired lease. Every claim rewrites both columns
-- (NULL for a job that takes a free slot), so a stale pair never outlives its claim.
-- Nullable without a default: a catalog-only change, no rewrite of the table.
ALTER TABLE {{schema}}.jobs
  ADD COLUMN slot_of uuid,
  ADD COLUMN slot_token uuid;

-- The running successors of a job: a predecessor that already has one is offered no
-- second (two successors of one slot would both hold it once the predecessor ends).
-- Only a successor's claim writes an entry; a plain claim clears slot_of.
CREATE INDEX jobs_slot_of_idx ON {{schema}}.jobs (slot_of) WHERE slot_of IS NOT NULL AND status = 'running';

-- Every claim writes the two columns, so a role that may update a job's lease under
-- a column grant (the worker role of `skiplock roles`) may now update them too: an
-- upgrade must not stop a least-privilege worker from claiming.
DO $$
DECLARE
  g record;
BEGIN
  FOR g IN
    SELECT DISTINCT a.grantee FROM pg_attribute att, aclexplode(att.attacl) a
    WHERE att.attrelid = '{{schema}}.jobs'::regclass AND att.attname = 'lease_token' AND a.privilege_type = 'UPDATE'
  LOOP
    EXECUTE 'GRANT UPDATE (slot_of, slot_token) ON {{schema}}.jobs TO '
      || CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident((SELECT rolname FROM pg_roles WHERE oid = g.grantee)) END;
  END LOOP;
END
$$;
