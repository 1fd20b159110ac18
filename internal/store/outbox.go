package store

// The outbox's statements: write (with optional per-aggregate advisory locks), the
// relay's claim and fenced finish, operator requeue, retention and counts. The
// consumer inbox is in inbox.go.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// outboxColumns lists what the claim and Get return, in scanOutboxEvent's order.
const outboxColumns = `id, aggregate_type, aggregate_id, event_type, destination, payload, headers,
  attempts, max_attempts, available_at, relay_until, relay_token, published_at, dead_at, last_error, created_at,
  txid::text::bigint`

func outboxPrefixed(p string) string {
	cols := strings.Split(strings.ReplaceAll(outboxColumns, "\n", ""), ",")
	for i, c := range cols {
		cols[i] = p + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// claimOutbox is the claim's template; %s is the extra predicate of ordered mode.
// Rows are locked in (created_at, id) order through outbox_unpublished_idx, skipping
// rows other relays hold; due (available_at) and not under a live relay lease. The
// same statement leases them under a fresh token, one for the statement as a job
// claim's (claimSet says why), and counts the attempt.
const claimOutbox = `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, ` + claimToken + `),
c AS (
  SELECT o.id FROM {{s}}.outbox AS o
  WHERE o.published_at IS NULL AND o.dead_at IS NULL
    AND o.available_at <= (SELECT now FROM t)
    AND (o.relay_until IS NULL OR o.relay_until <= (SELECT now FROM t))%s
  ORDER BY o.created_at, o.id
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)
UPDATE {{s}}.outbox AS o
SET relay_until = t.now + $3::bigint * interval '1 microsecond',
    relay_token = t.token,
    attempts = o.attempts + 1
FROM t
WHERE o.id = ANY(ARRAY(SELECT id FROM c)) -- a primary-key index condition, never a hash join on a scan
RETURNING `

// orderedPredicate keeps back every event that has an unpublished predecessor (smaller
// id) of the same aggregate: one being relayed, one in backoff, and a dead one.
const orderedPredicate = `
    AND NOT EXISTS (
      SELECT 1 FROM {{s}}.outbox AS e
      WHERE e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id
        AND e.published_at IS NULL AND e.id < o.id)`

type outboxStatements struct {
	insertCitus                                                                                                                      stmt
	insert, claim, claimOrdered, finish, get, listDead, listPending, listPublished, byTx, requeue, prunePublished, pruneDead, counts stmt
}

func newOutboxStatements(b *builder) outboxStatements {
	return outboxStatements{
		// Insert a batch in one statement. In ordered mode ($10) it first takes a
		// transaction-scoped advisory lock per distinct aggregate, in key order (so two
		// batches cannot deadlock on each other), and only then reads clock_timestamp()
		// for the ids: t is computed from lk's single aggregate row, so every lock is held
		// before any id exists. A writer of the same aggregate that committed earlier
		// therefore always has a smaller id, and one that has not committed yet makes this
		// statement wait. $11 is the NOTIFY channel ('' sends none); one per statement,
		// delivered at commit, dropped on rollback.
		insert: b.add("outbox_insert", outboxInsertSQL(false)),
		// On the Citus layout an event names its concurrency_key ($12), the distribution
		// column, so it lands in the shard of its tenant's jobs and rows.
		insertCitus: b.addFor(LayoutCitus, "outbox_insert_citus", outboxInsertSQL(true)),

		claim:        b.addGuarded(planGuardOn, "outbox_claim", fmt.Sprintf(claimOutbox, "")+outboxPrefixed("o")),
		claimOrdered: b.addGuarded(planGuardOn, "outbox_claim_ordered", fmt.Sprintf(claimOutbox, orderedPredicate)+outboxPrefixed("o")),

		// Finish applies a batch's outcomes in one statement, each fenced by its relay
		// token: a relay whose lease was taken over changes nothing. The CHECK
		// outbox_token_only_unfinished makes a token match imply "unpublished and not
		// dead"; saying so in the WHERE let the planner loop over the unpublished-events
		// index once per outcome on a table without statistics.
		//   published: published_at set, lease cleared.
		//   retry:     due again after the delay, or dead once attempts are exhausted.
		//   dead:      parked at once (permanent error, or the lease expired on the last attempt).
		//   release:   the relay gives the event back unpublished (shutdown mid-publish):
		//              due now, and the claim's attempt is returned.
		finish: b.addGuarded(planGuardByID, "outbox_finish", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.outbox AS o
`+outboxFinishSet("t.now", "t.now + f.delay_us * interval '1 microsecond'")+`FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::bigint[], $6::text[]) AS f(id, token, action, delay_us, error), t
WHERE o.id = f.id AND o.relay_token = f.token AND `+idIn("o", "$2")+`
RETURNING o.id, CASE WHEN o.dead_at IS NOT NULL THEN 'dead' ELSE f.action END`),

		get: b.addGuarded(planGuardOn, "outbox_get", `SELECT `+outboxColumns+` FROM {{s}}.outbox WHERE id = $1`),

		// Dead events, oldest parking first, keyset-paged by (dead_at, id).
		listDead: b.addGuarded(planGuardOn, "outbox_list_dead", `
SELECT `+outboxColumns+` FROM {{s}}.outbox
WHERE dead_at IS NOT NULL AND published_at IS NULL
  AND ($1::timestamptz IS NULL OR (dead_at, id) > ($1::timestamptz, $2::uuid))
ORDER BY dead_at, id
LIMIT $3`),

		// The events one transaction wrote: one range of the lineage table's index, then
		// the events by primary key.
		byTx: b.addGuarded(planGuardOn, "outbox_by_tx", `
SELECT `+outboxColumns+` FROM {{s}}.outbox
WHERE id = ANY(ARRAY(SELECT event_id FROM {{s}}.tx_lineage WHERE txid = $1::bigint::text::xid8 AND event_id IS NOT NULL))
ORDER BY id`),

		// Pending (not yet published, not dead) events, oldest first, keyset-paged by
		// (created_at, id): a range of outbox_unpublished_idx.
		listPending: b.add("outbox_list_pending", `
SELECT `+outboxColumns+` FROM {{s}}.outbox
WHERE published_at IS NULL AND dead_at IS NULL
  AND ($1::timestamptz IS NULL OR (created_at, id) > ($1::timestamptz, $2::uuid))
ORDER BY created_at, id
LIMIT $3`),

		// Published events, oldest publication first, keyset-paged by
		// (published_at, id): a range of outbox_published_idx.
		listPublished: b.addGuarded(planGuardOn, "outbox_list_published", `
SELECT `+outboxColumns+` FROM {{s}}.outbox
WHERE published_at IS NOT NULL
  AND ($1::timestamptz IS NULL OR (published_at, id) > ($1::timestamptz, $2::uuid))
ORDER BY published_at, id
LIMIT $3`),

		// Requeue gives dead events a fresh attempt budget and makes them due now.
		// $2 NULL requeues every dead event.
		requeue: b.addGuarded(planGuardOn, "outbox_requeue", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.outbox AS o
SET dead_at = NULL, attempts = 0, available_at = t.now, relay_until = NULL, relay_token = NULL
FROM t
WHERE o.dead_at IS NOT NULL AND o.published_at IS NULL AND ($2::uuid IS NULL OR o.id = $2)
RETURNING o.id`),

		// Retention deletes one batch; callers loop. SKIP LOCKED keeps two pruners (or a
		// pruner and an operator) from waiting on each other.
		// The prunes find and lock their events first, then delete them by id: no join
		// for a plan to get wrong (a plan made on a drained outbox walked its whole
		// primary key for each batch).
		prunePublished: b.addGuarded(planGuardOn, "outbox_prune_published", `
DELETE FROM {{s}}.outbox
WHERE id = ANY(ARRAY(
  SELECT id FROM {{s}}.outbox
  WHERE published_at IS NOT NULL
    AND published_at < coalesce($1::timestamptz, now()) - $2::bigint * interval '1 microsecond'
  ORDER BY published_at
  LIMIT $3
  FOR UPDATE SKIP LOCKED))`),

		pruneDead: b.addGuarded(planGuardOn, "outbox_prune_dead", `
DELETE FROM {{s}}.outbox
WHERE id = ANY(ARRAY(
  SELECT id FROM {{s}}.outbox
  WHERE dead_at IS NOT NULL AND published_at IS NULL
    AND dead_at < coalesce($1::timestamptz, now()) - $2::bigint * interval '1 microsecond'
  ORDER BY dead_at
  LIMIT $3
  FOR UPDATE SKIP LOCKED))`),

		// Counts for stats and benchmarks.
		counts: b.add("outbox_counts", `
SELECT count(*) FILTER (WHERE published_at IS NULL AND dead_at IS NULL),
       count(*) FILTER (WHERE published_at IS NOT NULL),
       count(*) FILTER (WHERE dead_at IS NOT NULL AND published_at IS NULL)
FROM {{s}}.outbox`),
	}
}

// OutboxEvent is a row of the outbox table.
type OutboxEvent struct {
	ID            string
	AggregateType string
	AggregateID   string
	EventType     string
	Destination   string
	Payload       []byte
	Headers       map[string]string
	Attempts      int
	MaxAttempts   int
	AvailableAt   time.Time
	RelayUntil    *time.Time
	RelayToken    *string
	PublishedAt   *time.Time
	DeadAt        *time.Time
	LastError     *string
	CreatedAt     time.Time
	TxID          *int64 // the writing transaction's id; nil for events older than the column
	// ConcurrencyKey is the event's key on the Citus layout, read by the relay's
	// claim there ("" otherwise).
	ConcurrencyKey string
}

func scanOutboxEvent(row pgx.Row) (*OutboxEvent, error) {
	var e OutboxEvent
	err := row.Scan(&e.ID, &e.AggregateType, &e.AggregateID, &e.EventType, &e.Destination, &e.Payload, &e.Headers,
		&e.Attempts, &e.MaxAttempts, &e.AvailableAt, &e.RelayUntil, &e.RelayToken, &e.PublishedAt, &e.DeadAt,
		&e.LastError, &e.CreatedAt, &e.TxID)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

func collectOutboxEvents(rows pgx.Rows, err error) ([]*OutboxEvent, error) {
	return collect(rows, err, scanOutboxEvent)
}

// outboxInsertSQL is the outbox's insert of a batch; with key, each event also names
// its concurrency_key, a column of the Citus layout only.
func outboxInsertSQL(key bool) string {
	keyArg, keyCol := "", ""
	if key {
		keyArg, keyCol = ", $12::text[]", ", concurrency_key"
	}
	return `
WITH lk AS MATERIALIZED (
  SELECT count(l.locked) AS n FROM (
    SELECT pg_advisory_xact_lock(k.key) AS locked FROM (
      SELECT DISTINCT hashtextextended($2 || length(a.t) || ':' || a.t || a.i, 0) AS key
      FROM unnest($3::text[], $4::text[]) AS a(t, i)
      WHERE $10::bool
      ORDER BY key
    ) AS k
  ) AS l
),
t AS MATERIALIZED (
  SELECT coalesce($1::timestamptz, now()) AS now, clock_timestamp() AS ts,
         (SELECT count(*) FROM (SELECT pg_notify($11, '') WHERE $11 <> '') AS x) AS notified
  FROM lk
),
input AS MATERIALIZED (
  SELECT {{s}}.uuid_v7(t.ts, e.ord) AS id, t.now, e.*
  FROM t, unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::jsonb[], $9::int[]` + keyArg + `)
       WITH ORDINALITY AS e(aggregate_type, aggregate_id, event_type, destination, payload, headers, max_attempts` + keyCol + `, ord)
  WHERE t.notified >= 0
),
ins AS (
  INSERT INTO {{s}}.outbox (id, aggregate_type, aggregate_id, event_type, destination, payload, headers,
                            max_attempts, available_at, created_at` + keyCol + `)
  SELECT id, aggregate_type, aggregate_id, event_type, destination, payload, headers, max_attempts, now, now` + keyCol + `
  FROM input
  ORDER BY ord
  RETURNING id
)
SELECT input.id FROM input ORDER BY input.ord`
}

// OutboxInsertParams describe one event to write.
type OutboxInsertParams struct {
	AggregateType string
	AggregateID   string
	EventType     string
	Destination   string
	Payload       []byte // valid JSON
	Headers       []byte // a JSON object of strings
	MaxAttempts   int
	// ConcurrencyKey places the event on the Citus layout: in the shard of that key,
	// beside its tenant's jobs. The single-node layout has no column for it and
	// ignores it.
	ConcurrencyKey string
}

// OutboxInsertOptions apply to a whole insert statement.
type OutboxInsertOptions struct {
	// Ordered takes a transaction-scoped advisory lock per distinct aggregate before
	// the ids are generated (see the statement's comment).
	Ordered bool
	// Channel is the NOTIFY channel; empty sends no notification.
	Channel string
}

// OutboxInsert writes events in one statement and returns their ids in input order.
func (s *Store) OutboxInsert(ctx context.Context, db DBTX, now *time.Time, evs []OutboxInsertParams, o OutboxInsertOptions) ([]string, error) {
	n := len(evs)
	types, ids, etypes, dests := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads, headers, maxes, ckeys := make([]string, n), make([]string, n), make([]int32, n), make([]string, n)
	keyed := false
	for i, e := range evs {
		types[i], ids[i], etypes[i], dests[i] = e.AggregateType, e.AggregateID, e.EventType, e.Destination
		payloads[i], headers[i], maxes[i], ckeys[i] = string(e.Payload), string(e.Headers), int32(e.MaxAttempts), e.ConcurrencyKey
		keyed = keyed || e.ConcurrencyKey != ""
	}
	ns := "skiplock.outbox." + s.Schema + "."
	q, args := s.outbox.insert.sql, []any{Now(now), ns, types, ids, etypes, dests, payloads, headers, maxes, o.Ordered, o.Channel}
	if keyed { // without a key an event takes the column's default, '', on either layout
		dist, err := s.Distributed(ctx, db)
		if err != nil {
			return nil, err
		}
		if dist {
			q, args = s.outbox.insertCitus.sql, append(args, ckeys)
		}
	}
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]string, 0, n)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, fmt.Errorf("store: outbox insert returned %d ids for %d events", len(out), n)
	}
	return out, nil
}

// OutboxClaimParams describe one relay claim.
type OutboxClaimParams struct {
	Limit   int
	Lease   time.Duration
	Ordered bool // hold back events with an unpublished predecessor of their aggregate
}

// OutboxClaim leases up to p.Limit due events under a fresh relay token each, counting
// the attempt. Events come back in claim order (created_at, id).
func (s *Store) OutboxClaim(ctx context.Context, db DBTX, now *time.Time, p OutboxClaimParams) ([]*OutboxEvent, error) {
	if dist, err := s.Distributed(ctx, db); err != nil {
		return nil, err
	} else if dist {
		evs, err := s.citusOutboxClaim(ctx, db, now, p)
		sortBatch(evs, outboxClaimOrder)
		return evs, err
	}
	st := s.outbox.claim
	if p.Ordered {
		st = s.outbox.claimOrdered
	}
	evs, err := guarded(ctx, db, st, collectOutboxEvents, Now(now), p.Limit, micros(p.Lease))
	if err != nil {
		return nil, err
	}
	// UPDATE … RETURNING does not keep the CTE's order.
	sortBatch(evs, outboxClaimOrder)
	return evs, nil
}

// outboxClaimOrder compares as the claim's ORDER BY created_at, id.
func outboxClaimOrder(a, b *OutboxEvent) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// OutboxAction is what the relay reports for a claimed event.
type OutboxAction string

// The outcomes OutboxFinish accepts (and reports back; "retry" may come back "dead"
// when the event had used its last attempt).
const (
	OutboxPublished OutboxAction = "published"
	OutboxRetry     OutboxAction = "retry"
	OutboxDead      OutboxAction = "dead"
	OutboxRelease   OutboxAction = "release"
)

// OutboxOutcome is one claimed event's result, fenced by its relay token.
type OutboxOutcome struct {
	ID     string
	Token  string
	Action OutboxAction
	Delay  time.Duration // retry
	Error  string        // retry, dead
	// Key is the event's concurrency key: on the Citus layout the mark names it.
	Key string
}

// OutboxFinish applies outcomes in one statement and returns, for each event it
// changed, the action it took. An event missing from the map was no longer held under
// the given token (its lease was taken over): nothing was written for it.
func (s *Store) OutboxFinish(ctx context.Context, db DBTX, now *time.Time, outs []OutboxOutcome) (map[string]OutboxAction, error) {
	if len(outs) > 0 {
		if dist, err := s.Distributed(ctx, db); err != nil {
			return nil, err
		} else if dist {
			return s.citusOutboxFinish(ctx, db, now, outs)
		}
	}
	n := len(outs)
	ids, tokens, actions, delays, errs := make([]string, n), make([]string, n), make([]string, n), make([]int64, n), make([]*string, n)
	for i, o := range outs {
		ids[i], tokens[i], actions[i], delays[i] = o.ID, o.Token, string(o.Action), micros(o.Delay)
		if o.Error != "" {
			e := o.Error
			errs[i] = &e
		}
	}
	return guarded(ctx, db, s.outbox.finish, func(rows pgx.Rows, err error) (map[string]OutboxAction, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		m := make(map[string]OutboxAction, n)
		for rows.Next() {
			var id, a string
			if err := rows.Scan(&id, &a); err != nil {
				return nil, err
			}
			m[id] = OutboxAction(a)
		}
		return m, rows.Err()
	}, Now(now), uuidArg(ids), uuidArg(tokens), actions, delays, errs)
}

// OutboxGet returns one event, or pgx.ErrNoRows.
func (s *Store) OutboxGet(ctx context.Context, db DBTX, id string) (*OutboxEvent, error) {
	return guardedRow(ctx, db, s.outbox.get, scanOutboxEvent, id)
}

// OutboxList returns up to limit events in state ("pending", "dead" or "published") after the cursor (afterAt, afterID) — created_at, dead_at or
// published_at respectively, and the id; nil afterAt for the first page — oldest
// first.
func (s *Store) OutboxList(ctx context.Context, db DBTX, state string, afterAt *time.Time, afterID string, limit int) ([]*OutboxEvent, error) {
	var st stmt
	switch state {
	case "pending":
		st = s.outbox.listPending
	case "dead":
		st = s.outbox.listDead
	case "published":
		st = s.outbox.listPublished
	default:
		return nil, fmt.Errorf("store: unknown outbox state %q", state)
	}
	var after *string
	if afterAt != nil {
		after = &afterID
	}
	return guarded(ctx, db, st, collectOutboxEvents, Now(afterAt), after, limit)
}

// OutboxRequeue makes dead events due now with a fresh attempt budget: the one with
// id, or every dead event when id is empty. It returns the ids it requeued.
func (s *Store) OutboxRequeue(ctx context.Context, db DBTX, now *time.Time, id string) ([]string, error) {
	return guarded(ctx, db, s.outbox.requeue, func(rows pgx.Rows, err error) ([]string, error) {
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}, Now(now), nullable(id))
}

// OutboxPrunePublished deletes up to limit events published more than olderThan ago.
func (s *Store) OutboxPrunePublished(ctx context.Context, db DBTX, now *time.Time, olderThan time.Duration, limit int) (int64, error) {
	if dist, err := s.Distributed(ctx, db); err != nil {
		return 0, err
	} else if dist {
		return s.citusOutboxPrune(ctx, db, now, olderThan, limit, false)
	}
	return guarded(ctx, db, s.outbox.prunePublished, affected, Now(now), micros(olderThan), limit)
}

// OutboxPruneDead deletes up to limit events parked more than olderThan ago.
func (s *Store) OutboxPruneDead(ctx context.Context, db DBTX, now *time.Time, olderThan time.Duration, limit int) (int64, error) {
	if dist, err := s.Distributed(ctx, db); err != nil {
		return 0, err
	} else if dist {
		return s.citusOutboxPrune(ctx, db, now, olderThan, limit, true)
	}
	return guarded(ctx, db, s.outbox.pruneDead, affected, Now(now), micros(olderThan), limit)
}

// OutboxCounts are the outbox's events by state.
type OutboxCounts struct {
	Pending   int64 // not yet published, not dead (includes events being relayed or in backoff)
	Published int64
	Dead      int64
}

// OutboxCount counts the outbox's events by state (a full scan: for tests,
// benchmarks and occasional stats).
func (s *Store) OutboxCount(ctx context.Context, db DBTX) (OutboxCounts, error) {
	var c OutboxCounts
	err := db.QueryRow(ctx, s.outbox.counts.sql).Scan(&c.Pending, &c.Published, &c.Dead)
	return c, err
}

// OutboxByTx returns the events the transaction txid wrote, oldest first.
func (s *Store) OutboxByTx(ctx context.Context, db DBTX, txid int64) ([]*OutboxEvent, error) {
	return guarded(ctx, db, s.outbox.byTx, collectOutboxEvents, txid)
}

// outboxFinishSet is the SET clause of a relay's finish (outbox_finish and its Citus
// variant): each outcome f (action, delay_us, error) written at time now, a retry
// available again at retryAt; the relay's lease is cleared either way.
func outboxFinishSet(now, retryAt string) string {
	return `SET published_at = CASE WHEN f.action = 'published' THEN ` + now + ` END,
    dead_at = CASE WHEN f.action = 'dead' OR (f.action = 'retry' AND o.attempts >= o.max_attempts) THEN ` + now + ` END,
    available_at = CASE
                     WHEN f.action = 'retry' AND o.attempts < o.max_attempts THEN ` + retryAt + `
                     WHEN f.action = 'release' THEN ` + now + `
                     ELSE o.available_at
                   END,
    attempts = CASE WHEN f.action = 'release' THEN greatest(o.attempts - 1, 0) ELSE o.attempts END,
    last_error = CASE WHEN f.action IN ('retry', 'dead') THEN f.error ELSE o.last_error END,
    relay_until = NULL,
    relay_token = NULL
`
}
