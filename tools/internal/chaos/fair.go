package chaos

// The fair-queue scenario (issue #45, docs/fairness.md):
//
//	fair  queue "fair", fair by concurrency key, holds a backlog of one hot key (a
//	      tenant's burst, enqueued at once) while ten light keys each enqueue a job
//	      every 100 ms and workers are SIGKILLed. Besides the usual invariants (no
//	      lost job, no double success, no stale write), the audit checks the fairness
//	      bound: once a light job's enqueue has returned (its commit is visible), the
//	      claims that take hot jobs before the light job's first claim number at most
//	      fairBound more than the turns its own key had meanwhile (each serving an
//	      earlier job of the key). A claim whose snapshot predates the commit cannot
//	      take it, and between two turns of a key the rotation gives the hot key at most
//	      one: with claims serialised per queue, 2 is the bound the design promises; one
//	      more allows for a claim whose time (its attempted_at, read just after its
//	      snapshot) lands after the enqueue returned while its snapshot did not. A light job whose first
//	      claimer was SIGKILLed is judged by that first claim, not by the reclaim that
//	      follows the lease's expiry. Light jobs are judged only when their batch's
//	      enqueue call is known to have returned.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
)

const (
	fairQueue     = "fair"
	fairHotKey    = "hot"
	fairHot       = 6000 // the hot key's burst
	fairLightKeys = 10
	fairLightTick = 100 * time.Millisecond
	fairWorkers   = 8 // each worker process's MaxWorkers for fair
	fairBound     = 3 // claims of hot jobs after a light job's commit, before its first claim
)

var fairScenario = &scenario{
	name:    "fair",
	summary: "a fair queue: one key's burst of 6,000 jobs, ten light keys at 10 jobs/s each, workers SIGKILLed; no light job waits for more than 3 claims of the hot key beyond its own key's turns",
	queues:  map[string]int{fairQueue: fairWorkers},
	setup:   setupFair, feed: feedFair, inject: injectFairKills, verify: verifyFair, recoverOn: "jobs",
}

// setupFair makes the queue fair while it is paused (so that no claim takes the
// burst in plain order), enqueues the hot key's burst in one transaction, and resumes.
func setupFair(ctx context.Context, r *round) error {
	c := r.prod.client
	if err := c.QueuePauseAhead(ctx, fairQueue); err != nil {
		return err
	}
	if err := c.QueueSetFair(ctx, fairQueue, nil); err != nil {
		return err
	}
	rng := mrand.New(mrand.NewPCG(r.h.cfg.Seed, uint64(r.h.round)<<32|4))
	ps := make([]skiplock.EnqueueParams, fairHot)
	for i := range ps {
		ps[i] = fairJob(rng, fairHotKey)
	}
	r.prod.enqueueBatch(ctx, ps)
	if _, rolledBack, ambiguous, failed := r.prod.results(); ambiguous+failed > 0 || len(rolledBack) > 0 {
		return errors.New("enqueueing the hot key's burst failed")
	}
	return c.QueueResume(ctx, fairQueue)
}

// fairJob draws a job of key: a few milliseconds of work, some long enough for a
// kill to catch them running.
func fairJob(rng *mrand.Rand, key string) skiplock.EnqueueParams {
	jp := jobPayload{Ms: 2 + rng.IntN(10)}
	if rng.Float64() < 0.03 {
		jp.Ms = 100 + rng.IntN(200)
	}
	b, _ := json.Marshal(jp)
	return skiplock.EnqueueParams{Kind: jobKind, Payload: b, Opts: skiplock.EnqueueOpts{Queue: fairQueue, ConcurrencyKey: key}}
}

// feedFair enqueues one job of each light key every fairLightTick until the
// producer stops.
func feedFair(ctx context.Context, r *round) {
	rng := mrand.New(mrand.NewPCG(r.h.cfg.Seed, uint64(r.h.round)<<32|5))
	for ctx.Err() == nil {
		batch := make([]skiplock.EnqueueParams, fairLightKeys)
		for k := range batch {
			batch[k] = fairJob(rng, fmt.Sprintf("light%02d", k+1))
		}
		start := wallNow()
		r.prod.enqueueBatch(ctx, batch)
		r.mu.Lock()
		r.fairBatches = append(r.fairBatches, [2]time.Time{start, wallNow()})
		r.mu.Unlock()
		if pause(ctx, fairLightTick) != nil {
			return
		}
	}
}

// injectFairKills SIGKILLs workers (each restarted) across the fault phase.
func injectFairKills(ctx context.Context, r *round) error {
	return atTimes(ctx, r.spread(max(2, r.p.faults), r.p.faultPhase), func(int) error {
		return r.killWorker(ctx)
	})
}

// verifyFair checks the fairness bound over every light job's first claim, and that
// the hot key still had a backlog for part of the round (or the bound proves nothing).
func verifyFair(ctx context.Context, r *round, row *Row) error {
	q := ident.Quote(r.schema)
	r.mu.Lock()
	starts, ends := make([]time.Time, len(r.fairBatches)), make([]time.Time, len(r.fairBatches))
	for i, b := range r.fairBatches {
		starts[i], ends[i] = b[0], b[1]
	}
	r.mu.Unlock()
	var light, judged, worst, over, hotClaims int64
	var worstJob *string
	err := r.h.pool.QueryRow(ctx, `
WITH firsts AS (
  SELECT DISTINCT ON (t.job_id) t.job_id, t.claimed_at, j.concurrency_key AS key
  FROM `+q+`.chaos_transitions t JOIN `+q+`.jobs j ON j.id = t.job_id
  WHERE j.queue = $1 AND t.claimed_at IS NOT NULL
  ORDER BY t.job_id, t.seq
),
hot AS (
  SELECT DISTINCT t.claimed_at, t.worker FROM `+q+`.chaos_transitions t JOIN `+q+`.jobs j ON j.id = t.job_id
  WHERE j.queue = $1 AND j.concurrency_key = $2 AND t.claimed_at IS NOT NULL
),
batches AS (SELECT * FROM unnest($4::timestamptz[], $5::timestamptz[]) AS b(began, committed)),
waits AS (
  SELECT f.job_id,
         (SELECT count(*) FROM hot h WHERE h.claimed_at > b.committed AND h.claimed_at < f.claimed_at)
         - (SELECT count(DISTINCT (o.claimed_at, t.worker)) FROM firsts o
            JOIN `+q+`.chaos_transitions t ON t.job_id = o.job_id AND t.claimed_at = o.claimed_at
            WHERE o.key = f.key AND o.claimed_at > b.committed AND o.claimed_at < f.claimed_at) AS claims
  FROM firsts f JOIN `+q+`.chaos_enqueued e ON e.job_id = f.job_id
  JOIN LATERAL (SELECT b.committed FROM batches b WHERE e.at BETWEEN b.began AND b.committed LIMIT 1) b ON true
  WHERE f.key <> $2
)
SELECT (SELECT count(*) FROM `+q+`.jobs WHERE queue = $1 AND concurrency_key <> $2),
       (SELECT count(*) FROM waits), coalesce((SELECT max(claims) FROM waits), 0),
       (SELECT count(*) FROM waits WHERE claims > $3),
       (SELECT count(*) FROM hot),
       (SELECT job_id::text FROM waits ORDER BY claims DESC LIMIT 1)`, fairQueue, fairHotKey, fairBound, starts, ends).
		Scan(&light, &judged, &worst, &over, &hotClaims, &worstJob)
	if err != nil {
		return fmt.Errorf("fairness audit: %w", err)
	}
	row.Flow = append(row.Flow, fmt.Sprintf("fair: %d light jobs judged of %d; at most %d claims of the hot key beyond the light key's own turns before a light job's first claim (bound %d); %d claims took hot jobs",
		judged, light, worst, fairBound, hotClaims))
	switch {
	case judged == 0 || hotClaims == 0:
		row.Violations = append(row.Violations, fmt.Sprintf("fair: %d light jobs claimed, %d claims of hot jobs: the round proves nothing", judged, hotClaims))
	case over > 0:
		row.Violations = append(row.Violations, fmt.Sprintf("fair: %d light jobs waited more than %d claims of the hot key beyond their key's own turns (worst %d, job %s)",
			over, fairBound, worst, deref(worstJob)))
		if detail, err := fairWorstWait(ctx, r, deref(worstJob), starts, ends); err == nil {
			r.note("fair: the worst wait: %s", detail)
		}
	}
	// The hot key must still have been waiting when the light keys were served, or
	// the bound held trivially: its last first claim comes after the first light one.
	var overlap bool
	if err := r.h.pool.QueryRow(ctx, `
SELECT coalesce(max(t.claimed_at) FILTER (WHERE j.concurrency_key = $2) >
                min(t.claimed_at) FILTER (WHERE j.concurrency_key <> $2), false)
FROM `+q+`.chaos_transitions t JOIN `+q+`.jobs j ON j.id = t.job_id
WHERE j.queue = $1 AND t.claimed_at IS NOT NULL`, fairQueue, fairHotKey).Scan(&overlap); err != nil {
		return fmt.Errorf("fairness audit: %w", err)
	}
	if !overlap {
		row.Violations = append(row.Violations, "fair: the hot key's backlog was gone before the first light job was claimed: the round proves nothing")
	}
	return nil
}

// fairWorstWait describes a light job's wait: which of the round's light batches it
// came in, when that batch's enqueue began and returned, its first claim, and every claim of the queue between the return and
// that claim (any key's: its time, worker, and how many jobs of each key it took),
// so that a wait beyond the bound shows which claims passed the job over.
func fairWorstWait(ctx context.Context, r *round, job string, starts, ends []time.Time) (string, error) {
	q := ident.Quote(r.schema)
	var detail string
	err := r.h.pool.QueryRow(ctx, `
WITH b AS (SELECT * FROM unnest($2::timestamptz[], $3::timestamptz[]) AS b(began, committed)),
e AS (
  SELECT e.job_id, e.at, j.concurrency_key AS key,
         (SELECT b.began FROM b WHERE e.at BETWEEN b.began AND b.committed LIMIT 1) AS began,
         (SELECT b.committed FROM b WHERE e.at BETWEEN b.began AND b.committed LIMIT 1) AS committed
  FROM `+q+`.chaos_enqueued e JOIN `+q+`.jobs j ON j.id = e.job_id WHERE e.job_id = $1::uuid
),
f AS (
  SELECT t.claimed_at, t.worker FROM `+q+`.chaos_transitions t, e
  WHERE t.job_id = e.job_id AND t.claimed_at IS NOT NULL ORDER BY t.seq LIMIT 1
),
c AS (
  SELECT t.claimed_at, t.worker, j.concurrency_key AS key, count(*) AS n
  FROM `+q+`.chaos_transitions t JOIN `+q+`.jobs j ON j.id = t.job_id, e, f
  WHERE j.queue = $4 AND t.claimed_at IS NOT NULL AND t.claimed_at > e.committed AND t.claimed_at < f.claimed_at
  GROUP BY 1, 2, 3
)
SELECT 'job of key ' || e.key || ': batch ' || (SELECT count(*) FROM b WHERE b.began <= e.began) || ' of ' || (SELECT count(*) FROM b) ||
  ' began ' || e.began::text || ', enqueued ' || e.at::text || ', returned ' || e.committed::text ||
  '; first claim ' || f.claimed_at::text || ' by ' || f.worker || '; claims between: ' ||
  coalesce((SELECT string_agg(x.claimed_at::text || ' ' || x.worker || ' [' || x.keys || ']', ', ' ORDER BY x.claimed_at)
            FROM (SELECT c.claimed_at, c.worker, string_agg(c.key || '×' || c.n, ' ' ORDER BY c.key) AS keys FROM c GROUP BY 1, 2) x), 'none')
FROM e, f`, job, starts, ends, fairQueue).Scan(&detail)
	return detail, err
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
