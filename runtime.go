package skiplock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/store"
)

// A started client runs, per process:
//
//	producer (one per queue)  wait for NOTIFY, a freed slot or a jittered poll; claim up
//	                          to the free slots in one statement; start one goroutine per job
//	executor (per job)        handler(ctx, job) with middleware, panic → error, timeout
//	heartbeater               one UPDATE per tick renews every in-flight lease; a lost
//	                          lease cancels the job's context and drops its outcome
//	completer                 batches outcomes into one fenced UPDATE … FROM unnest(…);
//	                          a slot is freed only once its outcome is durable
//	listener                  one dedicated LISTEN connection, reconnecting
//	maintenance               reclaimer (and other services), one client at a time
//
// Database connections: the listener's own connection, plus pool connections held
// only for the duration of a statement by at most one claim per queue, the
// heartbeater, the completer and each maintenance service — independent of how
// many jobs run at once.

// ErrClientStarted is returned by Start on a client that is already running.
var ErrClientStarted = errors.New("skiplock: client already started")

type runtime struct {
	c *Client

	fetchCtx   context.Context // producers and listener
	stopFetch  context.CancelFunc
	jobsCtx    context.Context // handlers
	cancelJobs context.CancelCauseFunc
	bgCtx      context.Context // heartbeater, completer, maintenance
	stopBg     context.CancelFunc

	producers map[string]*producer
	listener  *notify.Listener

	mu       sync.Mutex
	inflight map[string]*inflight

	outcomes chan *inflight
	prodWG   sync.WaitGroup
	execWG   sync.WaitGroup
	jobsWG   sync.WaitGroup // claim → outcome durable (or dropped)
	bgWG     sync.WaitGroup
	stopOnce sync.Once
	stopped  chan struct{}
}

type producer struct {
	queue    string
	cfg      QueueConfig
	active   atomic.Int32   // claimed and not yet finished running (queued locally or running)
	held     atomic.Int32   // claimed and not yet durable (active + outcomes being written)
	avgRunNs atomic.Int64   // moving average of handler durations; 0 = unknown
	local    chan *inflight // claimed jobs waiting for an executor
	wake     chan struct{}  // NOTIFY, (re)connect
	slot     chan struct{}  // an outcome became durable
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

type inflight struct {
	job      *Job
	p        *producer
	ctx      context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time // zero: none; guarded by runtime.mu
	started  time.Time
	begun    atomic.Bool // the handler was started
	released bool        // never started; handed back at Stop
	returned atomic.Bool
	lost     atomic.Bool
	warned   atomic.Bool

	outcome store.Outcome
	err     error
	runDur  time.Duration
	wait    time.Duration
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Start begins working the configured queues. It returns at once; the client runs
// until Stop or StopAndCancel (or until ctx ends, which stops it like Stop with no
// grace). A client with no queues has nothing to start.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rt != nil {
		return ErrClientStarted
	}
	if len(c.cfg.Queues) == 0 {
		return invalid("config", "no Queues to work; a client without queues only enqueues")
	}
	r := &runtime{
		c:         c,
		producers: map[string]*producer{},
		inflight:  map[string]*inflight{},
		stopped:   make(chan struct{}),
	}
	total := 0
	for name, q := range c.cfg.Queues {
		active := q.MaxWorkers + max(q.MaxPrefetch, 0)
		r.producers[name] = &producer{queue: name, cfg: q, local: make(chan *inflight, active),
			wake: make(chan struct{}, 1), slot: make(chan struct{}, 1)}
		total += active + c.cfg.CompletionBatchSize
	}
	r.outcomes = make(chan *inflight, total)
	base := context.WithoutCancel(ctx)
	r.fetchCtx, r.stopFetch = context.WithCancel(base)
	r.jobsCtx, r.cancelJobs = context.WithCancelCause(base)
	r.bgCtx, r.stopBg = context.WithCancel(base)

	if !c.cfg.PollOnly {
		l, err := notify.New(notify.Config{
			ConnConfig: c.pool.Config().ConnConfig.Copy(),
			Channels:   []string{c.channel},
			Logger:     c.log,
			OnNotify: func(_, queue string) {
				if p := r.producers[queue]; p != nil {
					signal(p.wake)
				}
			},
			OnConnect: func() {
				for _, p := range r.producers {
					signal(p.wake)
				}
			},
		})
		if err != nil {
			return err
		}
		r.listener = l
		r.prodWG.Add(1)
		go func() { defer r.prodWG.Done(); l.Run(r.fetchCtx) }()
	}
	for _, p := range r.producers {
		r.prodWG.Add(1)
		go r.produce(p)
		for i := 0; i < p.cfg.MaxWorkers; i++ {
			r.execWG.Add(1)
			go r.executor(p)
		}
	}
	r.bgWG.Add(2)
	go r.heartbeat()
	go r.complete()
	for _, svc := range c.maintenanceServices() {
		r.bgWG.Add(1)
		go r.maintain(svc)
	}
	c.rt = r
	go func() {
		select {
		case <-ctx.Done():
			c.stop(context.Background(), true)
		case <-r.stopped:
		}
	}()
	c.log.Info("skiplock: client started", "worker_id", c.cfg.ID, "queues", len(r.producers), "poll_only", c.cfg.PollOnly)
	return nil
}

// Stop stops claiming new jobs and waits for running jobs to finish and their
// outcomes to be written. If ctx ends first, running jobs' contexts are cancelled
// and Stop returns ctx's error once they have returned (at most HeartbeatInterval
// later; a handler that ignores its context is abandoned and its lease left to
// expire).
func (c *Client) Stop(ctx context.Context) error { return c.stop(ctx, false) }

// StopAndCancel stops claiming, cancels every running job's context at once, and
// waits as Stop does. Interrupted jobs are retried by their retry policy.
func (c *Client) StopAndCancel(ctx context.Context) error { return c.stop(ctx, true) }

var errShutdown = errors.New("skiplock: client shutting down")

func (c *Client) stop(ctx context.Context, cancelJobs bool) error {
	c.mu.Lock()
	r := c.rt
	c.mu.Unlock()
	if r == nil {
		return nil
	}
	var err error
	r.stopOnce.Do(func() {
		r.stopFetch()
		r.prodWG.Wait()
		for _, p := range r.producers {
			close(p.local) // executors release what they have not started, then exit
		}
		if cancelJobs {
			r.cancelJobs(errShutdown)
		}
		done := make(chan struct{})
		go func() { r.jobsWG.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = ctx.Err()
			r.cancelJobs(errShutdown)
			select {
			case <-done:
			case <-time.After(c.cfg.HeartbeatInterval):
				c.log.Warn("skiplock: stopping with handlers still running; their leases will expire", "running", r.running())
			}
		}
		r.stopBg()
		r.bgWG.Wait()
		if err == nil {
			r.execWG.Wait()
		}
		c.bg.Wait()
		close(r.stopped)
		c.mu.Lock()
		c.rt = nil
		c.mu.Unlock()
		c.log.Info("skiplock: client stopped", "worker_id", c.cfg.ID)
	})
	select { // a concurrent second caller waits for the first to finish stopping
	case <-r.stopped:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	return err
}

func (r *runtime) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight)
}

// jitter returns d ± 10%.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + rand.N(d/5+1)
}

// sleep waits for d or until ctx ends; false means ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// claimSize decides how many jobs the producer claims now. A producer holds at most
// capacity() jobs that are queued or running, and at most CompletionBatchSize more
// whose outcomes are being written: so the next claim overlaps the completion write
// (two statements in flight, as in the B1 baseline), while a database that stops
// accepting outcomes still stops the claiming. While jobs are still queued locally
// it waits until a quarter of the capacity is free, so fast queues claim in batches
// rather than one job per freed slot.
func (r *runtime) claimSize(p *producer) (int, bool) {
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

// claimConcurrency is how many claim statements a producer may have in flight. A
// claim locks and rewrites each row it takes, which makes it the costliest statement
// per job. Measured on 2 cores (W4/W5): one claim at a time, overlapping the
// completion writes, beats two concurrent smaller claims (30.4k vs 29.3k jobs/s at
// concurrency 100; 22.9k vs 20.6k at concurrency 1), because larger claims amortise
// each statement's commit. The loop supports more for machines with more cores.
const claimConcurrency = 1

type claimResult struct {
	short bool // fewer rows than asked: the queue has no more due jobs now
	err   error
}

func (r *runtime) produce(p *producer) {
	defer r.prodWG.Done()
	c := r.c
	backoff := 100 * time.Millisecond
	poll := time.NewTimer(jitter(c.cfg.PollInterval))
	defer poll.Stop()
	results := make(chan claimResult, claimConcurrency)
	inFlight, empty := 0, false
	// woken records a wake-up (NOTIFY) that arrived after the claims in flight began:
	// their snapshot may predate the job it announces, so a short result from them
	// must not put the producer to sleep.
	woken := false
	defer func() { // claims in flight still hand their jobs over
		for ; inFlight > 0; inFlight-- {
			<-results
		}
	}()
	for r.fetchCtx.Err() == nil {
		if empty && inFlight == 0 {
			if !poll.Stop() {
				select {
				case <-poll.C:
				default:
				}
			}
			poll.Reset(jitter(c.cfg.PollInterval))
			select {
			case <-p.wake:
			case <-poll.C:
			case <-r.fetchCtx.Done():
				return
			}
			empty = false
		}
		n, ok := r.claimSize(p)
		if !ok || empty || inFlight == claimConcurrency {
			select {
			case res := <-results:
				inFlight--
				if res.err != nil {
					c.log.Warn("skiplock: claim failed; backing off", "queue", p.queue, "error", res.err, "retry_in", backoff)
					if !sleep(r.fetchCtx, jitter(backoff)) {
						return
					}
					backoff = min(backoff*2, 5*time.Second)
					continue
				}
				backoff = 100 * time.Millisecond
				empty = empty || (res.short && !woken)
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
		inFlight++
		woken = false
		go func() { results <- r.claim(p, n) }()
	}
}

// claim runs one claim statement for up to n jobs (already reserved) and hands the
// jobs to the executors. It is not cancelled by Stop: a claim that commits must hand
// its jobs over, or they would sit leased until their lease expired.
func (r *runtime) claim(p *producer, n int) claimResult {
	c := r.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.fetchCtx), 30*time.Second)
	defer cancel()
	began := hostNow()
	rows, err := c.store.Claim(ctx, c.pool, nowParam(c.cfg.Clock), store.ClaimParams{
		Queue: p.queue, WorkerID: c.cfg.ID, Limit: n, Lease: c.cfg.LeaseDuration,
	})
	c.metrics.claimNanos.Add(int64(hostNow().Sub(began)))
	for _, row := range rows {
		r.hold(p, fromRow(row))
	}
	unused := int32(n - len(rows))
	p.active.Add(-unused)
	p.held.Add(-unused)
	signal(p.slot)
	if err != nil {
		return claimResult{err: err}
	}
	c.metrics.claims.Add(1)
	c.metrics.claimed.Add(int64(len(rows)))
	return claimResult{short: len(rows) < n}
}

// hold registers a claimed job (so the heartbeater renews its lease) and queues it
// for the producer's executors. Its capacity was reserved before the claim.
func (r *runtime) hold(p *producer, job *Job) {
	r.jobsWG.Add(1)
	f := &inflight{job: job, p: p}
	r.mu.Lock()
	r.inflight[job.ID] = f
	r.mu.Unlock()
	p.local <- f // never blocks: local holds the producer's whole capacity
}

// executor runs the producer's queued jobs one at a time until Stop closes the
// queue. Jobs still queued at Stop were never started: they go back to pending at
// once, with the claim's attempt given back.
func (r *runtime) executor(p *producer) {
	defer r.execWG.Done()
	for f := range p.local {
		switch {
		case r.fetchCtx.Err() != nil:
			f.outcome = store.Outcome{Lease: f.job.lease(), Action: store.ActionSnooze}
			f.released = true
			r.outcomes <- f
		case f.lost.Load(): // the lease ran out while the job waited locally
			r.finish(f, nil)
		default:
			r.execute(f)
		}
		p.active.Add(-1)
		signal(p.slot)
	}
}

// begin prepares a job's context just before its handler runs.
func (r *runtime) begin(f *inflight) (registration, bool) {
	c := r.c
	job := f.job
	f.started = hostNow()
	timeout := c.cfg.JobTimeout
	reg, known := c.workers.lookup(job.Kind)
	if known && reg.opts.Timeout > 0 {
		timeout = reg.opts.Timeout
	}
	ctx := context.WithValue(r.jobsCtx, ctxKey{}, job)
	ctx, cancel := context.WithCancelCause(ctx)
	if timeout > 0 {
		deadline := f.started.Add(timeout)
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithDeadline(ctx, deadline)
		f.cancel = func(cause error) { cancel(cause); cancelT() }
		r.mu.Lock()
		f.deadline = deadline
		r.mu.Unlock()
	} else {
		f.cancel = cancel
	}
	f.ctx = ctx
	if c.cfg.Clock != nil {
		f.wait = c.cfg.Clock.Now().Sub(job.RunAt)
	} else {
		f.wait = f.started.Sub(job.RunAt)
	}
	f.begun.Store(true)
	if f.lost.Load() { // lost while waiting locally
		cancel(ErrLeaseLost)
	}
	return reg, known
}

func (r *runtime) execute(f *inflight) {
	c := r.c
	job := f.job
	reg, known := r.begin(f)
	var err error
	if !known {
		err = Permanent(fmt.Errorf("no worker registered for kind %q", job.Kind))
	} else {
		h := reg.handler
		for i := len(c.cfg.Middleware) - 1; i >= 0; i-- {
			h = c.cfg.Middleware[i](h)
		}
		err = runHandler(f.ctx, h, job)
	}
	f.runDur = hostNow().Sub(f.started)
	f.p.observe(f.runDur)
	f.returned.Store(true)
	if f.lost.Load() {
		f.cancel(nil)
		r.finish(f, nil)
		return
	}
	f.err = err
	f.outcome = r.classify(job, err, f.ctx)
	f.cancel(nil)
	r.outcomes <- f
}

// runHandler calls h, turning a panic into an error that carries the stack.
func runHandler(ctx context.Context, h HandlerFunc, job *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, job)
}

// classify maps a handler's result to the outcome written for the job.
func (r *runtime) classify(job *Job, err error, ctx context.Context) store.Outcome {
	o := store.Outcome{Lease: job.lease()}
	var (
		snooze *SnoozeError
		cancel *CancelError
		perm   *PermanentError
	)
	switch {
	case err == nil:
		o.Action = store.ActionComplete
	case errors.As(err, &snooze):
		o.Action, o.Delay = store.ActionSnooze, snooze.Delay
	case errors.As(err, &cancel):
		o.Action, o.Error = store.ActionCancel, err.Error()
	case errors.As(err, &perm):
		o.Action, o.Error = store.ActionFail, err.Error()
	default:
		o.Action, o.Error = store.ActionRetry, err.Error()
		if errors.Is(context.Cause(ctx), errShutdown) {
			o.Error = "interrupted by shutdown: " + o.Error
		} else if ctx.Err() == context.DeadlineExceeded {
			o.Error = "timed out: " + o.Error
		}
		o.Delay = r.c.retryPolicy(job.Kind).Delay(job.Attempt)
	}
	return o
}

// finish frees a job's slot after its outcome is durable (status != "") or dropped.
func (r *runtime) finish(f *inflight, status *string) {
	c := r.c
	r.mu.Lock()
	delete(r.inflight, f.job.ID)
	r.mu.Unlock()
	ev := &Event{Job: f.job, Err: f.err, RunDuration: f.runDur, QueueWait: f.wait}
	switch {
	case f.released:
		r.release(f)
		return
	case status == nil:
		c.metrics.leaseLost.Add(1)
		ev.Kind = EventLeaseLost
		c.log.Warn("skiplock: lease lost; outcome discarded", "job_id", f.job.ID, "kind", f.job.Kind, "attempt", f.job.Attempt)
	default:
		c.count(f.outcome.Action, *status)
		f.job.State = JobState(*status)
		ev.Kind = eventKind(f.outcome.Action, *status)
	}
	c.emit(ev)
	r.release(f)
}

// release frees the job's place in its producer's capacity.
func (r *runtime) release(f *inflight) {
	f.p.held.Add(-1)
	signal(f.p.slot)
	r.jobsWG.Done()
}

func eventKind(a store.Action, status string) EventKind {
	switch status {
	case store.StatusSucceeded:
		return EventSucceeded
	case store.StatusFailed:
		return EventFailed
	case store.StatusCancelled:
		return EventCancelled
	}
	if a == store.ActionSnooze {
		return EventSnoozed
	}
	return EventRetried
}

func (r *runtime) heartbeat() {
	defer r.bgWG.Done()
	c := r.c
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-r.bgCtx.Done():
			return
		case <-t.C:
		}
		now := hostNow()
		var live []*inflight
		r.mu.Lock()
		for _, f := range r.inflight {
			if f.returned.Load() || f.lost.Load() {
				continue
			}
			if !f.deadline.IsZero() && now.After(f.deadline.Add(c.cfg.HeartbeatInterval)) {
				if f.warned.CompareAndSwap(false, true) {
					c.log.Warn("skiplock: handler ignores its context past its timeout; letting its lease expire",
						"job_id", f.job.ID, "kind", f.job.Kind)
				}
				continue
			}
			live = append(live, f)
		}
		r.mu.Unlock()
		if len(live) == 0 {
			continue
		}
		leases := make([]store.Lease, len(live))
		for i, f := range live {
			leases[i] = f.job.lease()
		}
		ctx, cancel := context.WithTimeout(r.bgCtx, c.cfg.HeartbeatInterval)
		renewed, err := c.store.Heartbeat(ctx, c.pool, nowParam(c.cfg.Clock), leases, c.cfg.LeaseDuration)
		cancel()
		if err != nil {
			c.log.Warn("skiplock: heartbeat failed", "jobs", len(leases), "error", err)
			continue
		}
		for _, f := range live {
			if !renewed[f.job.ID] && !f.returned.Load() {
				f.lost.Store(true)
				if f.begun.Load() {
					f.cancel(ErrLeaseLost)
				}
			}
		}
	}
}

func (r *runtime) complete() {
	defer r.bgWG.Done()
	c := r.c
	batch := make([]*inflight, 0, c.cfg.CompletionBatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case f := <-r.outcomes:
			batch = append(batch, f)
		case <-r.bgCtx.Done():
			return
		}
		timer.Reset(c.cfg.CompletionBatchDelay)
	fill:
		for len(batch) < c.cfg.CompletionBatchSize {
			select {
			case f := <-r.outcomes:
				batch = append(batch, f)
			case <-timer.C:
				break fill
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		r.flush(batch)
		batch = batch[:0]
	}
}

// flush writes a batch of outcomes, retrying while the database is unreachable. The
// writes are fenced, so retrying after an ambiguous failure is safe.
func (r *runtime) flush(batch []*inflight) {
	c := r.c
	outs := make([]store.Outcome, len(batch))
	for i, f := range batch {
		outs[i] = f.outcome
	}
	backoff := 50 * time.Millisecond
	ambiguous := false // an earlier attempt failed: it may have committed all the same
	for {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.bgCtx), 30*time.Second)
		began := hostNow()
		res, err := c.finish(ctx, outs)
		if err == nil && ambiguous {
			err = r.recognise(ctx, batch, res)
		}
		cancel()
		if err == nil {
			c.metrics.flushNanos.Add(int64(hostNow().Sub(began)))
			c.metrics.flushes.Add(1)
			c.metrics.flushed.Add(int64(len(outs)))
			for _, f := range batch {
				if st, ok := res[f.job.ID]; ok {
					r.finish(f, &st)
				} else {
					r.finish(f, nil)
				}
			}
			return
		}
		ambiguous = true
		c.log.Warn("skiplock: writing job outcomes failed; retrying", "jobs", len(batch), "error", err, "retry_in", backoff)
		if !sleep(r.bgCtx, jitter(backoff)) {
			c.log.Error("skiplock: stopping with unwritten outcomes; their jobs will be reclaimed and run again", "jobs", len(batch))
			for _, f := range batch {
				r.finish(f, nil)
			}
			return
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// recognise runs after a retried completion batch: an earlier attempt may have
// committed before its connection failed, and then the retry — fenced by tokens the
// first attempt cleared — changes nothing for those jobs. For each job the retry did
// not change, it reads the row and adds it to res when the row is exactly what this
// outcome writes (state, attempt count and, where written, the error), so the worker
// reports the outcome it wrote instead of a lost lease. A job taken over by another
// worker cannot match: a reclaim writes its own error, a new claim raises attempts.
func (r *runtime) recognise(ctx context.Context, batch []*inflight, res map[string]string) error {
	var missing []string
	for _, f := range batch {
		if _, ok := res[f.job.ID]; !ok {
			missing = append(missing, f.job.ID)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	rows, err := r.c.store.Finished(ctx, r.c.pool, missing)
	if err != nil {
		return err
	}
	for _, f := range batch {
		if _, ok := res[f.job.ID]; ok {
			continue
		}
		row, found := rows[f.job.ID]
		if st, ok := ownOutcome(f.outcome, f.job.Attempt, row, found, r.c.cfg.DeleteOnSuccess); ok {
			res[f.job.ID] = st
		}
	}
	return nil
}

// ownOutcome reports whether a job row (found or deleted) is what outcome o, written
// for a claim at attempt, leaves behind, and the state it left.
func ownOutcome(o store.Outcome, attempt int, row store.FinishedRow, found, deleteOnSuccess bool) (string, bool) {
	if !found {
		return store.StatusSucceeded, o.Action == store.ActionComplete && deleteOnSuccess
	}
	if row.Running {
		return "", false
	}
	wantAttempts, wantErr := attempt, o.Error
	var states []string
	switch o.Action {
	case store.ActionComplete:
		states, wantErr = []string{store.StatusSucceeded}, row.LastError // a completion keeps the old error
	case store.ActionFail:
		states = []string{store.StatusFailed}
	case store.ActionCancel:
		states = []string{store.StatusCancelled}
	case store.ActionSnooze:
		states, wantAttempts, wantErr = []string{store.StatusPending}, attempt-1, row.LastError
	case store.ActionRetry:
		states = []string{store.StatusPending, store.StatusFailed}
	}
	if row.Attempts != wantAttempts || row.LastError != wantErr {
		return "", false
	}
	for _, st := range states {
		if row.Status == st {
			return st, true
		}
	}
	return "", false
}

// maintenanceService is a periodic task that one client at a time runs: each run is
// one transaction that first takes a transaction-level advisory lock named after the
// service and the schema, and skips the run when another client holds it.
type maintenanceService struct {
	name     string
	interval time.Duration
	run      func(ctx context.Context, tx pgx.Tx) (attrs []any, err error)
}

func (c *Client) maintenanceServices() []maintenanceService {
	var out []maintenanceService
	if c.cfg.ReclaimInterval > 0 {
		out = append(out, maintenanceService{name: "reclaimer", interval: c.cfg.ReclaimInterval,
			run: func(ctx context.Context, tx pgx.Tx) ([]any, error) {
				res, err := c.reclaim(ctx, tx)
				return []any{"requeued", res.Requeued, "failed", res.Failed}, err
			}})
	}
	return append(out, c.retentionServices()...)
}

// RunMaintenanceOnce runs one pass of the named maintenance service ("reclaimer")
// under its advisory lock; ran is false when another client held the lock.
func (c *Client) RunMaintenanceOnce(ctx context.Context, name string) (ran bool, err error) {
	for _, svc := range c.maintenanceServices() {
		if svc.name == name {
			ran, _, err = c.runService(ctx, svc)
			return ran, err
		}
	}
	return false, invalid("service", "unknown maintenance service %q", name)
}

func (c *Client) runService(ctx context.Context, svc maintenanceService) (ran bool, attrs []any, err error) {
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))",
			"skiplock."+svc.name+"."+c.cfg.Schema).Scan(&ran); err != nil || !ran {
			return err
		}
		attrs, err = svc.run(ctx, tx)
		return err
	})
	return ran, attrs, err
}

func (r *runtime) maintain(svc maintenanceService) {
	defer r.bgWG.Done()
	c := r.c
	for sleep(r.bgCtx, jitter(svc.interval)) {
		ran, attrs, err := c.runService(r.bgCtx, svc)
		switch {
		case err != nil && r.bgCtx.Err() == nil:
			c.log.Warn("skiplock: maintenance run failed", "service", svc.name, "error", err)
		case ran:
			c.log.Debug("skiplock: maintenance run", append([]any{"service", svc.name}, attrs...)...)
		}
	}
}
