package skiplock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

type producer struct {
	queue    string
	cfg      QueueConfig
	active   atomic.Int32   // claimed and not yet finished running (queued locally or running)
	held     atomic.Int32   // claimed and not yet durable (active, successors waiting, outcomes being written)
	avgRunNs atomic.Int64   // moving average of handler durations; 0 = unknown
	local    chan *inflight // claimed jobs waiting for an executor
	wake     chan struct{}  // NOTIFY, (re)connect
	slot     chan struct{}  // a job finished running, or an outcome became durable
	freed    chan struct{}  // an outcome became durable: its limit slot is free in the database
	orphan   chan struct{}  // a job began under a binding limit: it may take a successor
	// handoff: a limited claim was throttled and due jobs remain, so claims offer the
	// running jobs as predecessors (limiter.go).
	handoff atomic.Bool
	cursor  claimCursor // where the next plain claim starts (cursor.go)
	// waiting: the producer waits for jobs, with no claim in flight (warmer.go).
	waiting atomic.Bool
}

// capacity is how many jobs the producer may hold: its workers plus an adaptive
// prefetch of about PrefetchWindow of work.
func (p *producer) capacity() int {
	if p.cfg.MaxPrefetch < 0 {
		return p.cfg.MaxWorkers
	}
	avg := p.avgRunNs.Load()
	if avg <= 0 {
		return p.cfg.MaxWorkers
	}
	ahead := int(int64(p.cfg.PrefetchWindow) / avg)
	return p.cfg.MaxWorkers + min(ahead, p.cfg.MaxPrefetch)
}

func (p *producer) observe(d time.Duration) {
	n := max(int64(d), 1)
	old := p.avgRunNs.Load()
	if old == 0 {
		p.avgRunNs.Store(n)
		return
	}
	p.avgRunNs.Store(old - old/8 + n/8)
}

// claimSize decides how many jobs the producer claims now. A producer holds at most
// capacity() jobs that are queued or running, and at most CompletionBatchSize more
// whose outcomes are being written: so the next claim overlaps the completion write
// (two statements in flight, as in the B1 baseline), while a database that stops
// accepting outcomes still stops the claiming. While jobs are still queued locally
// it waits until a quarter of the capacity is free, so fast queues claim in batches
// rather than one job per freed slot.
func (r *runtime) claimSize(p *producer) (int, bool) {
	// A claimed job holds its limit slots from the claim on, also while it waits
	// locally; the adaptive prefetch keeps that wait near PrefetchWindow, so limited
	// queues prefetch too (W9 with prefetch off ran at a fraction of W5: every claim
	// then took only as many jobs as workers had just finished).
	capacity := p.capacity()
	free := min(capacity-int(p.active.Load()), capacity+r.c.cfg.CompletionBatchSize-int(p.held.Load()))
	if free <= 0 {
		return 0, false
	}
	if len(p.local) > 0 && free < capacity/4 {
		return 0, false
	}
	return min(free, r.c.cfg.FetchLimit), true
}

// claimResult is what one claim statement reports back to its producer.
type claimResult struct {
	short bool // fewer rows than asked: the queue has no more due jobs now
	err   error
	// throttled: due jobs were left because a limit held them back. A slot freed by
	// this client, or retryIn (when a rate window is full), is worth another claim.
	throttled bool
	retryIn   time.Duration
	// successors: it was a claim of successors only (limiter.go), which reads no
	// rate window, so the last full claim's retryIn still stands.
	successors bool
}

// produce keeps one claim statement at a time in flight for its queue. A claim locks
// and rewrites each row it takes, which makes it the costliest statement per job;
// measured on 2 cores (W4/W5), one claim at a time overlapping the completion writes
// beat two concurrent smaller claims (30.4k vs 29.3k jobs/s at concurrency 100, 22.9k
// vs 20.6k at concurrency 1), because larger claims amortise each statement's commit.
// The claim runs in its own goroutine so that the producer keeps hearing NOTIFY
// wake-ups and freed slots while it is in flight.
func (r *runtime) produce(p *producer) {
	defer r.prodWG.Done()
	c := r.c
	backoff := 100 * time.Millisecond
	poll := time.NewTimer(hostclock.Jitter(c.cfg.PollInterval))
	defer poll.Stop()
	retryTimer := time.NewTimer(time.Hour) // a full rate window's wait
	retryTimer.Stop()
	defer retryTimer.Stop()
	results := make(chan claimResult, 1)
	claiming, empty := false, false
	// woken records a wake-up (NOTIFY) that arrived after the claim in flight began:
	// its snapshot may predate the job it announces, so a short result from it must
	// not put the producer to sleep.
	woken := false
	// successors: a job began that can hand its limit slots on (heard while waiting
	// or while a claim was in flight), so a claim of successors is due (limiter.go).
	successors := false
	// throttle is the last claim's throttling, which the producer waits on while empty.
	throttle := claimResult{}
	defer func() { // a claim in flight still hands its jobs over
		if claiming {
			<-results
		}
	}()
	for r.fetchCtx.Err() == nil {
		if successors && p.handoff.Load() {
			empty = false // a claim of successors is due (a job began while one was in flight)
		}
		if empty && !claiming {
			if !poll.Stop() {
				select {
				case <-poll.C:
				default:
				}
			}
			poll.Reset(hostclock.Jitter(c.cfg.PollInterval))
			var freed chan struct{}
			var retry <-chan time.Time
			orphan := r.orphans(p, false)
			if throttle.throttled {
				// An outcome made durable since the claim's snapshot may have freed a
				// slot. (One that was durable before it costs one claim that finds
				// nothing.) A handler's return is not enough: its job holds the slot
				// until the outcome commits.
				freed = p.freed
				if throttle.retryIn > 0 {
					retryTimer.Reset(throttle.retryIn)
					retry = retryTimer.C
				}
			}
			p.waiting.Store(true)
			signal(r.idle)
			select {
			case <-p.wake:
			case <-poll.C:
			case <-freed:
			case <-orphan:
				successors = true
			case <-retry:
			case <-r.fetchCtx.Done():
				return
			}
			p.waiting.Store(false)
			retryTimer.Stop() // since Go 1.23 a stopped timer delivers nothing stale
			empty = false
		}
		n, ok := r.claimSize(p)
		if !ok && successors && p.handoff.Load() {
			// Successors need no capacity of their own (they run on their
			// predecessors' executors): claim them even when the workers are full.
			n, ok = 0, true
		}
		if !ok || empty || claiming {
			select {
			case <-r.orphans(p, successors):
				successors = true
			case res := <-results:
				claiming = false
				if res.err != nil {
					c.failures.warn("claim", res.err, "queue", p.queue, "retry_in", backoff)
					if !hostclock.Sleep(r.fetchCtx, hostclock.Jitter(backoff)) {
						return
					}
					backoff = min(backoff*2, 5*time.Second)
					continue
				}
				c.failures.ok("claim")
				backoff = 100 * time.Millisecond
				empty = empty || (res.short && !woken)
				if res.successors {
					res.retryIn = throttle.retryIn
				}
				throttle = res
			case <-p.slot:
			case <-p.wake:
				empty, woken = false, true
			case <-r.fetchCtx.Done():
				return
			}
			continue
		}
		// Reserve the capacity now; the claim gives back what it did not get.
		p.active.Add(int32(n))
		p.held.Add(int32(n))
		claiming, woken = true, false
		go func(successors bool) { results <- r.claim(p, n, successors) }(successors)
		successors = false
	}
}

// orphans is the channel of job starts that can take a successor while the
// producer's queue hands limit slots over (limiter.go), and nil otherwise (or when
// a claim of successors is due already).
func (r *runtime) orphans(p *producer, due bool) chan struct{} {
	if due || !p.handoff.Load() {
		return nil
	}
	return p.orphan
}

// claim runs one claim statement for up to n jobs (already reserved) and hands the
// jobs to the executors; successors asks for a claim of successors only, if the
// queue is limited. It is not cancelled by Stop: a claim that commits must hand its
// jobs over, or they would sit leased until their lease expired.
func (r *runtime) claim(p *producer, n int, successors bool) claimResult {
	c := r.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.fetchCtx), 30*time.Second)
	defer cancel()
	began := hostclock.Now()
	var rows []*store.Job
	var err error
	res := claimResult{}
	if r.limited(p.queue) {
		rows, res, err = r.claimLimited(ctx, p, n, successors)
	} else {
		after, gen := p.cursor.get()
		rows, err = c.store.Claim(ctx, c.pool, store.NowParam(c.cfg.Clock), store.ClaimParams{
			Queue: p.queue, WorkerID: c.cfg.ID, Limit: n, Lease: c.cfg.LeaseDuration,
			After: after, Lag: c.cfg.PollInterval,
		})
		res.short = len(rows) < n
		if len(rows) > 0 {
			p.cursor.advance(gen, store.CursorOf(rows[len(rows)-1]))
		}
	}
	c.metrics.claimNanos.Add(int64(hostclock.Since(began)))
	taken := 0
	for _, row := range rows {
		job := fromRow(row)
		if job.slotOf.ID == "" {
			taken++
		} else {
			p.held.Add(1) // a successor: not part of the n reserved
		}
		r.hold(p, job, row.Unblocks)
	}
	unused := int32(n - taken)
	p.active.Add(-unused)
	p.held.Add(-unused)
	signal(p.slot)
	if err != nil {
		return claimResult{err: err}
	}
	c.metrics.claims.Add(1)
	c.metrics.claimed.Add(int64(len(rows)))
	return res
}

// hold registers a claimed job (so the heartbeater renews its lease) and queues it
// for the producer's executors. Its capacity was reserved before the claim, unless
// it is a successor (limiter.go): that one waits for its predecessor's executor, or,
// if the predecessor's handler returned already, takes a place in the local queue
// if there is one.
func (r *runtime) hold(p *producer, job *Job, unblocks bool) {
	r.jobsWG.Add(1)
	f := &inflight{job: job, p: p, unblocks: unblocks}
	r.mu.Lock()
	succ := r.successorOf(f, job)
	if old, ok := r.inflight[job.ID]; ok {
		// This process already holds the job under an earlier claim, so that claim
		// is dead: its commit was lost in a server crash (claims commit
		// asynchronously, internal/store/lease.go) or its lease was reclaimed. It is
		// treated as the heartbeater treats a lost lease: its handler is cancelled
		// and its outcome, fenced by the dead token, is reported as lease lost.
		old.lost.Store(true)
		if old.begun.Load() {
			old.cancel(ErrLeaseLost)
		}
		r.c.log.Warn("skiplock: claimed a job this process still holds under an earlier claim that is no longer valid (a server crash undid it, or its lease was reclaimed); that run is treated as a lost lease",
			"job_id", job.ID, "kind", job.Kind, "attempt", job.Attempt)
	}
	r.inflight[job.ID] = f
	r.mu.Unlock()
	switch succ {
	case attached:
		r.c.metrics.handoffs.Add(1)
		return // it runs on its predecessor's executor (runtime.successor)
	case giveUp:
		r.c.metrics.handoffsReturned.Add(1)
		r.giveBack(f, false)
		return
	}
	if job.slotOf.ID != "" {
		p.active.Add(1)
		select {
		case p.local <- f:
		default: // no place left: back to pending rather than block the claim
			r.c.metrics.handoffsReturned.Add(1)
			r.giveBack(f, true)
		}
		return
	}
	p.local <- f // never blocks: local holds the producer's whole capacity
}
