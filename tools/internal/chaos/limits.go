package chaos

// The flow-control scenarios (issue #13, "proof under faults"):
//
//	limits      queue "lim" under a queue-wide MaxRunning, a per-key default (EachKey)
//	            and one key's override, kept saturated over 20 keys (one hot) while
//	            workers are SIGKILLed, one is frozen past its lease and PostgreSQL
//	            crashes. The audit (limitaudit.go) replays every claim's slot from the
//	            trigger's record and checks that no bucket ever held more than its
//	            limit — and that the limits did bind, or the round proves nothing.
//	rate-limit  queue "rate" at 100 starts/s, held for 60 s over an 8,000-job backlog
//	            while a worker is SIGKILLed: no 1 s window holds more than 100 starts,
//	            and the minute from the first start holds 6,000, less at most 4%
//	            (rateaudit.go says why).
//
// Both run beside the usual producer of the default queue, on the same workers.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"syscall"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/pgcluster"
)

const (
	limQueue    = "lim"
	limQueueMax = 12 // Limit{Queue: lim, MaxRunning: 12}
	limKeyMax   = 3  // Limit{Queue: lim, Key: EachKey, MaxRunning: 3}
	limVIPMax   = 5  // Limit{Queue: lim, Key: vipKey, MaxRunning: 5}: the override
	hotKey      = "hot"
	vipKey      = "vip"
	limKeys     = 18 // k01…k18, besides hot and vip: 20 keys
	// limWorkers is each worker process's MaxWorkers for lim: three processes can run
	// twice the queue's limit, so only the limits hold them back.
	limWorkers = 8

	rateQueue   = "rate"
	rateMax     = 100
	ratePer     = time.Second
	rateHold    = 60 * time.Second
	rateBacklog = 8000
	rateWorkers = 8
)

var limitsScenario = &scenario{
	name:    "limits",
	summary: "concurrency limits (queue 12, 3 per key, one key 5) while workers are SIGKILLed, one is SIGSTOPped past its lease and PostgreSQL crashes",
	queues:  map[string]int{limQueue: limWorkers},
	setup:   setupLimits, feed: feedLimits, inject: injectLimitFaults, verify: verifyLimits, recoverOn: "jobs",
}

var rateScenario = &scenario{
	name:    "rate-limit",
	summary: "100 starts/s held for 60 s over an 8,000-job backlog while a worker is SIGKILLed",
	queues:  map[string]int{rateQueue: rateWorkers},
	setup:   setupRate, inject: injectRateHold, verify: verifyRate, recoverOn: "jobs",
}

func (r *round) setLimits(ctx context.Context, ls ...skiplock.Limit) error {
	for _, l := range ls {
		if err := r.prod.client.LimitSet(ctx, l); err != nil {
			return err
		}
	}
	return nil
}

func setupLimits(ctx context.Context, r *round) error {
	return r.setLimits(ctx,
		skiplock.Limit{Queue: limQueue, MaxRunning: limQueueMax},
		skiplock.Limit{Queue: limQueue, Key: skiplock.EachKey, MaxRunning: limKeyMax},
		skiplock.Limit{Queue: limQueue, Key: vipKey, MaxRunning: limVIPMax})
}

// limJob draws a job of the limited queue: mostly a few to tens of milliseconds,
// some long enough for a kill or a freeze to catch them mid-run, some failing their
// first attempt (a retry also ends a slot).
func limJob(rng *mrand.Rand, key string) skiplock.EnqueueParams {
	jp := jobPayload{Ms: 3 + rng.IntN(45)}
	switch x := rng.Float64(); {
	case x < 0.05:
		jp.Ms = 100 + rng.IntN(300)
	case x < 0.10:
		jp.FailFirst = true
	}
	b, _ := json.Marshal(jp)
	return skiplock.EnqueueParams{Kind: jobKind, Payload: b, Opts: skiplock.EnqueueOpts{Queue: limQueue, ConcurrencyKey: key}}
}

// feedLimits keeps a backlog in every bucket of lim, so that every limit can bind:
// the hot key holds the largest one, the override key and the jobs without a key
// their own, and the 18 other keys share the rest.
func feedLimits(ctx context.Context, r *round) {
	rng := mrand.New(mrand.NewPCG(r.h.cfg.Seed, uint64(r.h.round)<<32|2))
	q := ident.Quote(r.schema)
	targets := map[string]int{hotKey: 40, vipKey: 20, "": 10, "other": 150}
	for ctx.Err() == nil {
		pending := map[string]int{}
		rows, err := r.h.pool.Query(ctx, `SELECT CASE WHEN concurrency_key IN ($2, $3, '') THEN concurrency_key ELSE 'other' END, count(*)
FROM `+q+`.jobs WHERE queue = $1 AND status = 'pending' GROUP BY 1`, limQueue, hotKey, vipKey)
		if err == nil {
			for rows.Next() {
				var g string
				var n int
				if rows.Scan(&g, &n) == nil {
					pending[g] = n
				}
			}
			rows.Close()
			err = rows.Err()
		}
		if err == nil {
			var batch []skiplock.EnqueueParams
			for g, want := range targets {
				for range want - pending[g] {
					key := g
					if g == "other" {
						key = fmt.Sprintf("k%02d", 1+rng.IntN(limKeys))
					}
					batch = append(batch, limJob(rng, key))
				}
			}
			if len(batch) > 0 {
				r.prod.enqueueBatch(ctx, batch)
			}
		}
		if pause(ctx, 50*time.Millisecond) != nil {
			return
		}
	}
}

// enqueueBatch enqueues ps in one transaction with their chaos_enqueued rows and
// records the outcome as enqueueOne does.
func (p *producer) enqueueBatch(ctx context.Context, ps []skiplock.EnqueueParams) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	tx, err := p.pool.Begin(tctx)
	if err != nil {
		p.fail(err)
		return
	}
	defer tx.Rollback(context.Background())
	res, err := p.client.EnqueueManyTx(tctx, tx, ps)
	if err != nil {
		p.fail(err)
		return
	}
	ids := make([]string, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	if _, err := tx.Exec(tctx, "INSERT INTO "+ident.Quote(p.schema)+".chaos_enqueued (job_id) SELECT unnest($1::uuid[])", ids); err != nil {
		p.fail(err)
		return
	}
	p.commit(tctx, tx, ids...)
}

// injectLimitFaults injects the three faults in turn: SIGKILLs (each worker
// restarted), a SIGSTOP of the worker holding the most slots for longer than a lease
// (the others must take its slots over only once its leases expire), then an
// immediate restart of PostgreSQL.
func injectLimitFaults(ctx context.Context, r *round) error {
	if err := atTimes(ctx, r.spread(max(2, r.p.faults-1), 3*time.Second), func(int) error {
		return r.killWorker(ctx)
	}); err != nil {
		return err
	}
	victim, held, err := r.busiestWorker(ctx, limQueue)
	if err != nil {
		return err
	}
	start := wallNow()
	if err := victim.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	err = pause(ctx, r.p.zombieStop)
	if cerr := victim.signal(syscall.SIGCONT); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	what := fmt.Sprintf("SIGSTOP %s (holding %d slots of %s) for %s", victim.name, held, limQueue, r.p.zombieStop.Round(time.Millisecond))
	r.mark(what, start)
	r.note("%s", what)
	if err := pause(ctx, time.Second); err != nil {
		return err
	}
	start = wallNow()
	if err := r.h.cluster.Restart(ctx, pgcluster.Immediate); err != nil {
		return fmt.Errorf("restarting PostgreSQL: %w", err)
	}
	r.mark("immediate restart", start)
	return pause(ctx, 2*time.Second)
}

// busiestWorker returns the live worker holding the most valid leases of queue (a
// random one when none holds any) and how many it holds.
func (r *round) busiestWorker(ctx context.Context, queue string) (*proc, int, error) {
	live := r.liveWorkers()
	if len(live) == 0 {
		return nil, 0, errors.New("no live worker to freeze")
	}
	held := map[string]int{}
	rows, err := r.h.pool.Query(ctx, "SELECT worker_id, count(*) FROM "+ident.Quote(r.schema)+
		".jobs WHERE queue = $1 AND status = 'running' AND lease_until > clock_timestamp() GROUP BY 1", queue)
	if err != nil {
		return nil, 0, fmt.Errorf("finding the busiest worker: %w", err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err == nil {
			held[id] = n
		}
	}
	rows.Close()
	best := live[r.rng.IntN(len(live))]
	for _, p := range live {
		if held[p.name] > held[best.name] {
			best = p
		}
	}
	return best, held[best.name], rows.Err()
}

func setupRate(ctx context.Context, r *round) error {
	if err := r.setLimits(ctx, skiplock.Limit{Queue: rateQueue, Rate: rateMax, Per: ratePer}); err != nil {
		return err
	}
	rng := mrand.New(mrand.NewPCG(r.h.cfg.Seed, uint64(r.h.round)<<32|3))
	ps := make([]skiplock.EnqueueParams, rateBacklog)
	for i := range ps {
		b, _ := json.Marshal(jobPayload{Ms: 1 + rng.IntN(5)})
		ps[i] = skiplock.EnqueueParams{Kind: jobKind, Payload: b, Opts: skiplock.EnqueueOpts{Queue: rateQueue}}
	}
	// One transaction: the whole backlog appears at once, already over the limit.
	r.prod.enqueueBatch(ctx, ps)
	if _, rolledBack, ambiguous, failed := r.prod.results(); ambiguous+failed > 0 || len(rolledBack) > 0 {
		return errors.New("enqueueing the rate backlog failed")
	}
	return nil
}

// injectRateHold holds the rate limit for rateHold from the queue's first start,
// SIGKILLing a worker halfway, then deletes the limit once the last window anchored
// in the held minute has closed, so the rest of the backlog drains at once.
func injectRateHold(ctx context.Context, r *round) error {
	first, err := r.firstStart(ctx, rateQueue)
	if err != nil {
		return err
	}
	if err := r.untilDB(ctx, first.Add(rateHold/2)); err != nil {
		return err
	}
	if err := r.killWorker(ctx); err != nil {
		return err
	}
	if err := r.untilDB(ctx, first.Add(rateHold+ratePer+500*time.Millisecond)); err != nil {
		return err
	}
	// Read before the deletion: every window the audit checks closes before it.
	var freed time.Time
	if err := r.h.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&freed); err != nil {
		return err
	}
	if _, err := r.prod.client.LimitDelete(ctx, skiplock.Limit{Queue: rateQueue}); err != nil {
		return fmt.Errorf("lifting the rate limit: %w", err)
	}
	r.mu.Lock()
	r.rateFirst, r.rateFreed = first, freed
	r.mu.Unlock()
	return nil
}

// firstStart waits for the first claim of a job of queue and returns its time.
func (r *round) firstStart(ctx context.Context, queue string) (time.Time, error) {
	q := ident.Quote(r.schema)
	deadline := wallNow().Add(30 * time.Second)
	for {
		var first *time.Time
		err := r.h.pool.QueryRow(ctx, `SELECT min(t.claimed_at) FROM `+q+`.chaos_transitions t JOIN `+q+`.jobs j ON j.id = t.job_id
WHERE j.queue = $1 AND t.claimed_at IS NOT NULL`, queue).Scan(&first)
		if err != nil {
			return time.Time{}, fmt.Errorf("reading the first start: %w", err)
		}
		if first != nil {
			return *first, nil
		}
		if wallNow().After(deadline) {
			return time.Time{}, fmt.Errorf("no job of %s started within 30s", queue)
		}
		if err := pause(ctx, 50*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// untilDB waits until the database's clock reads at.
func (r *round) untilDB(ctx context.Context, at time.Time) error {
	var now time.Time
	if err := r.h.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		return fmt.Errorf("reading the database clock: %w", err)
	}
	return pause(ctx, at.Sub(now))
}
