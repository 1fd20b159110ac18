package store

// Limit slot handoff: while a limit binds, a limited claim can take a waiting job as
// the successor of one of the caller's running jobs with the same buckets; the
// successor holds no slot of its own while its predecessor runs under the recorded
// lease, and its worker starts it once the predecessor's handler has returned (see
// "Handoff" at limitedClaimSQL, and docs/limits.md).

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// holdsSlot is the condition that job r (an alias of jobs) holds a slot of every
// limit that governs it: it runs under an unexpired lease, and it is not the
// successor of a job that still runs under the lease it was handed over from
// (slot_of, slot_token: see handoff in limitedClaimSQL). A predecessor and its
// successor thus count once between them, whichever of the two holds the slot.
func holdsSlot(r string) string {
	return r + `.status = 'running' AND ` + r + `.lease_until > (SELECT now FROM t)
    AND (` + r + `.slot_of IS NULL OR NOT EXISTS (
      SELECT 1 FROM {{s}}.jobs q WHERE q.id = ` + r + `.slot_of AND q.lease_token = ` + r + `.slot_token
        AND q.status = 'running' AND q.lease_until > (SELECT now FROM t)))`
}

// bucketSig is the signature of a job's set of buckets (rows of bucketsOf, aliased
// b, grouped by job): equal signatures mean the same buckets.
const bucketSig = `string_agg(quote_literal(b.scope) || quote_literal(b.target) || quote_literal(b.bkey), '' ORDER BY b.scope, b.target, b.bkey)`

// handoff returns the CTEs that choose successors (see "Handoff" at limitedClaimSQL),
// as succ(id, pred, ptoken). The predecessors are the jobs of $7 and $8 (ids,
// tokens) still running under those leases, and without a running successor yet
// (jobs_slot_of_idx). The candidates are the jobs of the
// bucket rows cands (id, pos, scope, target, bkey, rate) that the statement does not
// take anyway (relation takenRel, of ids). At most one successor per predecessor,
// in claim order, on top of the $5 jobs the claim may take into free slots:
// successors need no worker of their own.
//
// Claim order is kept across different sets of buckets: a successor never passes a
// candidate ahead of it in claim order that has other buckets but shares one with
// it (stop). Such a candidate might be waiting for exactly the slot the predecessor
// holds — a queue limit's slot, under per-key limits as well — and only a slot freed
// through the database can go to it, by the limited claim's own order. Limits whose
// buckets are never shared (one queue limit; per-key or per-kind limits alone) never
// stop a handoff.
func handoff(cands, takenRel string) string {
	return `pred AS MATERIALIZED (
  SELECT p.id, p.lease_token, p.queue, p.kind, p.concurrency_key AS ckey, x.ord AS pos
  FROM unnest($7::uuid[], $8::uuid[]) WITH ORDINALITY AS x(id, token, ord)
  JOIN {{s}}.jobs p ON p.id = x.id AND p.lease_token = x.token
  WHERE p.status = 'running' AND p.queue = $2 AND p.lease_until > (SELECT now FROM t)
    AND NOT EXISTS (SELECT 1 FROM {{s}}.jobs o
                    WHERE o.slot_of = p.id AND o.status = 'running' AND o.slot_token = p.lease_token)
),
px AS MATERIALIZED (` + bucketsOf("pred") + `),
psig AS MATERIALIZED (
  SELECT b.id, min(b.pos) AS pos, ` + bucketSig + ` AS sig FROM px b
  GROUP BY b.id HAVING bool_and(b.rate IS NULL)
),
rej AS MATERIALIZED (
  SELECT b.* FROM (` + cands + `
  ) b
  WHERE EXISTS (SELECT 1 FROM psig) AND b.id <> ALL(ARRAY(SELECT id FROM ` + takenRel + `))
),
rsig AS MATERIALIZED (
  SELECT b.id, min(b.pos) AS pos, ` + bucketSig + ` AS sig, bool_and(b.rate IS NULL) AS norate FROM rej b GROUP BY b.id
),
stop AS MATERIALIZED (
  SELECT sb.sig, min(r.pos) AS pos
  FROM (SELECT DISTINCT s.sig, b.scope, b.target, b.bkey FROM psig s JOIN px b ON b.id = s.id) sb
  JOIN rej r ON r.scope = sb.scope AND r.target = sb.target AND r.bkey = sb.bkey
  JOIN rsig d ON d.id = r.id AND d.sig <> sb.sig
  GROUP BY sb.sig
),
succ AS MATERIALIZED (
  SELECT c.id, p.id AS pred, p.lease_token AS ptoken
  FROM (SELECT id, pos, sig, row_number() OVER (PARTITION BY sig ORDER BY pos) AS rn FROM rsig c
        WHERE c.norate AND NOT EXISTS (SELECT 1 FROM stop WHERE stop.sig = c.sig AND stop.pos < c.pos)) c
  JOIN (SELECT s.id, s.sig, pr.lease_token, row_number() OVER (PARTITION BY s.sig ORDER BY s.pos) AS rn
        FROM psig s JOIN pred pr ON pr.id = s.id) p ON p.sig = c.sig AND p.rn = c.rn
  ORDER BY c.pos
)`
}

// successorClaimSQL takes successors only (parameters as limitedClaimSQL's; $6 the
// head window): it counts no slots and evaluates no limit, so it costs a fraction
// of the limited claim. A throttled producer runs it when a job begins that could
// hand its slots on; the limited claim still runs whenever a slot may have been
// freed. It is serialised with the limited claims by the same lock: a limited claim
// must not read the jobs before a successor's claim commits and after its
// predecessor's outcome did, when neither would hold the slot.
func successorClaimSQL() string {
	return `
WITH
` + limitPrologue + `,
` + limitHead("$6") + `,
hx AS MATERIALIZED (` + bucketsOf("head") + `),
nothing AS (SELECT NULL::uuid AS id WHERE false),
` + handoff(`SELECT id, pos, scope, target, bkey, rate FROM hx`, "nothing") + `
UPDATE {{s}}.jobs AS j
` + claimSet + `,
  slot_of = s.pred, slot_token = s.ptoken
FROM t, succ s
WHERE j.id = s.id AND j.status = 'pending' AND t.async IS NOT NULL
  AND $5::int IS NOT NULL -- the free slots asked for: a claim of successors takes none
RETURNING ` + claimReturns + `, j.slot_of, j.slot_token`
}

// ClaimSuccessors takes successors for p.Preds only (successorClaimSQL), under the
// limited claims' lock.
func (s *Store) ClaimSuccessors(ctx context.Context, db Batcher, now *time.Time, p ClaimParams) ([]*Job, error) {
	b := &pgx.Batch{}
	b.Queue(s.limits.lock.sql)
	s.queueLimitedClaim(b, s.limits.succ, now, p, len(p.Preds)+16) // a successor each, and a margin
	br := db.SendBatch(ctx, b)
	defer br.Close()
	jobs, err := limitedClaimed(br)
	if err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil { // as in ClaimLimited
		return nil, err
	}
	return jobs, nil
}
