-- Metadata: small string key/value pairs given at enqueue (EnqueueOpts.Metadata) —
-- the caller's trace context, a tenant, a request id — and returned with the job.
-- Nullable with no default, so adding it to a large table rewrites nothing.
ALTER TABLE {{schema}}.jobs ADD COLUMN metadata jsonb;

-- lease_lost aborts the caller's transaction: Client.CompleteTx calls it when its
-- fenced completion matched no row (the lease was lost and the job taken over), so
-- nothing else the stale worker wrote in that transaction can commit. SQLSTATE SK409
-- is skiplock's own class; the Go side maps it to ErrLeaseLost.
CREATE FUNCTION {{schema}}.lease_lost(job_id uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'skiplock: lease lost for job %: it is no longer running under this lease', job_id
    USING ERRCODE = 'SK409', HINT = 'the job was reclaimed or cancelled; nothing of this transaction is kept';
END
$$;
