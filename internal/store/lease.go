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

// claimSet is what a claim writes to each job it takes ($3 the worker, $4 the lease in
// microseconds, t.now the claim's time): running, one more attempt, a fresh lease.
const claimSet = `SET status = 'running',
    attempts = j.attempts + 1,
    lease_until = t.now + $4::bigint * interval '1 microsecond',
    lease_token = gen_random_uuid(),
    worker_id = $3,
    attempted_at = t.now,
    updated_at = t.now`

type leaseStatements struct {
	claim, heartbeat stmt
}

func newLeaseStatements(b *builder) leaseStatements {
	return leaseStatements{
		// The claim: lock up to $5 due pending jobs of one queue in index order, skipping
		// rows other claimers hold, and lease them under a fresh token in the same statement.
		// A paused queue claims nothing: the pause check does not depend on the row, so
		// it runs once per statement (a one-time filter on a primary-key probe of queues).
		// A job of a sequence waits while an earlier job of its sequence can still run
		// (or failed and blocks): one probe of jobs_sequence_idx, made only for jobs that
		// have a sequence key. A job some limit governs is left to the limited claim
		// (limits.go): see unlimited.
		claim: b.add("claim", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, `+asyncCommit+`),
claimed AS (
  SELECT id FROM {{s}}.jobs
  WHERE status = 'pending' AND queue = $2 AND run_at <= (SELECT now FROM t)
    AND NOT EXISTS (SELECT 1 FROM {{s}}.queues p WHERE p.name = $2 AND p.paused_at IS NOT NULL)
    AND `+sequenceReady("jobs")+`
    AND `+unlimited+`
  ORDER BY priority DESC, run_at, id
  LIMIT $5
  FOR UPDATE SKIP LOCKED
)
UPDATE {{s}}.jobs AS j
`+claimSet+`
FROM t
WHERE j.id = ANY(ARRAY(SELECT id FROM claimed)) AND t.async IS NOT NULL
RETURNING `+claimReturns),

		// Heartbeat renews every listed lease that is still held and has more than a
		// margin ($5) left. It never touches the token. The margin keeps a renewal from
		// reviving a lease that expired while the statement ran: a limited claim that
		// saw the lease expired (and gave its slot to another job) could not see a
		// renewal committed a moment later. With the margin, that takes a heartbeat
		// statement running longer than the margin, not a heartbeat arriving within
		// microseconds of the expiry.
		heartbeat: b.add("heartbeat", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, `+asyncCommit+`)
UPDATE {{s}}.jobs AS j
SET lease_until = t.now + $4::bigint * interval '1 microsecond',
    updated_at = t.now
FROM unnest($2::uuid[], $3::uuid[]) AS h(id, token), t
WHERE j.id = h.id AND j.lease_token = h.token AND j.lease_until > t.now + $5::bigint * interval '1 microsecond'
  AND t.async IS NOT NULL
RETURNING j.id`),
	}
}

// ClaimParams describe one claim.
type ClaimParams struct {
	Queue    string
	WorkerID string
	Limit    int
	Lease    time.Duration
}

// Claim leases up to p.Limit due jobs of one queue. Rows come back in claim order
// (priority, then run_at, then id).
func (s *Store) Claim(ctx context.Context, db DBTX, now *time.Time, p ClaimParams) ([]*Job, error) {
	jobs, err := collectJobs(db.Query(ctx, s.lease.claim.sql, Now(now), p.Queue, p.WorkerID, micros(p.Lease), p.Limit))
	if err != nil {
		return nil, err
	}
	SortClaimOrder(jobs)
	return jobs, nil
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
}

// Heartbeat renews the given leases for d and returns the ids it renewed; a missing id
// means that lease is lost — or had less than HeartbeatMargin(d) left.
func (s *Store) Heartbeat(ctx context.Context, db DBTX, now *time.Time, leases []Lease, d time.Duration) (map[string]bool, error) {
	ids, tokens := splitLeases(leases)
	rows, err := db.Query(ctx, s.lease.heartbeat.sql, Now(now), ids, tokens, micros(d), micros(HeartbeatMargin(d)))
	if err != nil {
		return nil, err
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(renewed))
	for _, id := range renewed {
		m[id] = true
	}
	return m, nil
}

// HeartbeatMargin is how much of a lease of duration d must be left for a heartbeat
// to renew it: a tenth, at most a second (heartbeats come at most every d/2).
func HeartbeatMargin(d time.Duration) time.Duration { return min(d/10, time.Second) }

func splitLeases(leases []Lease) (ids, tokens []string) {
	ids, tokens = make([]string, len(leases)), make([]string, len(leases))
	for i, l := range leases {
		ids[i], tokens[i] = l.ID, l.Token
	}
	return ids, tokens
}
