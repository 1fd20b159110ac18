-- Fair queues (docs/fairness.md): a fair queue's claims take the due jobs of its
-- concurrency keys in turn, so one key's backlog never delays another key's jobs.

-- The setting lives with the queue's other cluster-wide settings. fair_bypass_priority:
-- jobs of this priority or higher skip the rotation and go first, in priority order
-- (NULL: none do; priority then orders jobs only within their key).
ALTER TABLE {{schema}}.queues ADD COLUMN fair boolean NOT NULL DEFAULT false;
ALTER TABLE {{schema}}.queues ADD COLUMN fair_bypass_priority integer;

-- Per-key weights of a fair queue: a key of weight w takes w jobs per turn. A key
-- without a row weighs 1.
CREATE TABLE {{schema}}.fair_weights (
  queue      text NOT NULL,
  key        text NOT NULL,
  weight     integer NOT NULL CHECK (weight BETWEEN 1 AND 1000),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (queue, key)
);

-- The rotation of each fair queue, shared by every client: the key the last claim
-- served last (the next claim starts after it), and whether that claim stopped for
-- want of room rather than of keys (more: another claim can take jobs at once). One
-- row per queue, rewritten by every fair claim of the queue: a low fillfactor keeps
-- those updates HOT.
CREATE TABLE {{schema}}.fair_rotation (
  queue      text PRIMARY KEY,
  last_key   text NOT NULL,
  more       boolean NOT NULL DEFAULT false,
  turns      bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 20);

-- Pending jobs by concurrency key within a queue, in claim order within the key: the
-- fair claim steps from key to key (one descent per key that has pending jobs; keys
-- without any are not in the index) and reads each key's first jobs as one range.
-- Partial over pending rows, so a claim or a completion never writes to it.
CREATE INDEX jobs_fair_idx ON {{schema}}.jobs (queue, concurrency_key, priority DESC, run_at, id)
  WHERE status = 'pending';
