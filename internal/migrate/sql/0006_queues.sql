-- Queue settings shared by every client. A row exists only for a queue someone
-- configured (paused, today); a queue without a row is active. The claim reads it by
-- primary key once per statement, so a pause takes effect at every client's next
-- claim, with no process memory to go stale.
CREATE TABLE {{schema}}.queues (
  name       text PRIMARY KEY,
  paused_at  timestamptz,
  updated_at timestamptz NOT NULL DEFAULT now()
);
