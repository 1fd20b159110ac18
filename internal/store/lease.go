package store

// Leases: the claim, which leases due jobs under fresh tokens, and the heartbeat,
// which extends the leases a process still holds.

import (
	"cmp"
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// asyncCommit makes the statement's own (autocommit) transaction commit without
// waiting for its WAL to reach disk. Claims and heartbeats use it: they need no
// durability of their own. A claim lost in a server crash leaves the job pending, so
// it runs again — which at-least-once execution already allows — and the lost
// token fences out whatever the first worker writes; a lost heartbeat only shortens
// a lease. Every outcome, in contrast, commits synchronously, and since WAL is
// flushed in order, a durable outcome implies its claim is durable too. This takes
// one disk sync off the path from enqueue to handler start.
const asyncCommit = `set_config('synchronous_commit', 'off', true) AS async`

// plainOpen is the plain claims' one-time check of queue $2 (the plain claim's and
// the limited claim's): it is not paused, and it is not fair. A client whose view of
// the fair queues is stale — it has not heard a QueueSetFair yet, because its
// listener connected after the NOTIFY or lost it — claims nothing from a fair queue
// until its next refresh (on that NOTIFY, and every PollInterval) switches it to the
// fair claim. Without the check it took the backlog's jobs in plain order, outside
// the rotation, beside the other clients' fair claims: the chaos fair round caught a
// worker started just before the queue was made fair taking the hot key's jobs in
// four claims while the light keys' first jobs waited (docs/fairness.md, "Two claims
// in flight, and the stale client"). The same primary-key probe as the pause check.
const plainOpen = `NOT EXISTS (SELECT 1 FROM {{s}}.queues p WHERE p.name = $2 AND (p.paused_at IS NOT NULL OR p.fair))`

// claimToken is the claim statement's lease token, a column of its t (claimSet).
const claimToken = `gen_random_uuid() AS token`

// claimSet is what a claim writes to each job it takes ($3 the worker, $4 the lease in
// microseconds, t.now the claim's time, t.token its token): running, one more attempt,
// a fresh lease. Each claim also sets slot_of and slot_token (limits.go, holdsSlot):
// NULL, or the predecessor a limited claim hands the job's slots from.
//
// One token per claim statement (claimToken), shared by the jobs it takes. Fencing
// needs a token that no earlier claim of the same job held, and every fenced write
// matches (id, lease_token), never the token alone, so jobs of one claim sharing it
// changes nothing a write can match. A token per row would call gen_random_uuid(),
// OpenSSL's random generator, once per job: a large share of the claim statement's
// time (docs/benchmarks-archive.md, "The claim's token and the Go side's share").
const claimSet = `SET status = 'running',
    attempts = j.attempts + 1,
    lease_until = t.now + $4::bigint * interval '1 microsecond',
    lease_token = t.token,
    worker_id = $3,
    attempted_at = t.now,
    updated_at = t.now`

// startMap is the CTE st of a claim: the jobs an idle executor of the claiming
// worker takes at once — the first n of relation rel (a column id) in claim order
// (order) — as one jsonb object keyed by id, which claimStarted looks each job up in.
// The others wait (the worker's prefetch) and are written claimed, not started
// (migration 0016); the worker writes their start once their handlers begin. A
// lookup in one row, as successorMap, so the claim's UPDATE still reads jobs only by
// its array of ids.
func startMap(rel, order, n string) string {
	return `st AS MATERIALIZED (
  SELECT coalesce(jsonb_object_agg(x.id::text, true), '{}'::jsonb) AS m
  FROM (SELECT id FROM ` + rel + ` ORDER BY ` + order + ` LIMIT ` + n + `) x
)`
}

// startBound is the CTE st of the plain claim, startMap's cheaper form for a claim
// that reads its jobs in the index's order (priority DESC, run_at, id): the last of
// the first n jobs of relation rel in that order, none when n is 0. The jobs up to it
// start at once (claimStartedBound): comparisons of columns the UPDATE already reads,
// where the map cost an id's text and a jsonb lookup per job (up to 2% of the claim's
// server time; docs/benchmarks.md, "W5's time, and two cuts of it").
func startBound(rel, n string) string {
	return `st AS MATERIALIZED (
  SELECT x.priority, x.run_at, x.id
  FROM (SELECT priority, run_at, id FROM ` + rel + ` ORDER BY priority DESC, run_at, id LIMIT ` + n + `) x
  ORDER BY x.priority, x.run_at DESC, x.id DESC
  LIMIT 1
)`
}

// claimStartedBound is what the plain claim writes to the started column: whether
// the job comes no later than st's bound in claim order (startBound). Without a bound
// (n was 0) every comparison is NULL, and no job starts. The job's priority and
// run_at are the claimed row's, which the claim holds locked.
const claimStartedBound = `started = coalesce(CASE WHEN j.priority <> (SELECT priority FROM st) THEN j.priority > (SELECT priority FROM st)
      ELSE (j.run_at, j.id) <= ((SELECT run_at FROM st), (SELECT id FROM st)) END, false)`

// claimStarted is what a claim writes to the started column (startMap). The map is
// read as a subquery (an InitPlan, evaluated once per statement), never joined into
// the UPDATE's FROM: a one-row CTE joined there is read again, its jsonb copied, for
// every job updated, which made a claim's cost quadratic in its size.
const claimStarted = `started = (SELECT st.m FROM st) ? j.id::text`

type leaseStatements struct {
	claim, claimHead, heartbeat stmt
}

// claimBranch is one index range of the claim: the due pending jobs of queue $2 whose
// priority compares to the cursor's by op, from the floor on (t.floor: the cursor's
// run_at, or lag ($8) before now if that is earlier), in claim order.
//
// Why a cursor. A claim that starts at the head of jobs_ready_idx walks every entry
// of a job claimed since the last vacuum: the claim's update leaves the old tuple's
// entry behind. Those entries are normally marked dead by the scans that meet them
// (kill_prior_tuple) once no snapshot can see the old tuple, and skipped cheaply
// after that. But while any session holds an older snapshot (a transaction left idle,
// a long report, a replication slot), neither vacuum nor that marking can act, and
// each claim visits the heap for every job claimed since the snapshot was taken:
// pickup latency grows with the pin, linearly in the jobs claimed since it began (W10
// in docs/benchmarks.md). Starting at the floor, with the priority an equality
// (branch b), the index scan begins where the live jobs are, and the dead entries
// before it are never read; in the other branches run_at >= floor is checked on the
// index entry, without a heap visit.
//
// What the floor can leave behind — a job of an enqueue transaction that committed
// more than lag after it began, a job given a run_at in the past, a sequence's next
// job or a flow's parent made ready late — the producer's head check (ClaimHead)
// finds, within its poll interval; and a producer whose own outcomes can unblock
// jobs (Job.Unblocks) restarts at the head.
//
// The limited claims (limits.go) resume from a cursor the same way, with these same
// ranges (fromCursor).
func claimBranch(name, op string) string {
	return name + ` AS (
  SELECT id, priority, run_at FROM {{s}}.jobs
  WHERE ` + fromCursor("jobs", op) + `
    AND (SELECT open FROM t)
    AND ` + sequenceReady("jobs") + `
  ORDER BY priority DESC, run_at, id
  LIMIT $5
  FOR UPDATE SKIP LOCKED
)`
}

// fromCursor is the condition of one index range of a claim that resumes from a
// cursor (claimBranch): jobs (alias a) pending in queue $2 whose priority compares to
// the cursor's (t.prio) by op, due (t.now), from the floor (t.floor) on.
func fromCursor(a, op string) string {
	return a + `.status = 'pending' AND ` + a + `.queue = $2 AND ` + a + `.priority ` + op + ` (SELECT prio FROM t)
    AND ` + a + `.run_at >= (SELECT floor FROM t) AND ` + a + `.run_at <= (SELECT now FROM t)`
}

// cursorColumns are the columns of a claim's t that fromCursor reads, from the
// statement's time n.now and the parameters prio and at (the cursor: NULL for none)
// and lag (microseconds): floor, the cursor's run_at or lag before now if that is
// earlier, and prio, the cursor's priority (without a cursor the highest, so that
// range c holds the whole queue and the claim starts at the head).
func cursorColumns(prio, at, lag string) string {
	return `least(coalesce(` + at + `::timestamptz, '-infinity'), n.now - ` + lag + `::bigint * interval '1 microsecond') AS floor,
         coalesce(` + prio + `::int, 2147483647) AS prio`
}

func newLeaseStatements(b *builder) leaseStatements {
	return leaseStatements{
		// The claim: lock up to $5 due pending jobs of one queue in index order, skipping
		// rows other claimers hold, and lease them under a fresh token in the same statement.
		// A paused queue claims nothing, a fair queue is left to the fair claim
		// (plainOpen), and a queue some limit may govern is left to the limited claim
		// (limits.go: unlimited): these checks do not depend on the row, so they run
		// once per statement (open, a one-time filter). A job of a sequence waits
		// while an earlier job of its sequence can still run (or failed and blocks): one
		// probe of jobs_sequence_idx, made only for jobs that have a sequence key.
		//
		// The scan resumes from a cursor ($6 priority, $7 run_at: the last job the
		// producer claimed) instead of the index head; claimBranch says why. Without a
		// cursor ($6 and $7 NULL) it starts at the head. Branches a (higher priorities),
		// b (the cursor's priority) and c (lower ones) are read in claim order and only as
		// far as the LIMIT needs: a CTE is evaluated only as far as its reader fetches, so
		// c is never run, nor its rows locked, when a and b fill the claim.
		claim: b.addGuarded(planGuardOn, "claim", `
WITH t AS (
  SELECT n.now, `+cursorColumns("$6", "$7", "$8")+`,
         `+plainOpen+`
           AND `+unlimited+` AS open,
         `+asyncCommit+`, `+claimToken+`
  FROM (SELECT coalesce($1::timestamptz, now()) AS now) n
),
`+claimBranch("a", ">")+`,
`+claimBranch("b", "=")+`,
`+claimBranch("c", "<")+`,
claimed AS (
  SELECT * FROM a UNION ALL SELECT * FROM b UNION ALL SELECT * FROM c
  LIMIT $5
),
`+startBound("claimed", "$9")+`
UPDATE {{s}}.jobs AS j
`+claimSet+`,
    slot_of = NULL, slot_token = NULL,
    `+claimStartedBound+`
FROM t
WHERE j.id = ANY(ARRAY(SELECT id FROM claimed)) AND t.async IS NOT NULL
RETURNING `+leanClaimReturns),

		// ClaimHead: the first job the claim would take if it started at the index head,
		// for the producer's check that nothing claimable lies behind its cursor. It
		// reads without locking (a job another claim is taking still shows), and it
		// leaves out the pause and limit checks: the claim applies those.
		claimHead: b.addGuarded(planGuardOn, "claim_head", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
SELECT h.priority, h.run_at, t.now
FROM t LEFT JOIN LATERAL (
  SELECT priority, run_at FROM {{s}}.jobs
  WHERE status = 'pending' AND queue = $2 AND run_at <= t.now AND `+sequenceReady("jobs")+`
  ORDER BY priority DESC, run_at, id
  LIMIT 1
) h ON true`),

		// Heartbeat renews every listed lease that is still held and has more than a
		// margin ($5) left. It never touches the token. It also records the start of the
		// handlers of claimed jobs that began since their claim ($6, per lease: see
		// startMap). The margin keeps a renewal from
		// reviving a lease that expired while the statement ran: a limited claim that
		// saw the lease expired (and gave its slot to another job) could not see a
		// renewal committed a moment later. With the margin, that takes a heartbeat
		// statement running longer than the margin, not a heartbeat arriving within
		// microseconds of the expiry.
		//
		// It never waits for a row lock: a job another transaction has locked is
		// skipped (SKIP LOCKED) and reported busy, not renewed and not lost. Waiting
		// would hold every other renewal of the statement back with it, uncommitted and
		// so invisible: a handler that completed its job with CompleteTx and kept its
		// transaction open would let every other lease of its process expire while
		// their handlers ran, and a wait longer than the margin could revive a lease
		// that expired meanwhile. The locker is nearly always the job's own outcome
		// being written; a lease that was lost instead is found by the next heartbeat.
		// held reads the listed jobs in the statement's snapshot; the lock rechecks
		// them on the latest row. Every held job comes back once, and once more if it
		// was renewed (collectRenewals): a join of the two under the plan guard, which
		// then ruled out hash and merge joins, was a nested loop over both lists,
		// quadratic in the leases. Each read of jobs is bounded by the leases' ids
		// (idIn, planguard.go). The lock and the second read cost less than a plain
		// UPDATE's own work, once a tick (BenchmarkHeartbeat compares the two).
		heartbeat: b.addGuarded(planGuardByID, "heartbeat", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, `+asyncCommit+`),
held AS MATERIALIZED (
  SELECT j.id, j.lease_token, h.began FROM unnest($2::uuid[], $3::uuid[], $6::bool[]) AS h(id, token, began)
  JOIN {{s}}.jobs j ON j.id = h.id AND j.lease_token = h.token
  WHERE j.lease_until > (SELECT now FROM t) + $5::bigint * interval '1 microsecond' AND `+idIn("j", "$2")+`
),
locked AS MATERIALIZED (
  SELECT j.id, h.began FROM held h JOIN {{s}}.jobs j ON j.id = h.id
  WHERE j.lease_token = h.lease_token AND j.lease_until > (SELECT now FROM t) + $5::bigint * interval '1 microsecond'
    AND `+idIn("j", "$2")+`
  FOR UPDATE OF j SKIP LOCKED
),
renewed AS (
  UPDATE {{s}}.jobs AS j
  SET lease_until = t.now + $4::bigint * interval '1 microsecond',
      updated_at = t.now,
      started = j.started OR coalesce(l.began, false)
  FROM locked l, t
  WHERE j.id = l.id AND `+idIn("j", "$2")+` AND t.async IS NOT NULL
  RETURNING j.id
)
SELECT id::text, false FROM held
UNION ALL
SELECT id::text, true FROM renewed`),
	}
}

// ClaimParams describe one claim.
type ClaimParams struct {
	Queue    string
	WorkerID string
	Limit    int
	Lease    time.Duration
	// After is where the claim resumes (claimBranch): nil starts at the index head.
	After *ClaimCursor
	// Lag is how far before now the claim looks at the cursor's priority even when the
	// cursor is later, for jobs of transactions that committed after it moved on.
	Lag time.Duration
	// Waiting is how many of the Limit jobs asked for (the last, in claim order) no
	// idle executor takes at once: they are written claimed, not started, until their
	// handlers begin (startMap). Zero: every job starts at once (a manual claim).
	Waiting int
	// Preds are running jobs of the caller that a limited claim may hand their slots
	// to a successor from (limitedClaimSQL, "Handoff"); the plain claim ignores them.
	Preds []Lease
}

// ready is how many jobs, the first in claim order, a claim writes started.
func (p ClaimParams) ready() int { return max(p.Limit-p.Waiting, 0) }

// cursorArgs are the parameters cursorColumns reads for p: the cursor's priority and
// run_at (nil without a cursor) and the lag in microseconds.
func (p ClaimParams) cursorArgs() (*int, *time.Time, int64) {
	if p.After == nil {
		return nil, nil, micros(p.Lag)
	}
	return &p.After.Priority, &p.After.RunAt, micros(p.Lag)
}

// ClaimCursor is a position in claim order: the priority and run_at of the last job
// a producer claimed.
type ClaimCursor struct {
	Priority int
	RunAt    time.Time
}

// CursorOf returns the claim-order position of j.
func CursorOf(j *Job) *ClaimCursor { return &ClaimCursor{Priority: j.Priority, RunAt: j.RunAt} }

// Claim leases up to p.Limit due jobs of one queue. Rows come back in claim order
// (priority, then run_at, then id).
func (s *Store) Claim(ctx context.Context, db DBTX, now *time.Time, p ClaimParams) ([]*Job, error) {
	prio, after, lag := p.cursorArgs()
	jobs, err := guarded(ctx, db, s.lease.claim, collectLeanClaimed(p.WorkerID, p.Lease), Now(now), p.Queue, p.WorkerID, micros(p.Lease), p.Limit,
		prio, after, lag, p.ready())
	if err != nil {
		return nil, err
	}
	SortClaimOrder(jobs)
	return jobs, nil
}

// ClaimHead returns the claim-order position of the first due pending job of queue
// that a claim starting at the index head would consider (nil when there is none),
// and the database time it used. It takes no locks.
func (s *Store) ClaimHead(ctx context.Context, db DBTX, now *time.Time, queue string) (*ClaimCursor, time.Time, error) {
	var prio *int
	var runAt *time.Time
	at, err := guardedRow(ctx, db, s.lease.claimHead, func(r pgx.Row) (time.Time, error) {
		var at time.Time
		err := r.Scan(&prio, &runAt, &at)
		return at, err
	}, Now(now), queue)
	if err != nil {
		return nil, time.Time{}, err
	}
	if prio == nil || runAt == nil {
		return nil, at, nil
	}
	return &ClaimCursor{Priority: *prio, RunAt: *runAt}, at, nil
}

// SortClaimOrder sorts jobs as the claim's ORDER BY does (UPDATE … RETURNING does not
// keep the CTE's order).
func SortClaimOrder(jobs []*Job) { sortBatch(jobs, claimOrder) }

// claimOrder compares as the claim's ORDER BY priority DESC, run_at, id.
func claimOrder(a, b *Job) int {
	if a.Priority != b.Priority {
		return cmp.Compare(b.Priority, a.Priority)
	}
	if c := a.RunAt.Compare(b.RunAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// Lease identifies a claimed job and the token its claim received.
type Lease struct {
	ID    string
	Token string
	// Key is the job's concurrency key: on the Citus layout the statements that write
	// the job name it (citusclaim.go); on one node it is not used.
	Key string
}

// Heartbeat renews the given leases for d. The result maps the id of every lease
// still held to whether it was renewed: false means another transaction had the job
// locked (its outcome being written, a CompleteTx transaction still open), so it was
// skipped rather than waited for. A missing id means that lease is lost — or had less
// than HeartbeatMargin(d) left.
//
// began, if not nil, has one flag per lease: true records that the job's handler has
// started (a job claimed to wait, ClaimParams.Waiting, is claimed and not running
// until then).
func (s *Store) Heartbeat(ctx context.Context, db DBTX, now *time.Time, leases []Lease, d time.Duration, began []bool) (map[string]bool, error) {
	ids, tokens := splitLeases(leases) // it never waits for a lock: any order will do
	if began == nil {
		began = make([]bool, len(leases))
	}
	if dist, err := s.Distributed(ctx, db); err != nil {
		return nil, err
	} else if dist {
		return s.citusHeartbeat(ctx, db, now, leases, d, began)
	}
	return guarded(ctx, db, s.lease.heartbeat, collectRenewals, Now(now), uuidArg(ids), uuidArg(tokens), micros(d), micros(HeartbeatMargin(d)), began)
}

// collectRenewals reads Heartbeat's rows: (id, false) for every lease still held, and
// (id, true) for each it renewed.
func collectRenewals(rows pgx.Rows, err error) (map[string]bool, error) {
	if err != nil {
		return nil, err
	}
	m := map[string]bool{}
	var id string
	var renewed bool
	_, err = pgx.ForEachRow(rows, []any{&id, &renewed}, func() error {
		m[id] = m[id] || renewed
		return nil
	})
	return m, err
}

// HeartbeatMargin is how much of a lease of duration d must be left for a heartbeat
// to renew it: a tenth, at most a second (heartbeats come at most every d/2).
func HeartbeatMargin(d time.Duration) time.Duration { return min(d/10, time.Second) }

// splitLeases returns the leases' ids and tokens, as two arrays in the same order.
func splitLeases(leases []Lease) (ids, tokens []string) {
	ids, tokens = make([]string, len(leases)), make([]string, len(leases))
	for i, l := range leases {
		ids[i], tokens[i] = l.ID, l.Token
	}
	return ids, tokens
}
