package store

// The workers' statements on the Citus layout (docs/citus.md, "Workers on Citus"):
// every claim, heartbeat, completion and reclaim names one concurrency_key, the
// distribution column, so Citus runs it as a router query on the node of the key
// (Task Count: 1, TestCitusStatementPlans). A worker spreads its claims over keys
// (internal/engine/citus.go), reading which keys have pending jobs from the small
// citus_keys table the layout keeps (internal/migrate/citus.sql) instead of the jobs.
//
// Citus plans these only with their values (planCitusCustom), and evaluates on the
// coordinator, before it sends a statement to the node, every STABLE function whose
// arguments are parameters: the statement's time is citus_clock($1) — the injected
// clock's reading or the coordinator's now() — and the per-row arithmetic goes through
// the layout's immutable citus_after and citus_history (citusRow). A lease token is a
// parameter: Citus refuses a volatile function (gen_random_uuid) in an UPDATE.
//
// The single-node statements are unchanged; the store picks these when it knows the
// schema is distributed (Store.Distributed, asked once per Store).

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

type citusWorkStatements struct {
	keys, claim, keyLock, keyPrune  stmt
	keyDefer                        stmt
	keyLower, keyHold               stmt // CitusHoldKeys (citushold.go)
	heartbeat, finish, finishDelete stmt
	expired, reclaim                stmt
	jobKeys                         stmt
}

// citusNow is the statement's time on the Citus layout.
const citusNow = `{{s}}.citus_clock($1)`

// citusRow is rowExprs (finish.go) on the Citus layout: the time is a column of the
// outcomes (o.now, citusOutcomes), since Citus refuses a STABLE function inside a CASE
// even when it could evaluate it. Its WHERE names the key, $8.
var citusRow = rowExprs{
	now:   "o.now",
	after: func(base, us string) string { return "{{s}}.citus_after(" + base + ", " + us + ")" },
	history: func(outcome, errText string) string {
		return "{{s}}.citus_history(j.attempt_history, j.attempts, j.attempted_at, o.now, j.worker_id, " + outcome + ", " + errText + ")"
	},
	// Labels cast one by one are constants; a cast of the CASE to the enum is a STABLE
	// function (enum_in) over columns, which Citus refuses in an UPDATE.
	status: strings.NewReplacer("'succeeded'", "'succeeded'::{{s}}.job_status", "'failed'", "'failed'::{{s}}.job_status",
		"'cancelled'", "'cancelled'::{{s}}.job_status", "'pending'", "'pending'::{{s}}.job_status").Replace,
	where: " AND j.concurrency_key = $8",
	// The enum's text output is a STABLE function, which Citus refuses in RETURNING;
	// the label comes back as text all the same.
	statusOut: "j.status",
}

// citusFinishUpdate is finishUpdate on the Citus layout, from the outcomes o, with
// its simple CASEs on o.action written as searched ones: Citus 13.2 sends a simple
// CASE over a subquery's column to the node as "CASE o.action WHEN NULL::boolean",
// which the node refuses ("operator does not exist: text = boolean").
func citusFinishUpdate(o string) string {
	return strings.NewReplacer("CASE o.action", "CASE",
		"WHEN 'complete'", "WHEN o.action = 'complete'", "WHEN 'fail'", "WHEN o.action = 'fail'",
		"WHEN 'cancel'", "WHEN o.action = 'cancel'", "WHEN 'snooze'", "WHEN o.action = 'snooze'",
	).Replace(finishUpdateIn(o, citusRow))
}

// citusSequenceReady is sequenceReady for a claim of one key: a sequence is per
// (concurrency_key, sequence key) on this layout, so its probe stays on the key's node.
func citusSequenceReady(a, key string) string {
	return `(` + a + `.sequence_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM {{s}}.jobs e
      WHERE e.concurrency_key = ` + key + ` AND e.sequence_key = ` + a + `.sequence_key AND e.id < ` + a + `.id
        AND e.status IN ('pending', 'running', 'failed')
        AND (e.status <> 'failed' OR NOT e.sequence_skip_failed)))`
}

// citusOutcomes is the finish's relation of outcomes, as the single-node finish reads
// it, with the statement's time (now). OFFSET 0 keeps the planner from pulling the
// time's function up into the CASEs that read it.
const citusOutcomes = `(SELECT u.*, ` + citusNow + ` AS now
  FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::bigint[], $6::text[], $7::jsonb[]) WITH ORDINALITY AS u(id, token, action, delay_us, error, output, n)
  OFFSET 0)`

func newCitusWorkStatements(b *builder) citusWorkStatements {
	return citusWorkStatements{
		// The keys of queue $1 with pending jobs that may be due at $4, in key order
		// after $2 (NULL: from the first), at most $3: a read of the small key table
		// on every shard (an index-only range: run_at is in the index).
		// The keys of the jobs $1 (a lookup of every shard by the primary key's id
		// prefix): a job known by its id and token alone (Manual.Handle) learns its key
		// before its heartbeat or finish, which name the key.
		jobKeys: b.addCitus(planCitusCustom, "citus_job_keys", `
SELECT id, concurrency_key FROM {{s}}.jobs WHERE id = ANY($1::uuid[])`),

		keys: b.addCitus(planCitusCustom, "citus_keys", `
SELECT concurrency_key FROM {{s}}.citus_keys
WHERE queue = $1 AND ($2::text IS NULL OR concurrency_key > $2::text)
  AND (run_at IS NULL OR run_at <= {{s}}.citus_clock($4))
ORDER BY concurrency_key
LIMIT $3`),

		// The claim of one key ($7): the plain claim's checks (paused queue, limits,
		// sequences), its jobs in claim order from jobs_fair_idx, leased under the token
		// $6; the first $8 in claim order start at once (startMap).
		claim: b.addCitus(planCitusCustom, "citus_claim", `
WITH c AS (
  SELECT jobs.id FROM {{s}}.jobs
  WHERE jobs.concurrency_key = $7 AND jobs.status = 'pending' AND jobs.queue = $2 AND jobs.run_at <= `+citusNow+`
    AND NOT EXISTS (SELECT 1 FROM {{s}}.queues p WHERE p.name = $2 AND p.paused_at IS NOT NULL)
    AND `+unlimited+`
    AND `+citusSequenceReady("jobs", "$7")+`
  ORDER BY jobs.priority DESC, jobs.run_at, jobs.id
  LIMIT $5
  FOR UPDATE SKIP LOCKED
)
UPDATE {{s}}.jobs AS j
SET status = 'running',
    attempts = j.attempts + 1,
    lease_until = {{s}}.citus_after(`+citusNow+`, $4::bigint),
    lease_token = $6::uuid,
    worker_id = $3,
    attempted_at = `+citusNow+`,
    updated_at = `+citusNow+`,
    slot_of = NULL, slot_token = NULL,
    started = j.id = ANY(ARRAY(SELECT id FROM c LIMIT $8))
WHERE j.concurrency_key = $7 AND j.id = ANY(ARRAY(SELECT id FROM c))
RETURNING `+claimReturns),

		// CitusKeyIdle's two steps, in one transaction: lock the key's row unless a
		// transaction making a job of the key pending holds it, then, with a snapshot
		// taken after the lock, remove the row if the key has no pending job.
		keyLock: b.addCitus("", "citus_key_lock", `
SELECT true FROM {{s}}.citus_keys WHERE concurrency_key = $1 AND queue = $2 FOR UPDATE SKIP LOCKED`),
		keyPrune: b.addCitus(planCitusCustom, "citus_key_prune", `
DELETE FROM {{s}}.citus_keys k
WHERE k.concurrency_key = $1 AND k.queue = $2
  AND NOT EXISTS (SELECT 1 FROM {{s}}.jobs j WHERE j.concurrency_key = $1 AND j.queue = $2 AND j.status = 'pending')`),

		// CitusKeyIdle's step for a key that keeps pending jobs: when none is due at
		// $3, the walk skips the key until the earliest is (citus.sql, citus_keys.run_at).
		keyDefer: b.addCitus(planCitusCustom, "citus_key_defer", `
UPDATE {{s}}.citus_keys AS k
SET run_at = (SELECT min(j.run_at) FROM {{s}}.jobs j WHERE j.concurrency_key = $1 AND j.queue = $2 AND j.status = 'pending')
WHERE k.concurrency_key = $1 AND k.queue = $2
  AND NOT EXISTS (SELECT 1 FROM {{s}}.jobs j WHERE j.concurrency_key = $1 AND j.queue = $2 AND j.status = 'pending'
                  AND j.run_at <= {{s}}.citus_clock($3))`),

		// CitusHoldKeys' two steps for one key and queue: lower the key's run_at to
		// $3 (NULL: due), then add its row if it has none (citushold.go).
		keyLower: b.addCitus("", "citus_key_lower", `
UPDATE {{s}}.citus_keys SET run_at = $3
WHERE concurrency_key = $1 AND queue = $2 AND run_at IS NOT NULL AND ($3::timestamptz IS NULL OR run_at > $3::timestamptz)`),
		keyHold: b.addCitus("", "citus_key_hold", `
INSERT INTO {{s}}.citus_keys (concurrency_key, queue, run_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`),

		// The heartbeat of the leases of one key ($7), as the single-node heartbeat
		// (lease.go: held, then locked without waiting, then renewed).
		heartbeat: b.addCitus(planCitusCustom, "citus_heartbeat", `
WITH held AS MATERIALIZED (
  SELECT j.id, j.lease_token, h.began FROM unnest($2::uuid[], $3::uuid[], $6::bool[]) AS h(id, token, began)
  JOIN {{s}}.jobs j ON j.id = h.id AND j.lease_token = h.token
  WHERE j.concurrency_key = $7 AND j.lease_until > {{s}}.citus_after(`+citusNow+`, $5::bigint) AND `+idIn("j", "$2")+`
),
locked AS MATERIALIZED (
  SELECT j.id, h.began FROM held h JOIN {{s}}.jobs j ON j.id = h.id
  WHERE j.concurrency_key = $7 AND j.lease_token = h.lease_token AND j.lease_until > {{s}}.citus_after(`+citusNow+`, $5::bigint)
    AND `+idIn("j", "$2")+`
  FOR UPDATE OF j SKIP LOCKED
),
renewed AS (
  UPDATE {{s}}.jobs AS j
  SET lease_until = {{s}}.citus_after(`+citusNow+`, $4::bigint),
      updated_at = `+citusNow+`,
      started = j.started OR coalesce(l.began, false)
  FROM locked l
  WHERE j.concurrency_key = $7 AND j.id = l.id AND `+idIn("j", "$2")+`
  RETURNING j.id
)
SELECT id::text, false FROM held
UNION ALL
SELECT id::text, true FROM renewed`),

		// The completion of outcomes of one key ($8), as the single-node finish.
		finish: b.addCitus(planCitusCustom, "citus_finish", citusFinishUpdate(citusOutcomes)),

		// finish_delete of one key ($8).
		finishDelete: b.addCitus(planCitusCustom, "citus_finish_delete", `
WITH o AS MATERIALIZED (SELECT * FROM `+citusOutcomes+` AS o),
del AS (
  DELETE FROM {{s}}.jobs AS j USING o
  WHERE o.action = 'complete' AND j.id = o.id AND j.lease_token = o.token AND `+idIn("j", "$2")+`
    AND j.concurrency_key = $8 AND j.parent_id IS NULL AND j.batch_id IS NULL
  RETURNING o.n
),
upd AS (`+citusFinishUpdate("(SELECT * FROM o WHERE action <> 'complete' OR o.n NOT IN (SELECT n FROM del))")+`)
SELECT n, 'succeeded' FROM del UNION ALL SELECT * FROM upd`),

		// The expired leases, with their keys: a read of every shard's expired-lease
		// index, each bounded by the limit.
		expired: b.addCitus(planCitusCustom, "citus_expired", `
SELECT id, lease_token, kind, attempts, max_attempts, concurrency_key
FROM {{s}}.jobs
WHERE status = 'running' AND lease_until < `+citusNow+`
  AND lease_until >= coalesce($3::timestamptz, '-infinity')
ORDER BY lease_until
LIMIT $2`),

		// The reclaim of expired leases of one key ($5), as the single-node reclaim.
		reclaim: b.addCitus(planCitusCustom, "citus_reclaim", `
WITH r AS MATERIALIZED (
  SELECT j.id, x.delay_us, `+citusNow+` AS now FROM unnest($2::uuid[], $3::uuid[], $4::bigint[]) AS x(id, token, delay_us)
  JOIN {{s}}.jobs j ON j.id = x.id AND j.lease_token = x.token
  WHERE j.concurrency_key = $5 AND j.lease_until < `+citusNow+` AND `+idIn("j", "$2")+`
  FOR UPDATE OF j SKIP LOCKED
)
UPDATE {{s}}.jobs AS j
SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed'::{{s}}.job_status ELSE 'pending'::{{s}}.job_status END,
    run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                  ELSE {{s}}.citus_after(r.now, r.delay_us) END,
    last_error = 'lease expired on worker ' || coalesce(j.worker_id, '?') || ' (attempt ' || j.attempts::text || ')',
    attempt_history = {{s}}.citus_history(j.attempt_history, j.attempts, j.attempted_at, r.now, j.worker_id, 'lease_expired', 'lease expired'),
    lease_until = NULL,
    lease_token = NULL,
    worker_id = NULL,
    updated_at = r.now
FROM r
WHERE j.concurrency_key = $5 AND j.id = r.id AND `+idIn("j", "$2")+`
RETURNING j.id, j.status`),
	}
}

// onCitus reports whether the store has learnt that its schema is distributed. The
// worker's paths ask Distributed first (once per Store).
func (s *Store) onCitus() bool { return s.layout.v.Load() == 2 }

// CitusKeys returns up to limit keys of queue that have pending jobs, leaving out
// those whose jobs are all due after now, in key order after after (nil: from the
// first key). Citus layout only.
func (s *Store) CitusKeys(ctx context.Context, db DBTX, now *time.Time, queue string, after *string, limit int) ([]string, error) {
	return guarded(ctx, db, s.citusWork.keys, func(rows pgx.Rows, err error) ([]string, error) {
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}, queue, after, limit, Now(now))
}

// ClaimKey is Claim on the Citus layout: it leases up to p.Limit due jobs of queue
// p.Queue and concurrency key key, under one fresh token, in claim order. p.After,
// p.Lag and p.Preds are not used.
func (s *Store) ClaimKey(ctx context.Context, db DBTX, now *time.Time, p ClaimParams, key string) ([]*Job, error) {
	token, err := randomUUID()
	if err != nil {
		return nil, err
	}
	jobs, err := guarded(ctx, db, s.citusWork.claim, collectClaimed, Now(now), p.Queue, p.WorkerID, micros(p.Lease), p.Limit,
		token, key, p.ready())
	if err != nil {
		return nil, err
	}
	SortClaimOrder(jobs)
	return jobs, nil
}

// Beginner starts a transaction: a pool, a connection or a transaction (a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// CitusKeyIdle removes key from queue's keys with pending jobs when it has none
// (a claim of it found nothing), and reports whether it did; when it has some, none
// of them due at now, the walk skips the key until the earliest is. It never removes
// or defers a key while a transaction that makes one of its jobs pending is open
// (citus.sql, citus_keys).
func (s *Store) CitusKeyIdle(ctx context.Context, db Beginner, now *time.Time, queue, key string) (bool, error) {
	return s.citusKeyIdle(ctx, db, queue, key, s.citusWork.keyPrune, now)
}

// citusKeyIdle is CitusKeyIdle with prune, the statement that removes the key when
// it has nothing left (of the jobs, or of the outbox); a key of the jobs that keeps
// pending jobs is deferred to the earliest, should none be due at now.
func (s *Store) citusKeyIdle(ctx context.Context, db Beginner, queue, key string, prune stmt, now *time.Time) (bool, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	var locked bool
	if err := tx.QueryRow(ctx, s.citusWork.keyLock.sql, key, queue).Scan(&locked); err != nil {
		if err == pgx.ErrNoRows {
			return false, nil // gone already, or held by a transaction writing a job of the key
		}
		return false, err
	}
	n, err := guarded(ctx, tx, prune, affected, key, queue)
	if err != nil {
		return false, err
	}
	if n == 0 && queue != OutboxKeys {
		if _, err := guarded(ctx, tx, s.citusWork.keyDefer, affected, key, queue, Now(now)); err != nil {
			return false, err
		}
	}
	return n > 0, tx.Commit(ctx)
}

// CitusJobKeys returns the concurrency key of each of the jobs ids that exists, by id
// (citus_job_keys: a read of every shard, by the primary key's id prefix).
func (s *Store) CitusJobKeys(ctx context.Context, db DBTX, ids []string) (map[string]string, error) {
	rows, err := guarded(ctx, db, s.citusWork.jobKeys, collectKeyedIDs, uuidArg(ids))
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.id] = r.key
	}
	return out, nil
}

// byKey splits the positions of xs by the concurrency key key(x), in the order the
// keys first appear.
func byKey[T any](xs []T, key func(T) string) (keys []string, groups map[string][]int) {
	groups = map[string][]int{}
	for i, x := range xs {
		k := key(x)
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	return keys, groups
}

// citusHeartbeat is Heartbeat on the Citus layout: one statement per key.
func (s *Store) citusHeartbeat(ctx context.Context, db DBTX, now *time.Time, leases []Lease, d time.Duration, began []bool) (map[string]bool, error) {
	out := make(map[string]bool, len(leases))
	keys, groups := byKey(leases, func(l Lease) string { return l.Key })
	for _, k := range keys {
		idx := groups[k]
		ids, tokens, b := make([]string, len(idx)), make([]string, len(idx)), make([]bool, len(idx))
		for i, p := range idx {
			ids[i], tokens[i], b[i] = leases[p].ID, leases[p].Token, began[p]
		}
		m, err := guarded(ctx, db, s.citusWork.heartbeat, collectRenewals, Now(now), uuidArg(ids), uuidArg(tokens), micros(d),
			micros(HeartbeatMargin(d)), b, k)
		if err != nil {
			return nil, err
		}
		for id, r := range m {
			out[id] = r
		}
	}
	return out, nil
}

// citusFinish is runFinish on the Citus layout: one statement per key, each in id
// order (idOrder).
func (s *Store) citusFinish(ctx context.Context, db DBTX, now *time.Time, outs []Outcome, st stmt) ([]string, error) {
	out := make([]string, len(outs))
	keys, groups := byKey(outs, func(o Outcome) string { return o.Key })
	slices.Sort(keys) // every completer writes keys in one order, as ids within a key
	for _, k := range keys {
		part := make([]Outcome, len(groups[k]))
		for i, p := range groups[k] {
			part[i] = outs[p]
		}
		done, err := s.runFinishStmt(ctx, db, now, part, st, k)
		if err != nil {
			return nil, err
		}
		for i, p := range groups[k] {
			out[p] = done[i]
		}
	}
	return out, nil
}

// citusReclaim is Reclaim on the Citus layout: one statement per key.
func (s *Store) citusReclaim(ctx context.Context, db DBTX, now *time.Time, leases []Lease, us []int64) (map[string]string, error) {
	out := make(map[string]string, len(leases))
	keys, groups := byKey(leases, func(l Lease) string { return l.Key })
	for _, k := range keys {
		idx := groups[k]
		ids, tokens, d := make([]string, len(idx)), make([]string, len(idx)), make([]int64, len(idx))
		for i, p := range idx {
			ids[i], tokens[i], d[i] = leases[p].ID, leases[p].Token, us[p]
		}
		m, err := guarded(ctx, db, s.citusWork.reclaim, collectMap[string], Now(now), uuidArg(ids), uuidArg(tokens), d, k)
		if err != nil {
			return nil, err
		}
		for id, st := range m {
			out[id] = st
		}
	}
	return out, nil
}

// randomUUID is a version 4 UUID: a claim's lease token on the Citus layout, where the
// statement cannot make one.
func randomUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("store: a lease token: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
