package engine

import (
	"sync/atomic"
	"time"
)

// capacity owns a queue's places: how many of its jobs this process holds, and the
// signals that tell the producer a place came free. Nothing else changes its counts.
//
// A job holds an active place from the claim (reserved before the claim statement
// runs) until its handler has returned or it was handed back unstarted: active
// bounds what is queued locally or running. It holds a held place from the claim
// until its outcome is durable or dropped: held bounds, beyond active, the outcomes
// being written, so a database that stops accepting outcomes stops the claiming too.
// A successor (handoff.go) is claimed beyond the reservation: it takes a held place
// at its claim and an active place only when it begins to run.
type capacity struct {
	workers     int
	maxPrefetch int // negative: no prefetch
	window      time.Duration

	active   atomic.Int32
	held     atomic.Int32
	avgRunNs atomic.Int64 // moving average of handler durations; 0 = unknown

	slot  chan struct{} // a place came free (a job finished running, or an outcome became durable)
	freed chan struct{} // an outcome became durable: its limit slot is free in the database
}

func newCapacity(q Queue) *capacity {
	return &capacity{workers: q.MaxWorkers, maxPrefetch: q.MaxPrefetch, window: q.PrefetchWindow,
		slot: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
}

// size is the most jobs the queue may ever hold active: its workers and its whole
// prefetch (the local queue's length).
func (c *capacity) size() int { return c.workers + max(c.maxPrefetch, 0) }

// limit is how many jobs the producer may hold active now: its workers plus an
// adaptive prefetch of about the prefetch window of work.
func (c *capacity) limit() int {
	if c.maxPrefetch < 0 {
		return c.workers
	}
	avg := c.avgRunNs.Load()
	if avg <= 0 {
		return c.workers
	}
	ahead := int(int64(c.window) / avg)
	return c.workers + min(ahead, c.maxPrefetch)
}

// observe folds a handler's run time into the average.
func (c *capacity) observe(d time.Duration) {
	n := max(int64(d), 1)
	old := c.avgRunNs.Load()
	if old == 0 {
		c.avgRunNs.Store(n)
		return
	}
	c.avgRunNs.Store(old - old/8 + n/8)
}

// avgRun is the moving average of handler durations (0: unknown).
func (c *capacity) avgRun() time.Duration { return time.Duration(c.avgRunNs.Load()) }

// claimSize decides how many jobs to claim now, of at most fetchLimit. The producer
// holds at most limit() active jobs, and at most batch more whose outcomes are
// being written: so the next claim overlaps the completion write, while a database
// that stops accepting outcomes still stops the claiming. While jobs are still
// queued locally (queuedLocally) it waits until a quarter of the limit is free, so
// fast queues claim in batches rather than one job per freed place.
//
// A claimed job holds its limit slots from the claim on, also while it waits
// locally; the adaptive prefetch keeps that wait near the prefetch window, so
// limited queues prefetch too (without it every claim would take only as many jobs
// as workers had just finished).
func (c *capacity) claimSize(batch, fetchLimit int, queuedLocally bool) (int, bool) {
	lim := c.limit()
	free := min(lim-int(c.active.Load()), lim+batch-int(c.held.Load()))
	if free <= 0 {
		return 0, false
	}
	if queuedLocally && free < lim/4 {
		return 0, false
	}
	return min(free, fetchLimit), true
}

// besideRoom reports whether a claim for n jobs is worth sending beside the claim in
// flight under a backlog (produce, "A second claim"): only a claim of half the limit
// or more (or a full claim of fetchLimit), where a claim sent alone waits for a
// quarter. The claim statement's cost per job grows as its size falls (about 0.5 ms
// of backend CPU per statement: 11.0 µs a job at 350 against 10.2 at 700,
// docs/benchmarks.md, "A second claim in flight"); two claims that split the places
// between them would each be small.
func (c *capacity) besideRoom(n, fetchLimit int) bool {
	return n >= min(c.limit()/2, fetchLimit)
}

// idle is how many jobs of a claim made now an executor takes at once: the workers
// neither running a job nor promised one already queued locally. The rest of a claim
// waits (the prefetch). Places only free up while a claim is in flight, so a job
// counted here never waits; one counted out may not wait either (store.ClaimParams.Waiting).
func (c *capacity) idle() int { return max(c.workers-int(c.active.Load()), 0) }

// reserve takes n active and held places before a claim for n jobs.
func (c *capacity) reserve(n int) {
	c.active.Add(int32(n))
	c.held.Add(int32(n))
}

// settle gives back the places of a claim for reserved jobs that took only taken of
// them.
func (c *capacity) settle(reserved, taken int) {
	unused := int32(reserved - taken)
	c.active.Add(-unused)
	c.held.Add(-unused)
	signal(c.slot)
}

// holdExtra takes a held place for a successor, claimed beyond the reservation.
func (c *capacity) holdExtra() { c.held.Add(1) }

// occupy takes an active place for a successor that begins to run or to wait locally.
func (c *capacity) occupy() { c.active.Add(1) }

// vacate frees a job's active place: its handler returned, or it left unstarted.
func (c *capacity) vacate() {
	c.active.Add(-1)
	signal(c.slot)
}

// poke tells the producer to look at its places again.
func (c *capacity) poke() { signal(c.slot) }

// durable frees a job's held place once its outcome is durable or dropped. Its limit
// slot is free in the database too, unless it went to the job's successor (handedOn).
func (c *capacity) durable(handedOn bool) {
	c.held.Add(-1)
	signal(c.slot)
	if !handedOn {
		signal(c.freed)
	}
}
