package store

// Flow control: the limited claim that honours the limits table (its API is in
// limits_table.go, the slot handoff in handoff.go).
//
// A limited claim is a pipeline of three statements in one implicit transaction (one
// round trip): a transaction-scoped advisory lock that serialises limited claims of
// the schema, the claim, and a status query. The lock is its own statement on
// purpose: under READ COMMITTED each statement takes its snapshot when it starts, so
// the claim that follows the lock sees every limited claim committed before it —
// a lock taken inside the claim would be acquired after its snapshot, and two claims
// could both see the same free slot.
//
// Slots are not stored: a job holds one exactly while it is running under an
// unexpired lease, so the claim counts them. A crashed worker's slot is free the
// moment its lease runs out, whether or not the reclaimer has run yet — nothing can
// leak. Rate limits keep a sliding log of starts per bucket (limit_windows).

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// LimitsChanged is the NOTIFY payload (on the jobs channel) that announces a change
// of the limits table. Queue names cannot contain ':', so it never names a queue.
const LimitsChanged = ":limits"

// sequenceReady is the claim's condition that a job of a sequence may run: no earlier
// job of its sequence can still run (or failed and blocks). a is the jobs alias.
func sequenceReady(a string) string {
	return `(` + a + `.sequence_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM {{s}}.jobs e
      WHERE e.sequence_key = ` + a + `.sequence_key AND e.id < ` + a + `.id
        AND e.status IN ('pending', 'running', 'failed')
        AND (e.status <> 'failed' OR NOT e.sequence_skip_failed)))`
}

// unlimited is the plain claim's guard against limits it does not evaluate: a client
// whose view of the limits table is stale (a NOTIFY lost, a limit set a moment ago)
// claims nothing from a queue a limit may govern — one with a limit of its own, or
// any queue while some kind has one — and picks the limited claim at its next
// refresh. It is a one-time filter (two primary-key probes of a small table), so it
// cannot change the claim's plan. (A per-row "kind <> ALL(kind limits)" test made the
// planner misjudge the claim's selectivity and sort the whole queue, on every claim
// of every queue.)
const unlimited = `NOT EXISTS (SELECT 1 FROM {{s}}.limits l WHERE (l.scope = 'queue' AND l.target = $2) OR l.scope = 'kind')`

// bucketsOf selects one row per job of relation cand (columns id, queue, kind, ckey,
// pos) and bucket of a limit in lim that governs it: the bucket (scope, target, bkey),
// whether it is wide (the limit has no key), and the limit's figures.
func bucketsOf(cand string) string {
	return `
  SELECT c.id, c.pos, l.scope, l.target, CASE WHEN l.key = '' THEN '' ELSE c.ckey END AS bkey,
         l.key = '' AS wide, l.max_running, l.rate, l.per_us
  FROM ` + cand + ` c JOIN lim l
    ON l.target = CASE l.scope WHEN 'queue' THEN c.queue ELSE c.kind END
   AND (l.key = '' OR (c.ckey <> '' AND (l.key = c.ckey OR (l.key = '*' AND NOT EXISTS (
        SELECT 1 FROM lim o WHERE o.scope = l.scope AND o.target = l.target AND o.key = c.ckey)))))
`
}

// limitEval returns CTEs that choose, among the candidates of relation cand (columns
// id, queue, kind, ckey, priority, run_at, pos), the ones every applicable limit
// admits, as <p>_pick(id, pos), at most $5, in pos order. It also defines <p>_cb: each
// candidate's buckets with their room now.
//
// Buckets: a limit with an empty key is one bucket for its whole queue or kind ("wide"); a
// per-key limit is one bucket per concurrency key ('*' unless the key has its own row).
// Room = max_running − jobs running under a valid lease in the bucket, and
// rate − starts in the bucket's window, whichever is smaller. Candidates are ranked
// in claim order within each bucket, keyed buckets first and wide buckets among the
// survivors, so a saturated key never uses up a queue-wide allowance it cannot take.
// When the first $5 candidates fit every bucket they touch (no limit binds) they are
// taken as they are, and the ranking is never computed.
//
// That check (<p>_fast) is most of what a limited claim adds while no limit binds,
// the common case, so without rate limits it skips the per-bucket rows: it takes
// the jobs holding slots (held, which the statement must define) and the first $5
// candidates together, one row each (<p>_u), and sums them per wide limit, and per
// key in one hashed aggregate per scope; a bucket fails when it has candidates and
// more jobs than its limit. Hashed aggregates read each job once, where joining
// per-bucket rows read it once per bucket (W9 in docs/benchmarks.md measures what a
// limited claim costs; docs/benchmarks-archive.md, "W9: a cheaper check that no limit
// binds", what this change bought). With a rate limit, whose window each bucket must
// read anyway, it compares the buckets' rows of <p>_cb, as the ranking does.
//
// One row per candidate and bucket, with the running count joined by hash and the
// rate window read once per rate-limited bucket: a first version that collected
// distinct buckets and probed limit_windows for each did a probe per bucket and was
// slower under W9's many keys.
func limitEval(p, cand string) string {
	return p + `_x AS MATERIALIZED (` + bucketsOf(cand) + `),
` + p + `_ws AS MATERIALIZED (
  SELECT b.scope, b.target, b.bkey, coalesce((
           SELECT sum(x.n) FROM {{s}}.limit_windows w, unnest(w.starts, w.counts) AS x(at, n)
           WHERE w.scope = b.scope AND w.target = b.target AND w.key = b.bkey
             AND x.at > (SELECT now FROM t) - ` + rateWindow("b.per_us") + `), 0) AS n
  FROM (SELECT DISTINCT scope, target, bkey, per_us FROM ` + p + `_x WHERE rate IS NOT NULL) b
),
` + p + `_cb AS MATERIALIZED (
  SELECT x.id, x.pos, x.scope, x.target, x.bkey, x.wide, x.rate, x.per_us,
         least(coalesce(x.max_running - coalesce(rb.n, 0), 2147483647),
               coalesce(x.rate - ws.n, 2147483647)) AS avail
  FROM ` + p + `_x x
  LEFT JOIN runb rb ON rb.scope = x.scope AND rb.target = x.target AND rb.bkey = x.bkey
  LEFT JOIN ` + p + `_ws ws ON ws.scope = x.scope AND ws.target = x.target AND ws.bkey = x.bkey
),
` + p + `_u AS MATERIALIZED (
  SELECT g.queue, g.kind, g.ckey, 1 AS r, 0 AS n FROM held g
  UNION ALL
  SELECT c.queue, c.kind, c.ckey, 0, 1 FROM ` + cand + ` c WHERE c.pos <= $5
),
` + p + `_fast AS MATERIALIZED (
  SELECT CASE WHEN ` + limRated + ` THEN NOT EXISTS (
    SELECT 1 FROM ` + p + `_cb cb WHERE cb.pos <= $5
    GROUP BY cb.scope, cb.target, cb.bkey HAVING count(*) > min(cb.avail))
  ELSE NOT EXISTS (
    SELECT 1 FROM lim l
    WHERE l.key = '' AND (SELECT sum(c.n) > 0 AND sum(c.r) + sum(c.n) > l.max_running FROM ` + p + `_u c
                          WHERE l.target = CASE l.scope WHEN 'queue' THEN c.queue ELSE c.kind END)
  ) AND NOT EXISTS (
    SELECT 1 FROM (
      SELECT 'queue' AS scope, c.queue AS target, c.ckey, sum(c.r) AS r, sum(c.n) AS n FROM ` + p + `_u c
      WHERE c.ckey <> '' GROUP BY c.queue, c.ckey
      UNION ALL
      SELECT 'kind', c.kind, c.ckey, sum(c.r), sum(c.n) FROM ` + p + `_u c
      WHERE c.ckey <> '' AND EXISTS (SELECT 1 FROM lim WHERE lim.scope = 'kind' AND lim.key <> '')
      GROUP BY c.kind, c.ckey
    ) c JOIN lim l ON l.scope = c.scope AND l.target = c.target
       AND (l.key = c.ckey OR (l.key = '*' AND NOT EXISTS (
            SELECT 1 FROM lim o WHERE o.scope = l.scope AND o.target = l.target AND o.key = c.ckey)))
    WHERE c.n > 0 AND c.r + c.n > l.max_running)
  END AS ok
),
` + p + `_s1 AS MATERIALIZED (
  SELECT c.id, c.pos FROM ` + cand + ` c
  EXCEPT
  SELECT k.id, k.pos FROM (
    SELECT id, pos, row_number() OVER (PARTITION BY scope, target, bkey ORDER BY pos) > avail AS over
    FROM ` + p + `_cb WHERE NOT wide) k
  WHERE k.over
),
` + p + `_pick AS MATERIALIZED (
  SELECT c.id, c.pos FROM ` + cand + ` c WHERE c.pos <= $5 AND (SELECT ok FROM ` + p + `_fast)
  UNION ALL
  SELECT z.id, z.pos FROM (
  SELECT s.id, s.pos FROM ` + p + `_s1 s
  EXCEPT
  SELECT k.id, k.pos FROM (
    SELECT cb.id, cb.pos, row_number() OVER (PARTITION BY cb.scope, cb.target, cb.bkey ORDER BY cb.pos) > cb.avail AS over
    FROM ` + p + `_cb cb JOIN ` + p + `_s1 s ON s.id = cb.id
    WHERE cb.wide) k
  WHERE k.over
  ORDER BY pos LIMIT $5) z
  WHERE NOT (SELECT ok FROM ` + p + `_fast)
)`
}

// successorMap maps each successor the handoff chose (succ: id, pred, ptoken) to its
// predecessor's id and lease token, as one jsonb object in a one-row CTE sm, and
// successorSlots is what a claim writes from it to each job it takes: NULL slots for a
// job that succeeds nobody. A lookup in one row instead of a join with succ: the
// claim's UPDATE then reads jobs only by its array of ids, an Index Cond on the
// primary key, whatever the table's statistics say (a join let a drained table's
// plan read the whole primary key; planguard.go, TestEveryStatementPlansBounded).
// MATERIALIZED, so the map is built once: as a subquery in the UPDATE's FROM, a
// generic plan that took succ for one row re-aggregated it for every job updated,
// quadratic in the successors claimed.
const (
	successorMap   = `sm AS MATERIALIZED (SELECT jsonb_object_agg(s.id::text, jsonb_build_array(s.pred, s.ptoken)) AS m FROM succ s)`
	successorSlots = `slot_of = (sm.m -> j.id::text ->> 0)::uuid,
    slot_token = (sm.m -> j.id::text ->> 1)::uuid`
)

// limitedClaimSQL is the claim of a queue some limit governs. Parameters as the plain
// claim ($1 now, $2 queue, $3 worker, $4 lease µs, $5 how many) and $6, the size of the
// head window: the first $6 due jobs in claim order are the candidates. When they
// yield fewer than $5 jobs only because their keys or kinds are saturated, and more
// due jobs may lie behind them, the claim also takes up to 16 due jobs of every other
// (kind, concurrency key) group of the queue (one index probe per group over
// jobs_group_ready_idx) and chooses among both: a backlog of one saturated key never
// hides the jobs of others. The index holds the jobs marked grouped (migration 0022:
// every job of a queue a limit governs, marked at its insert or when the limit
// appeared), and the walk names the mark so that it reads that index; a job left
// unmarked is still in the head window, which reads jobs_ready_idx.
//
// Its time is clock_timestamp(), read after the statement's snapshot: a start is then
// never recorded earlier than the end of a job whose slot it took (now() is the
// transaction's start, which precedes the wait for the lock).
//
// Handoff. $7 and $8 (ids and tokens) are jobs the calling worker is running and
// has no successor for. The candidates the limits leave out can be taken as
// successors of those jobs, one each, in claim order, on top of the $5: a
// candidate goes to a predecessor whose set of buckets is the same as its own (by
// signature, bucketSig), so it needs no room of its own — it holds no slot while its
// predecessor runs under the recorded lease (holdsSlot), and its worker starts it
// only once the predecessor's handler has returned. A slot then changes hands on the
// worker, with no database round trip between one job and the next: freeing a slot
// through the database (outcome committed, then a claim) would idle the slot for a
// large share of a short job's cycle (W9's binding limit in docs/benchmarks.md).
// Buckets with a rate limit take no successors: a start is recorded at the claim, and
// a successor starts later than that.
func limitedClaimSQL() string {
	return `
WITH RECURSIVE
` + limitPrologue + `,
` + slotsHeld + `,
` + limitHead("$6") + `,
` + limitEval("h", "head") + `,
fb AS MATERIALIZED (
  SELECT (SELECT count(*) FROM head) >= $6
     AND (SELECT count(*) FROM h_pick) < $5
     AND NOT EXISTS (SELECT 1 FROM h_cb a WHERE a.scope = 'queue' AND a.bkey = ''
                     AND a.avail <= (SELECT count(*) FROM h_pick)) AS need
),
grp AS (
  (SELECT g.kind, g.concurrency_key AS ckey FROM {{s}}.jobs g
   WHERE g.status = 'pending' AND g.grouped AND g.queue = $2 AND g.run_at >= (SELECT floor FROM t) AND (SELECT need FROM fb)
   ORDER BY g.kind, g.concurrency_key LIMIT 1)
  UNION ALL
  SELECT nx.kind, nx.ckey FROM grp
  CROSS JOIN LATERAL (
    SELECT g.kind, g.concurrency_key AS ckey FROM {{s}}.jobs g
    WHERE g.status = 'pending' AND g.grouped AND g.queue = $2 AND (g.kind, g.concurrency_key) > (grp.kind, grp.ckey)
      AND g.run_at >= (SELECT floor FROM t)
    ORDER BY g.kind, g.concurrency_key LIMIT 1
  ) nx
),
extra AS MATERIALIZED (
  SELECT e.* FROM grp
  CROSS JOIN LATERAL (
    SELECT jobs.id, jobs.queue, jobs.kind, jobs.concurrency_key AS ckey, jobs.priority, jobs.run_at
    FROM {{s}}.jobs
    WHERE jobs.status = 'pending' AND jobs.grouped AND jobs.queue = $2 AND jobs.kind = grp.kind AND jobs.concurrency_key = grp.ckey
      AND jobs.run_at <= (SELECT now FROM t) AND jobs.run_at >= (SELECT floor FROM t) AND ` + sequenceReady("jobs") + `
    ORDER BY jobs.priority DESC, jobs.run_at, jobs.id
    LIMIT 16
  ) e
  WHERE NOT EXISTS (SELECT 1 FROM h_cb a WHERE a.avail <= 0 AND (
          (a.scope = 'queue' AND grp.ckey <> '' AND a.bkey = grp.ckey) OR
          (a.scope = 'kind' AND a.target = grp.kind AND (a.bkey = '' OR a.bkey = grp.ckey))))
),
allc AS MATERIALIZED (
  SELECT u.*, row_number() OVER (ORDER BY u.priority DESC, u.run_at, u.id) AS pos FROM (
    SELECT id, queue, kind, ckey, priority, run_at FROM head
    UNION
    SELECT id, queue, kind, ckey, priority, run_at FROM extra
  ) u
),
` + limitEval("a", "allc") + `,
pick AS MATERIALIZED (
  SELECT id, pos FROM h_pick WHERE NOT (SELECT need FROM fb)
  UNION ALL
  SELECT id, pos FROM a_pick WHERE (SELECT need FROM fb)
),
` + startMap("pick", "pos", "$12") + `,
rated AS (
  SELECT id, scope, target, bkey, per_us FROM h_cb WHERE rate IS NOT NULL AND NOT (SELECT need FROM fb) AND ` + limRated + `
  UNION ALL
  SELECT id, scope, target, bkey, per_us FROM a_cb WHERE rate IS NOT NULL AND (SELECT need FROM fb) AND ` + limRated + `
),
` + handoff(`
    SELECT id, pos, scope, target, bkey, rate FROM h_x WHERE NOT (SELECT need FROM fb)
    UNION ALL
    SELECT id, pos, scope, target, bkey, rate FROM a_x WHERE (SELECT need FROM fb)`, "pick") + `,
` + successorMap + `,
claimed AS (
  UPDATE {{s}}.jobs AS j
  ` + claimSet + `,
    ` + successorSlots + `,
    ` + claimStarted + `
  FROM t, sm
  WHERE j.id = ANY(ARRAY(SELECT id FROM pick UNION ALL SELECT id FROM succ)) AND ` + stillPending + ` AND t.async IS NOT NULL
  RETURNING ` + claimReturns + `, j.slot_of, j.slot_token, j.id IN (SELECT r.id FROM rated r) AS rated
),
` + startsLogged + `
SELECT * FROM claimed`
}

// slotsHeld is the limited claims' CTEs held (the jobs holding limit slots: queue,
// kind, ckey) and runb (how many per bucket), which limitEval reads.
var slotsHeld = `held AS MATERIALIZED (
  SELECT r.queue, r.kind, r.concurrency_key AS ckey FROM {{s}}.jobs r WHERE ` + holdsSlot("r") + `
),
runb AS MATERIALIZED (
  SELECT v.scope, v.target, v.bkey, count(*) AS n
  FROM held g
  CROSS JOIN LATERAL (VALUES ('queue', g.queue, '', true), ('queue', g.queue, g.ckey, false),
                             ('kind', g.kind, '', true), ('kind', g.kind, g.ckey, false)) AS v(scope, target, bkey, wide)
  WHERE v.wide OR g.ckey <> ''
  GROUP BY 1, 2, 3
)`

// startsLogged is the limited claims' CTE logged: the starts of the claimed jobs
// (claimed: id) that a rate limit counts (rated: id, scope, target, bkey, per_us),
// appended to their buckets' windows at the claim's time, the window trimmed as it
// slides.
var startsLogged = `logged AS (
  INSERT INTO {{s}}.limit_windows AS w (scope, target, key, per_us, starts, counts)
  SELECT r.scope, r.target, r.bkey, max(r.per_us), ARRAY[(SELECT now FROM t)], ARRAY[count(*)::int]
  FROM rated r JOIN claimed c ON c.id = r.id
  GROUP BY r.scope, r.target, r.bkey
  ON CONFLICT (scope, target, key) DO UPDATE SET
    per_us = excluded.per_us,
    starts = ARRAY(SELECT x.at FROM unnest(w.starts, w.counts) AS x(at, n)
                   WHERE x.at > excluded.starts[1] - ` + rateWindow("excluded.per_us") + ` ORDER BY x.at) || excluded.starts,
    counts = ARRAY(SELECT x.n FROM unnest(w.starts, w.counts) AS x(at, n)
                   WHERE x.at > excluded.starts[1] - ` + rateWindow("excluded.per_us") + ` ORDER BY x.at) || excluded.counts
  RETURNING 1
)`

// RateStartSlack is how late after its claim a job under a rate limit may start its
// handler: a claim counts the starts of the limit's period plus this slack, and the
// engine hands back (to pending, its attempt given back) a rate-limited job whose
// handler could not start within it. A claim's start is recorded at the claim, and
// the handler starts a little later (the claim's round trip, an executor coming
// free); a later batch may start sooner after its claim than an earlier one did, so
// counting claims over the period alone let the handlers' starts exceed the limit in
// some window of the period. Counting over the period plus the slack, with every
// start within the slack of its claim, holds the limit on handler starts in every
// window of the period, at the cost of a limit that is slightly slower than its
// figure (rate per period + slack; docs/limits.md).
const RateStartSlack = 50 * time.Millisecond

// rateWindow is the span over which a claim counts a rate limit's recorded starts:
// the period (the column perUS, in microseconds) plus RateStartSlack, as an interval.
func rateWindow(perUS string) string {
	return "(" + perUS + " + " + strconv.FormatInt(RateStartSlack.Microseconds(), 10) + ") * interval '1 microsecond'"
}

// stillPending is the limited claims' re-check that a job they chose is still pending
// when its row is updated (they lock nothing before: the queue's advisory lock
// serialises them). Written as a comparison of text, so that it does not imply the
// predicate of the partial indexes of pending jobs: with j.status = 'pending', a plan
// made while the table held a page of rows read the whole of jobs_group_ready_idx for
// the few ids the claim updates, instead of probing the primary key for each;
// TestEveryStatementPlansBounded.
const stillPending = `j.status::text = 'pending'`

// limRated is whether any limit that may govern queue $2's jobs has a rate.
const limRated = `EXISTS (SELECT 1 FROM lim WHERE lim.rate IS NOT NULL)`

// limitPrologue is the limited claims' t (now; the floor and priority of their
// cursor, $9 to $11: fromCursor; the switch to an asynchronous commit: see
// asyncCommit; and the claim's token: claimSet) and lim, the limits that may govern
// queue $2's jobs.
var limitPrologue = `t AS MATERIALIZED (
  SELECT n.now, ` + cursorColumns("$9", "$10", "$11") + `, ` + asyncCommit + `, ` + claimToken + `
  FROM (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now) n
),
lim AS MATERIALIZED (
  SELECT scope, target, key, max_running, rate, per_us FROM {{s}}.limits
  WHERE (scope = 'queue' AND target = $2) OR scope = 'kind'
)`

// limitHead is the CTE head: the first window due, ready jobs of queue $2 (none while
// it is paused) in claim order, numbered (pos), from the claim's cursor on: the
// plain claim's three index ranges (claimBranch, fromCursor), read in claim order and
// only as far as the window needs.
func limitHead(window string) string {
	return `head AS MATERIALIZED (
  SELECT h.*, row_number() OVER (ORDER BY h.priority DESC, h.run_at, h.id) AS pos FROM (
    ` + limitRange(">", window) + `
    UNION ALL
    ` + limitRange("=", window) + `
    UNION ALL
    ` + limitRange("<", window) + `
    LIMIT ` + window + `
  ) h
)`
}

// limitRange is one of limitHead's index ranges: at most window jobs.
func limitRange(op, window string) string {
	return `(SELECT jobs.id, jobs.queue, jobs.kind, jobs.concurrency_key AS ckey, jobs.priority, jobs.run_at
     FROM {{s}}.jobs
     WHERE ` + fromCursor("jobs", op) + `
       AND ` + plainOpen + `
       AND ` + sequenceReady("jobs") + `
     ORDER BY jobs.priority DESC, jobs.run_at, jobs.id
     LIMIT ` + window + `)`
}

type limitStatements struct {
	lock, claim, succ, status stmt
	set, remove, list, scopes stmt
	usage, sweep              stmt
	settle, changed, heal     stmt
}

func newLimitStatements(b *builder) limitStatements {
	return limitStatements{
		// The lock also makes the claim that follows run its generic plan: planning
		// that statement anew for each claim (PostgreSQL's choice for it under
		// plan_cache_mode=auto) cost more than executing it.
		lock: b.add("limit_lock", `SELECT pg_advisory_xact_lock(hashtextextended('skiplock.limits.{{s}}', 0)),
       set_config('plan_cache_mode', 'force_generic_plan', true)`),

		claim: b.addGuarded(planGuardScans, "limit_claim", limitedClaimSQL()),
		succ:  b.addGuarded(planGuardScans, "limit_successors", successorClaimSQL()),

		// After a limited claim, in its transaction: how many due, ready jobs of the
		// queue are still waiting from the claim's cursor on (at most $3; none while the
		// queue is paused: a pause is not a limit), the first of them in claim order
		// (where the next claim resumes: ClaimLimited), and in how many microseconds a
		// full rate window of a limit on the queue or on any kind frees a start (its
		// oldest start plus its period, less now: the database's clock, so host clock
		// skew cannot shift it). NULL when no rate window is full.
		status: b.addGuarded(planGuardScans, "limit_status", `
WITH t AS (
  SELECT n.now, `+cursorColumns("$4", "$5", "$6")+`
  FROM (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now) n
),
d AS MATERIALIZED (
  SELECT w.id, w.priority, w.run_at FROM (
    `+limitRange(">", "$3")+`
    UNION ALL
    `+limitRange("=", "$3")+`
    UNION ALL
    `+limitRange("<", "$3")+`
    LIMIT $3
  ) w
)
SELECT
  (SELECT count(*) FROM d),
  f.priority, f.run_at,
  (SELECT (extract(epoch FROM min(o.oldest + `+rateWindow("w.per_us")+`) - (SELECT now FROM t)) * 1000000)::bigint
   FROM {{s}}.limit_windows w
   JOIN {{s}}.limits l ON l.scope = w.scope AND l.target = w.target
     AND (l.key = w.key OR (l.key = '*' AND w.key <> ''))
   CROSS JOIN LATERAL (
     SELECT min(x.at) AS oldest, sum(x.n) AS n FROM unnest(w.starts, w.counts) AS x(at, n)
     WHERE x.at > (SELECT now FROM t) - `+rateWindow("w.per_us")+`) o
   WHERE ((w.scope = 'queue' AND w.target = $2) OR w.scope = 'kind') AND l.rate IS NOT NULL
     AND o.n >= l.rate)
FROM (SELECT 1) one
LEFT JOIN LATERAL (SELECT d.priority, d.run_at FROM d ORDER BY d.priority DESC, d.run_at, d.id LIMIT 1) f ON true`),

		// Setting a limit announces it on the jobs channel ($8) so clients switch to
		// the limited claim at once (they also refresh on every poll).
		set: b.add("limit_set", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
INSERT INTO {{s}}.limits AS l (scope, target, key, max_running, rate, per_us, updated_at)
SELECT $2, $3, $4, $5, $6, $7, t.now FROM t
ON CONFLICT (scope, target, key) DO UPDATE SET
  max_running = excluded.max_running, rate = excluded.rate, per_us = excluded.per_us, updated_at = excluded.updated_at
RETURNING l.updated_at, (SELECT pg_notify($8, '`+LimitsChanged+`')) IS NULL`),

		remove: b.add("limit_delete", `
WITH d AS (
  DELETE FROM {{s}}.limits WHERE scope = $1 AND target = $2 AND key = $3 RETURNING 1
)
SELECT count(*), (SELECT pg_notify($4, '`+LimitsChanged+`')) IS NULL FROM d`),

		// After a change of limits or of a queue's fairness has committed (LanesSettle,
		// migrations 0022 and 0024).
		settle: b.add("lanes_settle", `SELECT {{s}}.lanes_settle()`),
		// Whether this transaction's change of limits or fairness rewrote job_grouped or
		// job_fair.
		changed: b.add("lanes_changed", `SELECT coalesce(current_setting('skiplock.lanes_changed', true), '') = 'on'`),
		// The lane settler's run (LanesHeal): the settle, when a queue made fair was
		// not settled since (migration 0024, queues.fair_unsettled); NULL otherwise.
		heal: b.add("lanes_heal", `
SELECT CASE WHEN EXISTS (SELECT 1 FROM {{s}}.queues WHERE fair_unsettled IS NOT NULL) THEN {{s}}.lanes_settle() END`),

		list: b.add("limit_list", `
SELECT scope, target, key, max_running, rate, per_us, updated_at FROM {{s}}.limits
ORDER BY scope DESC, target, key`),

		// Which claims must be limited: the queues with a limit of their own, and
		// whether any kind has one (a kind can be enqueued into any queue).
		scopes: b.add("limit_scopes", `
SELECT coalesce(array_agg(DISTINCT target) FILTER (WHERE scope = 'queue'), '{}'),
       coalesce(bool_or(scope = 'kind'), false)
FROM {{s}}.limits`),

		// Usage of every bucket a limit defines: wide and single-key limits always,
		// and for a '*' limit each key that runs jobs or started any within its window
		// (keys with their own row excluded). running counts valid leases only.
		usage: b.addGuarded(planGuardScans, "limit_usage", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
run AS (
  SELECT r.queue, r.kind, r.concurrency_key AS ckey, count(*) AS n FROM {{s}}.jobs r
  WHERE `+holdsSlot("r")+`
  GROUP BY 1, 2, 3
),
buckets AS (
  SELECT l.scope, l.target, l.key AS lkey, l.key AS bkey, l.max_running, l.rate, l.per_us
  FROM {{s}}.limits l WHERE l.key <> '*'
  UNION
  SELECT l.scope, l.target, '*', k.bkey, l.max_running, l.rate, l.per_us
  FROM {{s}}.limits l
  CROSS JOIN LATERAL (
    SELECT r.ckey AS bkey FROM run r
    WHERE r.ckey <> '' AND l.target = CASE l.scope WHEN 'queue' THEN r.queue ELSE r.kind END
    UNION
    SELECT w.key FROM {{s}}.limit_windows w WHERE w.scope = l.scope AND w.target = l.target AND w.key <> ''
  ) k
  WHERE l.key = '*' AND NOT EXISTS (
    SELECT 1 FROM {{s}}.limits o WHERE o.scope = l.scope AND o.target = l.target AND o.key = k.bkey)
)
SELECT b.scope, b.target, b.lkey, b.bkey, b.max_running, b.rate, b.per_us,
  coalesce((SELECT sum(r.n) FROM run r
            WHERE b.target = CASE b.scope WHEN 'queue' THEN r.queue ELSE r.kind END
              AND (b.bkey = '' OR r.ckey = b.bkey)), 0)::bigint,
  coalesce((SELECT sum(x.n) FROM {{s}}.limit_windows w, unnest(w.starts, w.counts) AS x(at, n)
            WHERE w.scope = b.scope AND w.target = b.target AND w.key = b.bkey
              AND x.at > (SELECT now FROM t) - w.per_us * interval '1 microsecond'), 0)::bigint
FROM buckets b
ORDER BY b.scope DESC, b.target, b.lkey, b.bkey`),

		// The sweeper deletes the windows of buckets that started nothing within their
		// period, and those of limits that no longer exist.
		sweep: b.add("limit_sweep", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
DELETE FROM {{s}}.limit_windows w
USING t
WHERE w.starts[array_upper(w.starts, 1)] <= t.now - `+rateWindow("w.per_us")+`
   OR NOT EXISTS (SELECT 1 FROM {{s}}.limits l WHERE l.scope = w.scope AND l.target = w.target AND l.rate IS NOT NULL)`),
	}
}

// Batcher runs a pipeline of statements in one round trip: *pgxpool.Pool, *pgx.Conn.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}
