-- Per-key sequences (EnqueueOpts.Sequence): jobs with the same sequence_key run one
-- at a time, in enqueue order, across all clients. The claim skips a job while an
-- earlier job of its sequence is pending or running — or failed, unless that job
-- was enqueued with SkipFailed — and this index finds such a predecessor in one
-- probe. It holds only jobs with a sequence key that can still block, so jobs
-- without one never touch it.
ALTER TABLE {{schema}}.jobs ADD COLUMN sequence_key text,
  ADD COLUMN sequence_skip_failed boolean NOT NULL DEFAULT false;

CREATE INDEX jobs_sequence_idx ON {{schema}}.jobs (sequence_key, id)
  WHERE sequence_key IS NOT NULL AND status IN ('pending', 'running', 'failed');
