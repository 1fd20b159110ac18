// Package outbox is a transactional outbox on PostgreSQL: events written in the same
// transaction as the business change they describe, then published to a broker or
// webhook by a relay, at least once.
//
// # One entry point
//
// New(client, Config{}) returns the Outbox of a skiplock.Client: it writes into the
// client's schema with the client's clock and payload limit, and everything else —
// the consumer Inbox, the operator Admin, relays — comes from it, so no part of the
// outbox can silently address another schema than its client's:
//
//	ob, err := outbox.New(client, outbox.Config{})
//	id, err := ob.Write(ctx, tx, outbox.Event{...})
//	relay, err := ob.NewRelay(publisher, outbox.RelayConfig{})
//	err = relay.Start(ctx) // … relay.Stop(ctx), as Client.Start and Client.Stop
//	first, err := ob.Inbox().Claim(ctx, tx, "billing", msg.ID)
//	err = ob.Admin().RequeueDead(ctx, pool)
//
// # Writing
//
// Outbox.Write inserts an Event in the caller's transaction — a pgx.Tx, a pool, a
// conn, or database/sql through skiplock.FromSQL. The event exists if and only if
// that transaction commits. Its id is a time-ordered UUID (v7); every published copy
// carries it. WriteMany writes a batch in one round trip. Each write statement also
// sends one NOTIFY on Channel(schema), delivered at commit, which wakes relays
// early; relays poll regardless. Bad input — a nil context or db included — returns
// a *skiplock.ValidationError and writes nothing.
//
// # Relaying
//
// A started Relay (Start and Stop have Client's shape) loops: claim up to BatchSize
// due events (FOR UPDATE SKIP LOCKED, oldest first) and lease them under a fresh
// relay token, counting the attempt; hand them to Publisher.Publish in one call;
// then record each outcome with one statement fenced by the tokens:
//
//	outbox row:  pending ──claim──▶ leased ──publish ok, mark──▶ published ──retention──▶ deleted
//	                ▲                 │  │
//	                │  error: backoff │  └─ permanent error / attempts exhausted ──▶ dead
//	                └─────────────────┘                                            │
//	                ▲  lease expired (relay died): claimable again                  │
//	                └──────────────────────────── Admin.Requeue ◀──────────────────┘
//
// Nothing is marked at claim. A relay that crashes between publish and mark leaves
// its lease to expire; the events are then published again with the same ids, so
// consumers must be idempotent (see Inbox). A relay that was too slow and whose
// events were taken over changes nothing when it finally marks: its token no longer
// matches. Any number of relays may run against one schema.
//
// A publisher error wrapped with skiplock.Permanent parks its event at once. No
// single event or publisher result can stop a relay or hold up the rest of its
// batch: a Publisher that panics or returns the wrong number of results fails the
// batch with a retryable error; error texts are stored through one policy (valid
// UTF-8, no NUL, at most 16 KiB); and an outcome the database refuses for good is
// split off so the others are recorded (see Relay.RunOnce).
//
// A relay's repeating failures (claims, whole-batch publishes, marks) are reported
// as the client's are: logged once and then at most every 30s with a count,
// listed by Relay.Operations, and checked by /readyz when the relay is one of
// health.Options.Components. Its errors match the root's: errors.Is(err,
// skiplock.ErrNotFound) for a missing event, skiplock.ErrInvalid for bad input.
//
// # Ordering
//
// By default events are published roughly in write order, in batches, with no
// per-aggregate guarantee. With RelayConfig.OrderedByAggregate, an event is held back
// while any earlier event (smaller id) of its aggregate is unpublished — being
// relayed, in backoff, or dead. For that to mean commit order, writes must use
// Config.Ordered: a transaction-scoped advisory lock per aggregate taken
// before the id is generated, so two transactions writing to one aggregate are
// serialised and id order equals commit order. See docs/outbox.md for the costs.
//
// # Consumers
//
// Inbox.Claim records a processed event id in the consumer's own transaction with
// ON CONFLICT DO NOTHING, so a handler skips duplicates atomically with its effects.
//
// # Retention
//
// Admin.Prune deletes published events after a window (default 7 days), in batches,
// and dead events only if asked. Inbox.Prune does the same for the inbox.
package outbox
