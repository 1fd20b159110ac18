package store

// Limit slot handoff: while a limit binds, a limited claim can take a waiting job as
// the successor of one of the caller's running jobs with the same buckets; the
// successor holds no slot of its own while its predecessor runs under the recorded
// lease, and its worker starts it once the predecessor's handler has returned (see
// "Handoff" at limitedClaimSQL, and docs/limits.md).

import (
	"context"
	"time"
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

// bucketSig is the signature of a job's set of buckets, on each of its bucket rows
// (rows of bucketsOf, aliased b): equal signatures mean the same buckets. A window
// over the job's rows rather than an aggregate grouped by job, so each row carries
// its job's signature without a join back (see handoff).
const bucketSig = `string_agg(quote_literal(b.scope) || quote_literal(b.target) || quote_literal(b.bkey), '')
    OVER (PARTITION BY b.id ORDER BY b.scope, b.target, b.bkey ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)`

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
//
// Why no CTE here joins another. The statement runs its generic plan, in which every
// CTE is estimated at a row or so; joined to each other, CTEs were read as nested
// loops, every row of one against every row of the other. That cost the square of
// the predecessors, every pair compared in each of four joins
// (BenchmarkClaimSuccessors; docs/benchmarks-archive.md, "Successor claims: linear in
// the running jobs"). So a job's signature is a window over its own bucket rows
// (bucketSig); what one relation needs from another is carried over
// by a window over both in one UNION ALL, partitioned by the shared key (a bucket,
// a signature), the giving side sorted first; and a successor is paired with its
// predecessor by grouping both on (signature, rank). Sorts and aggregates cost
// n log n whatever the estimates. The predecessors are looked up by primary key (the
// LATERAL subquery, kept apart by OFFSET 0), and whether one has a successor by a
// probe of jobs_slot_of_idx (the NOT EXISTS, a subplan for the same reason).
func handoff(cands, takenRel string) string {
	return `pred AS MATERIALIZED (
  SELECT p.id, p.lease_token, p.queue, p.kind, p.concurrency_key AS ckey, x.ord AS pos
  FROM unnest($7::uuid[], $8::uuid[]) WITH ORDINALITY AS x(id, token, ord)
  CROSS JOIN LATERAL (SELECT * FROM {{s}}.jobs p WHERE p.id = x.id OFFSET 0) p
  WHERE p.lease_token = x.token AND p.status = 'running' AND p.queue = $2 AND p.lease_until > (SELECT now FROM t)
    AND NOT EXISTS (SELECT 1 FROM {{s}}.jobs o
                    WHERE o.slot_of = p.id AND o.status = 'running' AND o.slot_token = p.lease_token
                    OFFSET 0)
),
px AS MATERIALIZED (` + bucketsOf("pred") + `),
-- The bucket rows of the predecessors that can hand their slots on (no bucket with a
-- rate), with their signatures. pos indexes $7 and $8.
pb AS MATERIALIZED (
  SELECT b.id, b.pos, b.scope, b.target, b.bkey, b.sig FROM (
    SELECT b.*, ` + bucketSig + ` AS sig,
           bool_and(b.rate IS NULL) OVER (PARTITION BY b.id) AS norate
    FROM px b) b
  WHERE b.norate
),
rej AS MATERIALIZED (
  SELECT b.*, ` + bucketSig + ` AS sig, bool_and(b.rate IS NULL) OVER (PARTITION BY b.id) AS norate
  FROM (` + cands + `
  ) b
  WHERE EXISTS (SELECT 1 FROM pb) AND b.id <> ALL(ARRAY(SELECT id FROM ` + takenRel + `))
),
-- Per bucket of the candidates left out: the first of them (m1) and its signature
-- (s1), and the first with another signature (m2).
bfirst AS MATERIALIZED (
  SELECT r.scope, r.target, r.bkey, min(r.pos) AS m1, min(r.s1) AS s1, min(r.pos) FILTER (WHERE r.sig <> r.s1) AS m2
  FROM (SELECT r.*, first_value(r.sig) OVER (PARTITION BY r.scope, r.target, r.bkey ORDER BY r.pos) AS s1 FROM rej r) r
  GROUP BY r.scope, r.target, r.bkey
),
-- Per signature of predecessors: the first candidate left out that shares one of
-- its buckets and has another signature — m1 where s1 is another signature, else m2.
stop AS MATERIALIZED (
  SELECT u.sig, min(CASE WHEN u.s1 <> u.sig THEN u.m1 ELSE u.m2 END) AS pos
  FROM (
    SELECT x.k, x.sig, first_value(x.m1) OVER w AS m1, first_value(x.s1) OVER w AS s1, first_value(x.m2) OVER w AS m2
    FROM (SELECT 0 AS k, NULL::text AS sig, f.scope, f.target, f.bkey, f.m1, f.s1, f.m2 FROM bfirst f
          UNION ALL
          SELECT DISTINCT 1, b.sig, b.scope, b.target, b.bkey, NULL::bigint, NULL::text, NULL::bigint FROM pb b) x
    WINDOW w AS (PARTITION BY x.scope, x.target, x.bkey ORDER BY x.k)
  ) u
  WHERE u.k = 1
  GROUP BY u.sig
  HAVING min(CASE WHEN u.s1 <> u.sig THEN u.m1 ELSE u.m2 END) IS NOT NULL
),
-- The candidates that may succeed: no rate, and not behind their signature's stop.
cand AS MATERIALIZED (
  SELECT y.id, y.pos, y.sig FROM (
    SELECT x.k, x.id, x.pos, x.sig, first_value(x.spos) OVER (PARTITION BY x.sig ORDER BY x.k) AS spos
    FROM (SELECT 0 AS k, NULL::uuid AS id, NULL::bigint AS pos, s.sig, s.pos AS spos FROM stop s
          UNION ALL
          SELECT DISTINCT 1, r.id, r.pos, r.sig, NULL::bigint FROM rej r WHERE r.norate) x
  ) y
  WHERE y.k = 1 AND (y.spos IS NULL OR y.spos >= y.pos)
),
-- The n-th candidate of a signature, in claim order, succeeds its n-th predecessor
-- (a predecessor offered twice counts once, at its first place).
succ AS MATERIALIZED (
  SELECT g.id, ($7::uuid[])[g.ppos] AS pred, ($8::uuid[])[g.ppos] AS ptoken
  FROM (
    SELECT (array_agg(x.id) FILTER (WHERE x.k = 1))[1] AS id, min(x.pos) FILTER (WHERE x.k = 1) AS cpos,
           min(x.pos) FILTER (WHERE x.k = 0) AS ppos
    FROM (SELECT 1 AS k, c.id, c.pos, c.sig, row_number() OVER (PARTITION BY c.sig ORDER BY c.pos) AS rn FROM cand c
          UNION ALL
          SELECT 0, p.id, p.pos, p.sig, row_number() OVER (PARTITION BY p.sig ORDER BY p.pos)
          FROM (SELECT DISTINCT ON (b.id) b.id, b.pos, b.sig FROM pb b ORDER BY b.id, b.pos) p) x
    GROUP BY x.sig, x.rn
    HAVING count(*) FILTER (WHERE x.k = 1) = 1 AND count(*) FILTER (WHERE x.k = 0) = 1
  ) g
  ORDER BY g.cpos
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
` + handoff(`SELECT id, pos, scope, target, bkey, rate FROM hx`, "nothing") + `,
` + successorMap + `
UPDATE {{s}}.jobs AS j
` + claimSet + `,
  ` + successorSlots + `,
  started = false -- a successor waits for its predecessor's handler
FROM t, sm
WHERE j.id = ANY(ARRAY(SELECT id FROM succ)) AND ` + stillPending + ` AND t.async IS NOT NULL
  AND $5::int IS NOT NULL -- the free slots asked for: a claim of successors takes none
  AND $12::int IS NOT NULL -- the jobs to start at once: successors wait
RETURNING ` + claimReturns + `, j.slot_of, j.slot_token, false AS rated`
}

// ClaimSuccessors takes successors for p.Preds only (successorClaimSQL), under the
// limited claims' lock.
func (s *Store) ClaimSuccessors(ctx context.Context, db Batcher, now *time.Time, p ClaimParams) ([]*Job, error) {
	pl := newPipeline(db, s.limits.succ)
	pl.add(s.limits.lock)
	s.queueLimitedClaim(pl, s.limits.succ, now, p, len(p.Preds)+16) // a successor each, and a margin
	br, err := pl.send(ctx)
	if err != nil {
		return nil, err
	}
	defer br.Close()
	jobs, err := limitedClaimed(br)
	if err != nil {
		return nil, err
	}
	if err := pl.end(br); err != nil { // as in ClaimLimited
		return nil, err
	}
	return jobs, nil
}
