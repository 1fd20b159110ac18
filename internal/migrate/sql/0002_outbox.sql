-- skiplock schema, version 2: what the outbox relay, its ordered mode, retention and
-- the consumer inbox need. 0001 created the outbox table and its claim index.
--
-- None of these indexes mentions relay_until, relay_token or attempts, the columns the
-- claim writes, so a claim stays eligible for a HOT update. Marking an event published
-- or dead changes an indexed predicate column anyway (outbox_unpublished_idx), so the
-- indexes below cost nothing more on that path than one insert each.

-- Ordered relay: "is there an unpublished event of this aggregate with a smaller id?"
-- Dead events are unpublished and therefore block their aggregate (see docs/outbox.md).
CREATE INDEX outbox_aggregate_unpublished_idx ON {{schema}}.outbox (aggregate_type, aggregate_id, id)
  WHERE published_at IS NULL;

-- Retention of published events, oldest first; never touched by claim.
CREATE INDEX outbox_published_idx ON {{schema}}.outbox (published_at)
  WHERE published_at IS NOT NULL;

-- Dead (parked) events: listing, requeue and optional retention.
CREATE INDEX outbox_dead_idx ON {{schema}}.outbox (dead_at, id)
  WHERE dead_at IS NOT NULL AND published_at IS NULL;

-- Consumer inbox: the event ids a consumer has processed, written in the consumer's
-- own transaction so "did I already handle this?" commits with the handler's effects.
CREATE TABLE {{schema}}.inbox (
  consumer     text NOT NULL,
  event_id     text NOT NULL,
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, event_id)
);

CREATE INDEX inbox_processed_idx ON {{schema}}.inbox (processed_at);

-- A relay token exists only on an event that is neither published nor dead, so the
-- fenced mark can match on (id, relay_token) alone.
ALTER TABLE {{schema}}.outbox ADD CONSTRAINT outbox_token_only_unfinished
  CHECK (relay_token IS NULL OR (published_at IS NULL AND dead_at IS NULL));
