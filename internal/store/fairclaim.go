package store

// The fair claim (docs/fairness.md): the claim of a queue made fair by concurrency
// key, which takes the due jobs of the queue's keys in turn.
//
// A fair claim is a pipeline of two statements in one implicit transaction (one
// round trip), as the limited claim is (limits.go): a transaction-scoped advisory lock
// per queue, which serialises the fair claims of the queue across the cluster; and
// the claim, which reads the rotation's position, steps through the keys from there,
// takes their jobs, moves the rotation on and returns, with each job, whether it
// stopped for want of room rather than of keys. The lock is its own statement so that
// the claim's snapshot, taken when it starts, sees every fair claim committed before
// it: two claims never read the same position.

import (
	"fmt"
)

// FairChanged is the NOTIFY payload (on the jobs channel) that announces a change of
// a queue's fairness. It is the limits' payload: both change which claim statement a
// client runs for a queue, and a client reloads both when it hears it.
const FairChanged = LimitsChanged

type fairStatements struct {
	lock, claim, limitedClaim      stmt
	set, weight, unweight, weights stmt
	scopes, keys                   stmt
}

// fairWalk is the fair claim's rotation: the CTEs t (now, the rotation's position
// last, the queue's bypass priority, whether any key of the queue has a weight,
// open: paused or governed claims take nothing), s0 and walk. walk(key, wrapped, n,
// wsum, weight, id, queue, kind, priority, run_at, ok) holds the queue's keys that
// have pending jobs, in rotation order from the first key after last (wrapping past
// the last key to the first, and stopping before last is passed again), until the
// keys' weights add up to $5 (the claim's size) or $5 keys were visited.
//
// Each step is one descent of jobs_fair_idx: the first pending job of the queue whose
// key sorts after the current one, which is also the key's first job in claim order
// (the index's order within a key): the step returns it (id to run_at) and whether
// it can be taken (ok: due, below the bypass priority, ready in its sequence). A key
// with no pending job is not in the index, so idle keys cost nothing; a key whose
// pending jobs are all scheduled for later costs its descent (and its candidates'
// probe finds nothing). A key's weight is looked up only when the queue has weights.
//
// jobs_fair_idx holds only the jobs marked fair_indexed (migration 0024: the jobs of
// fair queues), and every read of it names the mark, as its predicate does: without
// it the planner cannot use the index. A fair queue's pending jobs are all marked
// once QueueSetFair has returned (its backfill and lanes_settle).
func fairWalk(open string) string {
	step := func(cond string) string {
		return `SELECT g.concurrency_key AS key, %s AS wrapped, g.id, g.queue, g.kind, g.priority, g.run_at,
       g.run_at <= (SELECT now FROM t) AND (g.priority < (SELECT bypass FROM t) OR (SELECT bypass FROM t) IS NULL)
         AND ` + sequenceReady("g") + ` AS ok
     FROM {{s}}.jobs g
     WHERE g.status = 'pending' AND g.fair_indexed AND g.queue = $2 AND ` + cond + `
     ORDER BY g.concurrency_key, g.priority DESC, g.run_at, g.id LIMIT 1`
	}
	return `t AS MATERIALIZED (
  SELECT n.now,
         (SELECT r.last_key FROM {{s}}.fair_rotation r WHERE r.queue = $2) AS last,
         (SELECT q.fair_bypass_priority FROM {{s}}.queues q WHERE q.name = $2) AS bypass,
         EXISTS (SELECT 1 FROM {{s}}.fair_weights fw WHERE fw.queue = $2) AS weighted,
         NOT EXISTS (SELECT 1 FROM {{s}}.queues p WHERE p.name = $2 AND p.paused_at IS NOT NULL)
           AND ` + open + ` AS open,
         ` + asyncCommit + `, ` + claimToken + `
  FROM (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now) n
),
s0 AS MATERIALIZED (
  SELECT k.* FROM (
    (` + fmt.Sprintf(step(`g.concurrency_key > (SELECT last FROM t) AND (SELECT open FROM t)`), "false") + `)
    UNION ALL
    (` + fmt.Sprintf(step(`g.concurrency_key >= '' AND (SELECT open FROM t)`), "true") + `)
  ) k LIMIT 1
),
walk(key, wrapped, n, wsum, weight, id, queue, kind, priority, run_at, ok) AS (
  SELECT s0.key, s0.wrapped, 1, w.weight, w.weight, s0.id, s0.queue, s0.kind, s0.priority, s0.run_at, s0.ok
  FROM s0 CROSS JOIN LATERAL (SELECT ` + fairWeight("s0.key") + ` AS weight) w
  UNION ALL
  SELECT nx.key, nx.wrapped, p.n + 1, p.wsum + nx.weight, nx.weight, nx.id, nx.queue, nx.kind, nx.priority, nx.run_at, nx.ok
  FROM walk p CROSS JOIN LATERAL (
    SELECT k.*, ` + fairWeight("k.key") + ` AS weight FROM (
      (` + fmt.Sprintf(step(`g.concurrency_key > p.key`), "p.wrapped") + `)
      UNION ALL
      (` + fmt.Sprintf(step(`NOT p.wrapped AND g.concurrency_key >= ''`), "true") + `)
    ) k LIMIT 1
  ) nx
  WHERE p.wsum < $5::int AND p.n < $5::int
    AND (NOT nx.wrapped OR (SELECT last FROM t) IS NULL OR nx.key <= (SELECT last FROM t))
)`
}

// fairWeight is the weight of key k in queue $2: its fair_weights row, else 1 (and 1
// without a probe when the queue has no weights: t.weighted).
func fairWeight(k string) string {
	return `CASE WHEN (SELECT weighted FROM t)
       THEN coalesce((SELECT fw.weight FROM {{s}}.fair_weights fw WHERE fw.queue = $2 AND fw.key = ` + k + `), 1)
       ELSE 1 END`
}

// fairCandidates is the CTEs fc and cand: the jobs a fair claim chooses among, in the
// order it takes them (pos). First the express lane — due jobs of priority at least
// the queue's bypass priority, in plain claim order over jobs_ready_idx — then, for
// every key of the walk, its first due jobs below the bypass priority in claim order
// (priority, run_at, id), as one range of jobs_fair_idx that names the key
// (concurrency_key = w.key: fairKeyJobs). A key of weight w gets w jobs per round, and
// as many rounds as the claim's size allows when the walk went round every key
// (ceil($5 / wsum)); the candidates are ordered by round, then by the key's place in
// the walk, then by claim order within the key: round-robin, weighted. A key that
// takes one job (a claim over more keys than its size) takes the one its walk's step
// returned when that one can be taken (walk.ok), without reading the key again: fc1's
// first branch, a filter of walk; only the other keys are read (its second branch,
// a lateral read per key, which cost a claim over 1,000 keys ~1 ms when every key of
// the walk went through it).
//
// Work-conserving: when keys had fewer due jobs than their share, the room they left
// (spare) goes to the keys that filled theirs, in further rounds — a second read of
// each such key, up to its share plus the room. So a burst of one key still fills
// whole claims while the other keys have little to do.
func fairCandidates() string {
	return fairSources() + `,
` + fairLanes("cand", fairPos, "")
}

// fairPosOrder is the fair order of the candidates (fairLanes' u), and fairPos their
// place in it.
const (
	fairPosOrder = `u.lane, u.p, u.round, u.wpos, u.i, u.run_at, u.id`
	fairPos      = `row_number() OVER (ORDER BY ` + fairPosOrder + `) AS pos`
)

// fairSources is the CTEs of fairCandidates before cand: ex (the express lane),
// rounds, fc1, spare and fc (the fair lane's candidates of each key of the walk).
func fairSources() string {
	return `ex AS MATERIALIZED (
  SELECT jobs.id, jobs.queue, jobs.kind, jobs.concurrency_key AS ckey, jobs.priority, jobs.run_at
  FROM {{s}}.jobs
  WHERE jobs.status = 'pending' AND jobs.queue = $2 AND jobs.priority >= (SELECT bypass FROM t)
    AND jobs.run_at <= (SELECT now FROM t) AND (SELECT open FROM t) AND ` + sequenceReady("jobs") + `
  ORDER BY jobs.priority DESC, jobs.run_at, jobs.id
  LIMIT $5
),
rounds AS MATERIALIZED (
  SELECT greatest(1, ceil($5::numeric / max(w.wsum)))::int AS r FROM walk w
),
fc1 AS MATERIALIZED (
  SELECT w.id, w.queue, w.kind, w.key AS ckey, w.priority, w.run_at, 1::bigint AS i, w.n AS wpos, w.weight, 1 AS lim, 1 AS round
  FROM walk w
  WHERE w.ok AND w.weight * (SELECT r FROM rounds) = 1
  UNION ALL
  SELECT c.*, w.n, w.weight, w.weight * (SELECT r FROM rounds), ((c.i + w.weight - 1) / w.weight)::int
  FROM walk w CROSS JOIN LATERAL (` + fairKeyJobs("w.key", "w.weight * (SELECT r FROM rounds)") + `
  ) c
  WHERE NOT (w.ok AND w.weight * (SELECT r FROM rounds) = 1)
),
spare AS MATERIALIZED (
  SELECT $5::int - (SELECT count(*) FROM ex) - (SELECT count(*) FROM fc1) AS n
),
fc AS (
  SELECT f.id, f.queue, f.kind, f.ckey, f.priority, f.run_at, f.wpos, f.round, f.i, f.weight FROM fc1 f
  UNION ALL
  SELECT c.id, c.queue, c.kind, c.ckey, c.priority, c.run_at, s.wpos, ((c.i + s.weight - 1) / s.weight)::int, c.i, s.weight
  FROM fc1 s CROSS JOIN LATERAL (` + fairKeyJobs("s.ckey", "s.lim + (SELECT n FROM spare)") + `) c
  WHERE s.i = s.lim AND (SELECT n FROM spare) > 0 AND c.i > s.lim
)`
}

// fairLanes is the CTE name over the candidates of both lanes (ex, then fc) in fair
// order — by lane, then the express lane's priority, then round, the key's place in
// the walk and claim order within the key — with the column pos (an expression over
// u) and the tail tail (an ORDER BY and LIMIT, or nothing).
func fairLanes(name, pos, tail string) string {
	return name + ` AS MATERIALIZED (
  SELECT u.id, u.queue, u.kind, u.ckey, u.priority, u.run_at, u.wpos, u.round, u.weight,
         ` + pos + `
  FROM (
    SELECT e.id, e.queue, e.kind, e.ckey, e.priority, e.run_at, 0 AS lane, -e.priority AS p, 0 AS round, 0 AS wpos, 0::bigint AS i, 0 AS weight FROM ex e
    UNION ALL
    SELECT f.id, f.queue, f.kind, f.ckey, f.priority, f.run_at, 1, 0, f.round, f.wpos, f.i, f.weight FROM fc f
  ) u` + tail + `
)`
}

// fairOrder is the limited fair claim's CTE po: the fair order (pos) and the key's
// weight (0 for the bypass lane) of each candidate (cand), as one jsonb object of
// [pos, weight] by id, which its RETURNING reads (fairPlace); and the CTE st, the
// jobs of relation pick (id, pos) that start at once (startMap). The engine hands a
// claim's jobs to its executors in the order they were chosen, and those that wait
// for an executor wait by key, each key taking its weight of jobs per turn (across
// claims), so that the job of a key enqueued after another key's backlog does not
// run after the jobs of that backlog a claim took. (The unlimited claim returns its
// walk instead, once, and the store rebuilds the order: fairOrderOf.)
func fairOrder(pick string) string {
	return `po AS MATERIALIZED (SELECT coalesce(jsonb_object_agg(c.id::text, jsonb_build_array(c.pos, c.weight)), '{}') AS m FROM cand c),
` + startMap(pick, "pos", "$6")
}

// fairPlace is what the limited fair claim's RETURNING adds for each job: its place
// in the fair order and its key's weight, from po (fairOrder).
const fairPlace = `((SELECT po.m FROM po) -> j.id::text ->> 0)::bigint AS pos,
    ((SELECT po.m FROM po) -> j.id::text ->> 1)::int AS weight`

// fairClaimed is the CTE claimed of the limited fair claim: its UPDATE (fairUpdate),
// returning each job (claimReturns) and then the columns the claim adds (returns).
func fairClaimed(pick, returns string) string {
	return `claimed AS (
  ` + fairUpdate(pick) + `
  RETURNING ` + claimReturns + `, ` + returns + `
)`
}

// fairUpdate is the fair claims' UPDATE without its RETURNING: it leases the jobs of
// relation pick (id) that are still pending (stillPending). This is where the fair
// claims set status 'running' (claimSet).
//
// The maps it reads (st, and the limited claim's po) are read as subqueries
// (InitPlans, evaluated once), not joined: a one-row CTE in the update's FROM is
// read again for every job it updates, and a CTE scan copies its row each time, so
// each job copied both maps, whose size grows with the claim — quadratic in the
// claim's size. In a claim of 1,000 jobs that copy was a quarter of the statement's
// CPU time (docs/fairness.md, "Third pass").
func fairUpdate(pick string) string {
	return `UPDATE {{s}}.jobs AS j
  ` + claimSet + `,
    slot_of = NULL, slot_token = NULL,
    ` + claimStarted + `
  FROM t
  WHERE j.id = ANY(ARRAY(SELECT id FROM ` + pick + `)) AND ` + stillPending + ` AND t.async IS NOT NULL`
}

// fairKeyJobs is the first due jobs of key k (an expression naming one key value)
// below the bypass priority, at most limit, in claim order and numbered (i): one
// range of jobs_fair_idx. The key is named as the range from k to k, and leads the
// ORDER BY: an order only jobs_fair_idx yields without a sort. With an equality the
// planner drops the key from the ORDER BY (it is constant), and the generic plan of a
// table whose statistics knew few keys ranged over jobs_ready_idx and filtered the
// key: a read that grows with the other keys' backlog. (On Citus, where the key will
// distribute the table, this range becomes the router statement's
// concurrency_key = $k: docs/fairness.md.)
func fairKeyJobs(k, limit string) string {
	return `
    SELECT x.*, row_number() OVER (ORDER BY x.ckey, x.priority DESC, x.run_at, x.id) AS i FROM (
      SELECT jobs.id, jobs.queue, jobs.kind, jobs.concurrency_key AS ckey, jobs.priority, jobs.run_at
      FROM {{s}}.jobs
      WHERE jobs.status = 'pending' AND jobs.fair_indexed AND jobs.queue = $2 AND jobs.concurrency_key >= ` + k + ` AND jobs.concurrency_key <= ` + k + `
        AND jobs.run_at <= (SELECT now FROM t)
        AND (jobs.priority < (SELECT bypass FROM t) OR (SELECT bypass FROM t) IS NULL)
        AND ` + sequenceReady("jobs") + `
      ORDER BY jobs.concurrency_key, jobs.priority DESC, jobs.run_at, jobs.id
      LIMIT ` + limit + `
    ) x`
}

// fairAdvance is the CTE rot that moves the rotation on: to the key of the last
// fair-lane candidate up to the last job chosen (the relation taken: id, pos), or,
// when there is none, to the last key the walk visited, so that keys whose jobs are
// all scheduled or blocked cannot hold the rotation in place. It records whether the
// walk stopped for want of room (more): keys it did not reach may have due jobs. It
// reads cand and taken once each (a join of the two under the plan guard was a
// nested loop, quadratic in the claim: 88 ms of a claim of 600).
func fairAdvance(taken string) string {
	return `rot AS (
` + fairRotate(`(SELECT c.ckey FROM cand c WHERE c.wpos > 0 AND c.pos <= (SELECT max(k.pos) FROM `+taken+` k)
            ORDER BY c.pos DESC LIMIT 1)`) + `
)`
}

// fairRotate is fairAdvance's statement, the rotation moved on to the key last (a
// subquery: NULL when the claim took no job of the fair lane) or else to the last key
// the walk visited.
func fairRotate(last string) string {
	return `  INSERT INTO {{s}}.fair_rotation AS r (queue, last_key, more, turns, updated_at)
  SELECT $2, coalesce(` + last + `,
           (SELECT w.key FROM walk w ORDER BY w.n DESC LIMIT 1)),
         (SELECT max(w.n) >= $5 OR max(w.wsum) >= $5 FROM walk w), 1, t.now
  FROM t
  WHERE EXISTS (SELECT 1 FROM walk)
  ON CONFLICT (queue) DO UPDATE SET last_key = excluded.last_key, more = excluded.more,
    turns = r.turns + 1, updated_at = excluded.updated_at
  RETURNING r.more`
}

// fairClaimSQL is the fair claim of a queue no limit governs ($1 now, $2 queue, $3
// worker, $4 lease µs, $5 how many). It locks nothing before its update: the
// queue's advisory lock (fair_lock) serialises fair claims, and the update re-checks
// that each chosen job is still pending (stillPending), so an operator's cancel or a
// claim of another path cannot make it take a job twice (the plain and limited claims take nothing from a fair queue: plainOpen). Its UPDATE (fairUpdate) is where the fair claim sets
// status 'running' (claimSet).
//
// Its candidates of both lanes are ordered, cut to $5 and numbered in one pass
// (pick), and it returns with the row of the first job in that order (pos 1) the keys
// of its walk in order (keys) and, when the queue has weights, theirs (weights), from
// which the store rebuilds each job's place in the fair order and its weight
// (fairOrderOf); each row says whether its job is of the express lane.
//
// The UPDATE is the statement itself, with the rotation's step (rot) a CTE beside it:
// its rows go to the client as they are written. As a CTE (claimed) read by a final
// SELECT, every row was stored and read back, and the final SELECT's window (to send
// the walk with the first row) went over them again: about 1 ms of a claim of 1,000
// jobs (docs/fairness.md, "Fifth pass").
func fairClaimSQL() string {
	return `
WITH RECURSIVE
` + fairWalk(unlimited) + `,
` + fairSources() + `,
` + fairLanes("pick", fairPos, "\n  ORDER BY "+fairPosOrder+"\n  LIMIT $5") + `,
` + startMap("pick", "pos", "$6") + `,
rot AS (
` + fairRotate(`(SELECT k.ckey FROM pick k WHERE k.wpos > 0 ORDER BY k.pos DESC LIMIT 1)`) + `
)
` + fairUpdate("pick") + `
RETURNING ` + claimReturns + `, (j.priority >= t.bypass) IS TRUE AS express,
  coalesce((SELECT r.more FROM rot r), false) AS more,
  CASE WHEN j.id = (SELECT k.id FROM pick k WHERE k.pos = 1) THEN (SELECT array_agg(w.key ORDER BY w.n) FROM walk w) END AS keys,
  CASE WHEN j.id = (SELECT k.id FROM pick k WHERE k.pos = 1) AND t.weighted THEN (SELECT array_agg(w.weight ORDER BY w.n) FROM walk w) END AS weights`
}

// fairLimitedClaimSQL is the fair claim of a queue some limit governs: the fair
// candidates, in their fair order, go through the limited claim's evaluation
// (limitEval), which keeps those every limit admits. It runs after the limits' lock
// as well as the queue's, so it is serialised with every limited claim. Parameters
// as fairClaimSQL's. It takes no successors (no slot handoff): a slot freed by a job
// of a fair queue goes back through the database.
func fairLimitedClaimSQL() string {
	return `
WITH RECURSIVE
` + fairWalk("true") + `,
lim AS MATERIALIZED (
  SELECT scope, target, key, max_running, rate, per_us FROM {{s}}.limits
  WHERE (scope = 'queue' AND target = $2) OR scope = 'kind'
),
` + slotsHeld + `,
` + fairCandidates() + `,
` + limitEval("f", "cand") + `,
rated AS (
  SELECT id, scope, target, bkey, per_us FROM f_cb WHERE rate IS NOT NULL AND ` + limRated + `
),
` + fairOrder("f_pick") + `,
` + fairClaimed("f_pick", fairPlace+", j.id IN (SELECT r.id FROM rated r) AS rated") + `,
` + startsLogged + `,
` + fairAdvance("f_pick") + `
SELECT c.*, coalesce((SELECT r.more FROM rot r), false) AS more FROM claimed c`
}

func newFairStatements(b *builder) fairStatements {
	return fairStatements{
		// The lock also makes the claim that follows run its generic plan (as the
		// limits' lock does): planning it anew at each claim costs more than running it.
		lock: b.add("fair_lock", `SELECT pg_advisory_xact_lock(hashtextextended('skiplock.fair.{{s}}.' || $1, 0)),
       set_config('plan_cache_mode', 'force_generic_plan', true)`),
		claim:        b.addGuarded(planGuardOn, "fair_claim", fairClaimSQL()),
		limitedClaim: b.addGuarded(planGuardScans, "fair_limit_claim", fairLimitedClaimSQL()),

		// Turning fairness on or off (and setting the bypass priority) announces it on
		// the jobs channel ($5) so that clients switch claims at once (they also
		// refresh on every poll).
		set: b.add("fair_set", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
INSERT INTO {{s}}.queues AS q (name, fair, fair_bypass_priority, updated_at)
SELECT $2, $3, $4, t.now FROM t
ON CONFLICT (name) DO UPDATE SET fair = excluded.fair, fair_bypass_priority = excluded.fair_bypass_priority,
  updated_at = excluded.updated_at
RETURNING q.updated_at, (SELECT pg_notify($5, '`+FairChanged+`')) IS NULL`),

		weight: b.add("fair_weight_set", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
INSERT INTO {{s}}.fair_weights AS w (queue, key, weight, updated_at)
SELECT $2, $3, $4, t.now FROM t
ON CONFLICT (queue, key) DO UPDATE SET weight = excluded.weight, updated_at = excluded.updated_at
RETURNING w.updated_at`),

		unweight: b.add("fair_weight_delete", `DELETE FROM {{s}}.fair_weights WHERE queue = $1 AND key = $2`),

		weights: b.add("fair_weight_list", `
SELECT queue, key, weight, updated_at FROM {{s}}.fair_weights
WHERE queue = $1 OR $1 IS NULL ORDER BY queue, key`),

		// Which queues are fair, with their bypass priority.
		scopes: b.add("fair_scopes", `SELECT name, fair_bypass_priority FROM {{s}}.queues WHERE fair ORDER BY name`),

		// The keys of a fair queue: for each key with pending jobs (a skip scan of
		// jobs_fair_idx, one descent per key, at most $4 keys), how many of its jobs
		// are due, counted up to a cap ($3), and the oldest run_at among those counted
		// — the key's oldest due job when it has at most $3 due jobs, or when they
		// share one priority (the range is in claim order: priority, then run_at). The
		// $5 keys with the most due jobs come back one row each (ties by key), then
		// the others summed in one row whose key is NULL. Its cost: one descent per key
		// plus at most $3 index entries per key, whatever the backlog.
		keys: b.addGuarded(planGuardOn, "fair_keys", `
WITH RECURSIVE
t AS MATERIALIZED (SELECT coalesce($1::timestamptz, now()) AS now),
k(key, n) AS (
  (SELECT g.concurrency_key, 1 FROM {{s}}.jobs g
   WHERE g.status = 'pending' AND g.fair_indexed AND g.queue = $2 AND g.concurrency_key >= ''
   ORDER BY g.concurrency_key LIMIT 1)
  UNION ALL
  SELECT nx.key, k.n + 1 FROM k CROSS JOIN LATERAL (
    SELECT g.concurrency_key AS key FROM {{s}}.jobs g
    WHERE g.status = 'pending' AND g.fair_indexed AND g.queue = $2 AND g.concurrency_key > k.key
    ORDER BY g.concurrency_key LIMIT 1
  ) nx
  WHERE k.n < $4::int
),
c AS MATERIALIZED (
  SELECT k.key, d.due, d.oldest FROM k CROSS JOIN LATERAL (
    SELECT count(*) AS due, min(x.run_at) AS oldest FROM (
      SELECT jobs.run_at FROM {{s}}.jobs
      WHERE jobs.status = 'pending' AND jobs.fair_indexed AND jobs.queue = $2 AND jobs.concurrency_key >= k.key AND jobs.concurrency_key <= k.key
        AND jobs.run_at <= (SELECT now FROM t)
      ORDER BY jobs.concurrency_key, jobs.priority DESC, jobs.run_at, jobs.id
      LIMIT $3::int
    ) x
  ) d
),
r AS MATERIALIZED (
  SELECT c.key, c.due, c.oldest, row_number() OVER (ORDER BY c.due DESC, c.key) AS rank FROM c
)
SELECT r.key, 1::bigint, r.due, r.oldest, (SELECT now FROM t), false AS other FROM r WHERE r.rank <= $5::int
UNION ALL
SELECT NULL, count(*), coalesce(sum(r.due), 0)::bigint, min(r.oldest), (SELECT now FROM t), true FROM r WHERE r.rank > $5::int
HAVING count(*) > 0
ORDER BY 6, 3 DESC, 1`),
	}
}
