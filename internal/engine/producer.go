package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/backoff"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

type producer struct {
	queue  string
	cap    *capacity
	local  *localQueue   // claimed jobs waiting for an executor
	wake   chan struct{} // NOTIFY, (re)connect
	orphan chan struct{} // a job began under a binding limit: it may take a successor
	// handoff: a limited claim was throttled and due jobs remain, so claims offer the
	// running jobs as predecessors (handoff.go).
	handoff atomic.Bool
	cursor  claimCursor // where the next claim starts (cursor.go)
	// waiting: the producer waits for jobs, with no claim in flight (warmer.go).
	waiting atomic.Bool
	// reconnected: the listener (re)connected, so the database takes connections
	// again: a claim waiting out a failure's backoff retries at once (waitRetry).
	reconnected chan struct{}
	// citus is where the last claim on the Citus layout stopped in the queue's keys
	// (citus.go).
	citus store.CitusCursor
}

func newProducer(queue string, q Queue) *producer {
	c := newCapacity(q)
	return &producer{queue: queue, cap: c, local: newLocalQueue(c.size()),
		wake: make(chan struct{}, 1), orphan: make(chan struct{}, 1), reconnected: make(chan struct{}, 1)}
}

// claimResult is what one claim statement reports back to its producer.
type claimResult struct {
	short bool // fewer rows than asked: the queue has no more due jobs now
	err   error
	// throttled: due jobs were left because a limit held them back. A slot freed by
	// this client, or retryIn (when a rate window is full), is worth another claim.
	throttled bool
	retryIn   time.Duration
	// successors: it was a claim of successors only (handoff.go), which reads no
	// rate window, so the last full claim's retryIn still stands.
	successors bool
}

// produce keeps one claim statement at a time in flight for its queue. A claim locks
// and rewrites each row it takes, which makes it the costliest statement per job;
// one claim at a time, overlapping the completion writes, amortises each statement's
// commit over larger claims than two concurrent ones would (docs/benchmarks-archive.md).
// The claim runs in its own goroutine so that the producer keeps hearing NOTIFY
// wake-ups and freed places while it is in flight.
//
// One exception: a fair queue told of a new job (NOTIFY) while a claim is in flight
// sends its short notified claim at once, beside the one in flight, instead of after
// that claim's jobs have been handed over. The queue's advisory lock still
// serialises the two in the database, and the notified claim's snapshot is taken
// once it holds the lock, so it sees every claim committed before it and the new
// job: the rotation and its bound are those of two claims in a row. What the new job
// no longer waits for is the round trip of the claim in flight back to this process,
// the handing over of its jobs and the sending of the next claim, which under a
// backlog's load is a good part of its pickup (docs/fairness.md, "Fourth pass"). At
// most two claims are in flight. (It was reverted once after the chaos fair round saw
// light jobs wait beyond the bound; the claims that passed them over were a stale
// client's plain claims, not the overlap: docs/fairness.md, "Two claims in flight,
// and the stale client".)
//
// A second claim. A plain queue (neither fair nor limited, one node) whose last
// claim came back full has a backlog: while a claim is in flight and half the places
// or more are free for another (capacity.besideRoom), the producer sends a second
// plain claim beside it rather than after it. Under a backlog the claim statement is the
// queue's critical path (claims were in flight 90% of W5's time, one at a time), and
// a second one runs on another backend, so another core; the second skips the rows
// the first holds (SKIP LOCKED) and takes the jobs after them. Both reserved their
// places before they were sent, so the two never hold more than the queue's
// capacity. A claim that comes back short ends the backlog: an idle queue, a paused
// one, or one drained, sends its claims one at a time as before, so the overlap adds
// no statement at idle. At most two claims are in flight.
func (e *Engine) produce(p *producer) {
	defer e.prodWG.Done()
	fail := e.failBackoff(100 * time.Millisecond)
	poll := time.NewTimer(hostclock.Jitter(e.cfg.PollInterval))
	defer poll.Stop()
	retryTimer := time.NewTimer(time.Hour) // a full rate window's wait
	retryTimer.Stop()
	defer retryTimer.Stop()
	results := make(chan claimResult, 2)
	claiming, empty := false, false
	// inflight counts the claims in flight: at most one, and a second while a fair
	// queue's notified claim runs beside an unprompted one, or a plain queue's second
	// claim beside the first (see produce). full:
	// one of the results of claims that overlapped was not short.
	inflight, full := 0, false
	// woken records a wake-up (NOTIFY) that arrived after the claim in flight began:
	// its snapshot may predate the job it announces, so a short result from it must
	// not put the producer to sleep.
	woken := false
	// notified: a wake-up (NOTIFY) arrived since the last claim began.
	notified := false
	// unheard counts the claims begun since the last wake-up (fairBound).
	unheard := 0
	// backlog: the last claim that came back was full (more due jobs than it took
	// may wait), so a plain queue may send a second claim beside the one in flight.
	backlog := false
	// successors: a job began that can hand its limit slots on (heard while waiting
	// or while a claim was in flight), so a claim of successors is due (handoff.go).
	successors := false
	// throttle is the last claim's throttling, which the producer waits on while empty.
	throttle := claimResult{}
	defer func() { // a claim in flight still hands its jobs over
		for ; inflight > 0; inflight-- {
			<-results
		}
	}()
	for e.fetchCtx.Err() == nil {
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
			poll.Reset(hostclock.Jitter(e.cfg.PollInterval))
			var freed chan struct{}
			var retry <-chan time.Time
			orphan := p.orphans(false)
			if throttle.throttled {
				// An outcome made durable since the claim's snapshot may have freed a
				// slot. (One that was durable before it costs one claim that finds
				// nothing.) A handler's return is not enough: its job holds the slot
				// until the outcome commits.
				freed = p.cap.freed
				if throttle.retryIn > 0 {
					retryTimer.Reset(throttle.retryIn)
					retry = retryTimer.C
				}
			}
			p.waiting.Store(true)
			signal(e.idle)
			select {
			case <-p.wake:
				notified, unheard = true, 0
			case <-poll.C:
			case <-freed:
			case <-orphan:
				successors = true
			case <-retry:
			case <-e.fetchCtx.Done():
				return
			}
			p.waiting.Store(false)
			retryTimer.Stop() // since Go 1.23 a stopped timer delivers nothing stale
			empty = false
		}
		// While jobs wait locally, a claim waits for a quarter of the places to come
		// free, so that claims are batches. A fair queue told of a new job claims at
		// once with whatever places are free, and a short claim (the idle workers and a
		// quarter of the workers more): its jobs do not wait behind the local ones
		// (localQueue), so the wait for the claim — the one in flight, then this one —
		// is what remains of the new job's pickup, and a claim's time grows with its
		// size. Other claims of a fair queue are bounded by fairBound.
		urgent := notified && e.fair(p.queue)
		n, ok := p.cap.claimSize(e.cfg.CompletionBatchSize, e.cfg.FetchLimit, p.local.len() > 0 && !urgent)
		if urgent {
			n = min(n, max(p.cap.idle()+p.cap.workers/4, 1))
		} else if e.fair(p.queue) {
			n = min(n, fairBound(p.cap.workers, unheard))
		}
		// A fair queue told of a new job while a claim is in flight claims at once,
		// beside it, rather than after it; so does a plain queue with a backlog (see
		// produce, "A second claim").
		parallel := claiming && beside(inflight, e.cfg.Citus, urgent,
			backlog && !e.fair(p.queue) && !e.limited(p.queue) && p.cap.besideRoom(n, e.cfg.FetchLimit))
		if !ok && successors && p.handoff.Load() {
			// Successors need no capacity of their own (they run on their
			// predecessors' executors): claim them even when the workers are full.
			n, ok = 0, true
		}
		if !ok || empty || (claiming && !parallel) {
			select {
			case <-p.orphans(successors):
				successors = true
			case res := <-results:
				inflight--
				claiming = inflight > 0
				backlog = res.err == nil && !res.short
				if res.err != nil {
					wait := fail.Next()
					e.cfg.Failures.Warn("claim", res.err, "queue", p.queue, "retry_in", wait)
					if !claiming {
						full = false
					}
					if !waitRetry(e.fetchCtx, wait, p.reconnected, &fail) {
						return
					}
					continue
				}
				e.cfg.Failures.OK("claim")
				fail.Reset()
				select { // a reconnect before this success is no reason to cut a later failure's wait short
				case <-p.reconnected:
				default:
				}
				// The producer sleeps only once every claim that overlapped came back
				// short and no wake-up arrived after the last of them began.
				full = full || !res.short
				if !claiming {
					empty = empty || (!full && !woken)
					full = false
				}
				if res.successors {
					res.retryIn = throttle.retryIn
				}
				throttle = res
			case <-p.cap.slot:
			case <-p.wake:
				empty, woken, notified, unheard = false, true, true, 0
			case <-e.fetchCtx.Done():
				return
			}
			continue
		}
		// Reserve the places now; the claim gives back what it did not get. The jobs
		// beyond the idle executors are claimed to wait, not started.
		waiting := max(n-p.cap.idle(), 0)
		p.cap.reserve(n)
		if claiming {
			e.cfg.Counters.ClaimsBeside.Add(1)
		}
		claiming, woken, notified = true, false, false
		inflight++
		unheard++
		go func(successors bool) { results <- e.claim(p, n, waiting, successors) }(successors)
		successors = false
	}
}

// beside reports whether a producer with inflight claims in flight sends another
// beside them rather than after them (produce): only beside a single claim, never
// on the Citus layout, and only for a fair queue told of a new job (urgent) or a
// plain queue whose last claim came back full (plainBacklog).
func beside(inflight int, citus, urgent, plainBacklog bool) bool {
	return inflight == 1 && !citus && (urgent || plainBacklog)
}

// fairQuiet is how many claims in a row a fair queue makes without hearing of a new
// job (NOTIFY) before its claims start to grow (fairBound).
const fairQuiet = 2

// fairBound is the most a fair queue's claim that no wake-up prompted (a backlog
// draining) takes, unheard being the claims begun since the producer last heard of a
// new job. While new jobs are being announced, at most the workers' number: the claim
// in flight is what a quiet key's new job waits for first, and full batches (up to
// FetchLimit) made W11's p99 with a burst 2.4× worse on a quiet 2-core machine
// (docs/fairness.md, "Figures"). Once fairQuiet claims in a row began with nothing
// announced, nobody is waiting behind the claim in flight: the bound doubles with each
// further claim, towards full batches, whose per-job cost is about a plain claim's
// (a key's walk step is shared by its jobs in the claim), and which W12 needs to keep
// up with a plain queue. Doubling rather than jumping bounds what the first new job
// after a silence waits for by the claims the silence has made room for; its wake-up
// brings the bound back to the workers' number.
func fairBound(workers, unheard int) int {
	workers = max(workers, 1)
	if unheard < fairQuiet {
		return workers
	}
	return workers << min(unheard-fairQuiet+1, 20)
}

// orphans is the channel of job starts that can take a successor while the
// producer's queue hands limit slots over (handoff.go), and nil otherwise (or when
// a claim of successors is due already).
func (p *producer) orphans(due bool) chan struct{} {
	if due || !p.handoff.Load() {
		return nil
	}
	return p.orphan
}

// claim runs one claim statement for up to n jobs (already reserved), of which the
// last waiting in claim order wait for an executor, and hands the jobs to the
// executors; successors asks for a claim of successors only, if the queue is
// limited. It is not cancelled by Stop: a claim that commits must hand its jobs
// over, or they would sit leased until their lease expired.
func (e *Engine) claim(p *producer, n, waiting int, successors bool) claimResult {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.fetchCtx), 30*time.Second)
	defer cancel()
	began := hostclock.Now()
	var rows []*store.Job
	var weights []int // a fair claim's: each job's key's weight, 0 for the bypass lane
	var err error
	res := claimResult{}
	switch {
	case e.cfg.Citus:
		rows, res, err = e.claimCitus(ctx, p, n, waiting)
	case e.fair(p.queue):
		rows, weights, res, err = e.claimFair(ctx, p, n, waiting)
	case e.limited(p.queue):
		rows, res, err = e.claimLimited(ctx, p, n, waiting, successors)
	default:
		after, ticket := p.cursor.get()
		rows, err = e.cfg.Store.Claim(ctx, e.cfg.Pool, e.now(), store.ClaimParams{
			Queue: p.queue, WorkerID: e.cfg.WorkerID, Limit: n, Waiting: waiting, Lease: e.cfg.LeaseDuration,
			After: after, Lag: e.cfg.PollInterval,
		})
		res.short = len(rows) < n
		if len(rows) > 0 {
			p.cursor.advance(ticket, store.CursorOf(rows[len(rows)-1]))
		}
	}
	m := e.cfg.Counters
	m.ClaimNanos.Add(int64(hostclock.Since(began)))
	taken := 0
	for i, row := range rows {
		f := newFlight(row, e.cfg.Hooks.Adopt(row), p)
		if f.slotOf.ID == "" {
			taken++
		} else {
			p.cap.holdExtra() // a successor: not part of the n reserved
		}
		if i < len(weights) && f.waits {
			// A fair claim's job that waits for an executor waits for its key's turn
			// (localQueue); the ones idle executors take at once keep the claim's order.
			f.weight = weights[i]
		}
		e.hold(f)
	}
	p.cap.settle(n, taken)
	if err != nil {
		return claimResult{err: err}
	}
	m.Claims.Add(1)
	m.Claimed.Add(int64(len(rows)))
	return res
}

// hold registers a claimed job (so the heartbeater renews its lease) and queues it
// for the producer's executors. Its place was reserved before the claim, unless it
// is a successor (handoff.go): that one waits for its predecessor's executor, or, if
// the predecessor's handler returned already, takes a place in the local queue if
// there is one.
func (e *Engine) hold(f *flight) {
	p := f.p
	e.jobsWG.Add(1)
	e.mu.Lock()
	succ := e.successorOf(f)
	if old, ok := e.inflight[f.row.ID]; ok {
		// This process already holds the job under an earlier claim, so that claim
		// is dead: its commit was lost in a server crash (claims commit
		// asynchronously, internal/store/lease.go) or its lease was reclaimed. It is
		// treated as the heartbeater treats a lost lease: its handler is cancelled
		// and its outcome, fenced by the dead token, is reported as lease lost.
		if old.lose() {
			old.cancel(e.cfg.LeaseLost)
		}
		// After a failover many jobs can come back at once: one line, rate-limited.
		e.cfg.Failures.Notice("reclaimed_claim", "skiplock: claimed a job this process still holds under an earlier claim that is no longer valid (a server crash or a failover undid it, or its lease was reclaimed); that run is treated as a lost lease",
			"job_id", f.row.ID, "kind", f.row.Kind, "attempt", f.row.Attempts)
	}
	e.inflight[f.row.ID] = f
	e.mu.Unlock()
	m := e.cfg.Counters
	switch succ {
	case attached:
		m.Handoffs.Add(1)
		return // it runs on its predecessor's executor (Engine.successor)
	case giveUp:
		m.HandoffsReturned.Add(1)
		e.handBack(f, false)
		return
	}
	if f.slotOf.ID != "" {
		p.cap.occupy()
		if !p.local.push(f, 0) { // no place left: back to pending rather than block the claim
			m.HandoffsReturned.Add(1)
			e.handBack(f, true)
		}
		return
	}
	// It never blocks, and finds a place: local holds the producer's whole capacity,
	// and the engine closes it only once no claim is in flight.
	if !p.local.push(f, f.weight) {
		e.handBack(f, true)
	}
}

// failBackoff paces the retries of a failing statement that starts at initial: it
// doubles up to the poll interval (never beyond 5 s). A failing claim then retries
// no more often than an idle queue polls — the database sees no more statements in
// an outage than in a quiet hour — and a worker resumes within about one poll
// interval of the database taking writes again (a failover: docs/operations.md,
// "High availability"), not after a backoff grown to 5 s.
func (e *Engine) failBackoff(initial time.Duration) backoff.Backoff {
	return backoff.Backoff{Initial: initial, Max: retryMax(initial, e.cfg.PollInterval), Jitter: hostclock.Jitter}
}

// retryMax is failBackoff's bound: the poll interval, within [initial, 5 s].
func retryMax(initial, poll time.Duration) time.Duration {
	return min(max(poll, initial), 5*time.Second)
}

// waitRetry waits d, a failed claim's backoff, and reports whether to retry (false:
// ctx ended). A signal on reconnected — the listener connected again, so the
// database takes connections — ends the wait at once and restarts fail at its
// initial delay.
func waitRetry(ctx context.Context, d time.Duration, reconnected <-chan struct{}, fail *backoff.Backoff) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-reconnected:
		fail.Reset()
		return true
	case <-t.C:
		return true
	}
}
