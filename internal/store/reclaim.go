package store

// Reclaiming: finding running jobs whose lease ran out, and returning them to the
// queue (or failing them) under the token they were claimed with.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

type reclaimStatements struct {
	expired, reclaim stmt
}

func newReclaimStatements(b *builder) reclaimStatements {
	return reclaimStatements{
		// $3, when set, is the floor below which the caller knows no live lease lies
		// (maint.Reclaimer's floor): the scan starts there instead of at the index's
		// head, which under a snapshot held open elsewhere holds an entry for every job
		// that ran since vacuum last could remove one.
		expired: b.addGuarded(planGuardOn, "expired", `
SELECT id, lease_token, kind, attempts, max_attempts
FROM {{s}}.jobs
WHERE status = 'running' AND lease_until < coalesce($1::timestamptz, now())
  AND lease_until >= coalesce($3::timestamptz, '-infinity')
ORDER BY lease_until
LIMIT $2`),

		// Reclaim returns expired leases to pending after the retry delay, or fails them at
		// max_attempts. Fenced by token and by the lease still being expired, so a job whose
		// worker heartbeated in the meantime is left alone. It matches (id, lease_token)
		// without status = 'running', which the token implies (jobs_lease_iff_running).
		// With it, the planner could walk jobs_expired_lease_idx from its head and probe
		// the array for each row (it did on small tables).
		//
		// A job another transaction has locked is skipped, not waited for (SKIP LOCKED),
		// as the heartbeat does: a handler's CompleteTx transaction held open past its
		// lease would otherwise stall every reclaim behind it. The locker is nearly
		// always the job's own outcome; a lease still expired once it lets go is
		// reclaimed by a later pass.
		reclaim: b.addGuarded(planGuardByID, "reclaim", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
r AS MATERIALIZED (
  SELECT j.id, x.delay_us FROM unnest($2::uuid[], $3::uuid[], $4::bigint[]) AS x(id, token, delay_us)
  JOIN {{s}}.jobs j ON j.id = x.id AND j.lease_token = x.token
  WHERE j.lease_until < (SELECT now FROM t) AND `+idIn("j", "$2")+`
  FOR UPDATE OF j SKIP LOCKED
)
UPDATE {{s}}.jobs AS j
SET status = (CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END)::{{s}}.job_status,
    run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                  ELSE t.now + r.delay_us * interval '1 microsecond' END,
    last_error = 'lease expired on worker ' || coalesce(j.worker_id, '?') || ' (attempt ' || j.attempts || ')',
    attempt_history = `+historyAppend("j", "'lease_expired'", "'lease expired'")+`,
    lease_until = NULL,
    lease_token = NULL,
    worker_id = NULL,
    updated_at = t.now
FROM r, t
WHERE j.id = r.id AND `+idIn("j", "$2")+`
RETURNING j.id, j.status::text`),
	}
}

// Expired is a running job whose lease has run out.
type Expired struct {
	Lease
	Kind        string
	Attempts    int
	MaxAttempts int
}

// ListExpired returns up to limit jobs whose lease expired, oldest expiry first. A
// non-nil floor leaves out leases that ended before it.
func (s *Store) ListExpired(ctx context.Context, db DBTX, now, floor *time.Time, limit int) ([]Expired, error) {
	if dist, err := s.Distributed(ctx, db); err != nil {
		return nil, err
	} else if dist {
		return guarded(ctx, db, s.citusWork.expired, func(rows pgx.Rows, err error) ([]Expired, error) {
			return collectValues(rows, err, func(r pgx.Row) (Expired, error) {
				var e Expired
				err := r.Scan(&e.ID, &e.Token, &e.Kind, &e.Attempts, &e.MaxAttempts, &e.Key)
				return e, err
			})
		}, Now(now), limit, Now(floor))
	}
	return guarded(ctx, db, s.reclaim.expired, func(rows pgx.Rows, err error) ([]Expired, error) {
		return collectValues(rows, err, func(r pgx.Row) (Expired, error) {
			var e Expired
			err := r.Scan(&e.ID, &e.Token, &e.Kind, &e.Attempts, &e.MaxAttempts)
			return e, err
		})
	}, Now(now), limit, Now(floor))
}

// Reclaim returns the given expired leases to the queue with their delays (or fails
// them at max attempts); it returns the new status of each job it changed.
func (s *Store) Reclaim(ctx context.Context, db DBTX, now *time.Time, leases []Lease, delays []time.Duration) (map[string]string, error) {
	ids, tokens := splitLeases(leases) // it never waits for a lock: any order will do
	us := make([]int64, len(delays))
	for i, d := range delays {
		us[i] = micros(d)
	}
	if dist, err := s.Distributed(ctx, db); err != nil {
		return nil, err
	} else if dist {
		return s.citusReclaim(ctx, db, now, leases, us)
	}
	// Guarded like the other fenced writes (planguard.go).
	return guarded(ctx, db, s.reclaim.reclaim, collectMap[string], Now(now), uuidArg(ids), uuidArg(tokens), us)
}
