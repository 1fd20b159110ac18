package store

// The relay's statements on the Citus layout: its claim and its marks name one
// concurrency key, as the workers' do (citusclaim.go), so each runs on the node of the
// key. The relay walks the keys with unpublished events (the key table's queue
// OutboxKeys) in key order, wrapping round, sharing each claim among up to
// CitusKeysPerClaim of them.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OutboxKeys is the key table's queue of the outbox (internal/migrate/citus.sql): a
// name no queue can have.
const OutboxKeys = "\x01outbox"

// CitusKeysPerClaim bounds the keys one claim visits on the Citus layout, each with
// one statement: the relay's, and a worker's (internal/engine/citus.go).
const CitusKeysPerClaim = 8

type citusOutboxStatements struct {
	claim, claimOrdered, finish, keyPrune stmt
}

// citusClaimOutbox is claimOutbox for key $4 under the token $5; %s is the ordered
// mode's predicate.
const citusClaimOutbox = `
WITH c AS (
  SELECT o.id FROM {{s}}.outbox AS o
  WHERE o.concurrency_key = $4 AND o.published_at IS NULL AND o.dead_at IS NULL
    AND o.available_at <= ` + citusNow + `
    AND (o.relay_until IS NULL OR o.relay_until <= ` + citusNow + `)%s
  ORDER BY o.created_at, o.id
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)
UPDATE {{s}}.outbox AS o
SET relay_until = {{s}}.citus_after(` + citusNow + `, $3::bigint),
    relay_token = $5::uuid,
    attempts = o.attempts + 1
WHERE o.concurrency_key = $4 AND o.id = ANY(ARRAY(SELECT id FROM c))
RETURNING `

// citusOrderedPredicate is orderedPredicate within key $4: on this layout an
// aggregate's events are ordered within their key.
const citusOrderedPredicate = `
    AND NOT EXISTS (
      SELECT 1 FROM {{s}}.outbox AS e
      WHERE e.concurrency_key = $4 AND e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id
        AND e.published_at IS NULL AND e.id < o.id)`

func newCitusOutboxStatements(b *builder) citusOutboxStatements {
	returns := outboxPrefixed("o") + ", o.concurrency_key"
	return citusOutboxStatements{
		claim:        b.addCitus(planCitusCustom, "citus_outbox_claim", fmt.Sprintf(citusClaimOutbox, "")+returns),
		claimOrdered: b.addCitus(planCitusCustom, "citus_outbox_claim_ordered", fmt.Sprintf(citusClaimOutbox, citusOrderedPredicate)+returns),

		// outbox_finish for the outcomes of key $7, the time a column of the outcomes
		// (citusRow says why).
		finish: b.addCitus(planCitusCustom, "citus_outbox_finish", `
UPDATE {{s}}.outbox AS o
`+outboxFinishSet("f.now", "{{s}}.citus_after(f.now, f.delay_us)")+`FROM (SELECT u.*, `+citusNow+` AS now
      FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::bigint[], $6::text[]) AS u(id, token, action, delay_us, error)
      OFFSET 0) AS f
WHERE o.concurrency_key = $7 AND o.id = f.id AND o.relay_token = f.token AND `+idIn("o", "$2")+`
RETURNING o.id, CASE WHEN o.dead_at IS NOT NULL THEN 'dead' ELSE f.action END`),

		// citus_key_prune for the outbox: the key has no event left to relay.
		keyPrune: b.addCitus(planCitusCustom, "citus_outbox_key_prune", `
DELETE FROM {{s}}.citus_keys k
WHERE k.concurrency_key = $1 AND k.queue = $2
  AND NOT EXISTS (SELECT 1 FROM {{s}}.outbox o WHERE o.concurrency_key = $1 AND o.published_at IS NULL AND o.dead_at IS NULL)`),
	}
}

// citusOutboxClaim is OutboxClaim on the Citus layout: a claim of each of up to
// CitusKeysPerClaim keys with unpublished events, from where the store's last relay
// claim stopped, each taking its share of p.Limit. A key whose claim finds nothing
// and that has no event left leaves the key table (CitusKeyIdle).
func (s *Store) citusOutboxClaim(ctx context.Context, db DBTX, now *time.Time, p OutboxClaimParams) ([]*OutboxEvent, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	keys, _, err := s.citusWalk(ctx, db, now, OutboxKeys, &s.outboxCursor, min(p.Limit, CitusKeysPerClaim))
	if err != nil {
		return nil, err
	}
	st := s.citusOut.claim
	if p.Ordered {
		st = s.citusOut.claimOrdered
	}
	share := 0
	if len(keys) > 0 {
		share = (p.Limit + len(keys) - 1) / len(keys)
	}
	var out []*OutboxEvent
	for _, k := range keys {
		if len(out) >= p.Limit {
			break
		}
		token, err := randomUUID()
		if err != nil {
			return out, err
		}
		evs, err := guarded(ctx, db, st, func(rows pgx.Rows, err error) ([]*OutboxEvent, error) {
			return collect(rows, err, scanCitusOutboxEvent)
		}, Now(now), min(share, p.Limit-len(out)), micros(p.Lease), k, token)
		if err != nil {
			return out, err
		}
		key := k
		s.outboxCursor.after.Store(&key)
		out = append(out, evs...)
		if len(evs) == 0 {
			if b, ok := db.(Beginner); ok {
				if _, err := s.citusKeyIdle(ctx, b, OutboxKeys, k, s.citusOut.keyPrune, now); err != nil {
					return out, err
				}
			}
		}
	}
	return out, nil
}

// scanCitusOutboxEvent reads a claimed event and its key.
func scanCitusOutboxEvent(row pgx.Row) (*OutboxEvent, error) {
	var e OutboxEvent
	err := row.Scan(&e.ID, &e.AggregateType, &e.AggregateID, &e.EventType, &e.Destination, &e.Payload, &e.Headers,
		&e.Attempts, &e.MaxAttempts, &e.AvailableAt, &e.RelayUntil, &e.RelayToken, &e.PublishedAt, &e.DeadAt,
		&e.LastError, &e.CreatedAt, &e.TxID, &e.ConcurrencyKey)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// citusOutboxFinish is OutboxFinish on the Citus layout: one statement per key.
func (s *Store) citusOutboxFinish(ctx context.Context, db DBTX, now *time.Time, outs []OutboxOutcome) (map[string]OutboxAction, error) {
	out := make(map[string]OutboxAction, len(outs))
	keys, groups := byKey(outs, func(o OutboxOutcome) string { return o.Key })
	for _, k := range keys {
		idx := groups[k]
		ids, tokens, actions, delays, errs := make([]string, len(idx)), make([]string, len(idx)), make([]string, len(idx)), make([]int64, len(idx)), make([]*string, len(idx))
		for i, p := range idx {
			o := outs[p]
			ids[i], tokens[i], actions[i], delays[i] = o.ID, o.Token, string(o.Action), micros(o.Delay)
			if o.Error != "" {
				e := o.Error
				errs[i] = &e
			}
		}
		m, err := guarded(ctx, db, s.citusOut.finish, collectMap[string], Now(now), uuidArg(ids), uuidArg(tokens), actions, delays, errs, k)
		if err != nil {
			return nil, err
		}
		for id, a := range m {
			out[id] = OutboxAction(a)
		}
	}
	return out, nil
}
