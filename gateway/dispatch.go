package gateway

// The long poll. The claim requests of a queue wait together in the queue's list;
// while the list is not empty, one goroutine per queue (dispatch) holds at most one
// claim statement in flight, for what the waiting requests ask together plus what
// the previous round's asked (claimed ahead, for the requests that arrive while the
// claim runs), and hands the jobs out in arrival order. Jobs claimed ahead that no
// request takes within hold() go back to the queue, their attempt given back. It claims when something may have arrived — a
// request joined, the queue's NOTIFY was heard, the listener reconnected, the last
// claim came back full — and otherwise only at the safety-net poll: a waiting
// request costs no query.

import (
	"context"
	"errors"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/hostclock"
)

// queue is the waiting claims of one queue. Its fields are guarded by Gateway.mu.
type queue struct {
	name    string
	waiters []*waiter
	dirty   bool          // something may have arrived since the last claim
	signal  chan struct{} // wakes dispatch (capacity 1)
	claims  int64         // claim statements run, for tests
	idle    bool          // dispatch waits for a signal, the poll or the hold, with no claim in flight
	// ready holds jobs claimed ahead of the requests (leased to the gateway), since
	// readySince; ahead is how many the next claim takes beyond what waits: what the
	// requests asked for during the previous round.
	ready      []*skiplock.Job
	readySince time.Time
	ahead      int
	asked      int // jobs the requests asked for since the last claim
}

// waiter is one claim request waiting for jobs.
type waiter struct {
	want int
	wait bool             // false: answer after one claim, even with nothing
	got  chan claimResult // capacity 1: dispatch never blocks on it
	seen bool             // a claim started after the waiter joined
}

type claimResult struct {
	jobs []*skiplock.Job
	err  error
}

func (q *queue) wake() {
	q.dirty = true
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// claimJobs claims up to want jobs of queue, waiting up to wait for one, and hands
// them out: the jobs claimed ahead among them read running from here on (handOut).
func (g *Gateway) claimJobs(ctx context.Context, name string, want int, wait time.Duration) ([]*skiplock.Job, error) {
	jobs, err := g.waitJobs(ctx, name, want, wait)
	if err == nil && len(jobs) > 0 {
		g.handOut(jobs)
	}
	return jobs, err
}

// waitJobs takes up to want jobs of queue from those claimed ahead, or waits up to
// wait for dispatch's next claim.
func (g *Gateway) waitJobs(ctx context.Context, name string, want int, wait time.Duration) ([]*skiplock.Job, error) {
	w := &waiter{want: want, wait: wait > 0, got: make(chan claimResult, 1)}
	g.mu.Lock()
	r := g.running
	if r == nil {
		g.mu.Unlock()
		return nil, errStopped
	}
	q := g.queues[name]
	if q == nil {
		q = &queue{name: name, signal: make(chan struct{}, 1)}
		g.queues[name] = q
		r.wg.Go(func() { g.dispatch(r, q) })
	}
	q.asked += want
	if len(q.ready) > 0 && len(q.waiters) == 0 {
		// Claimed ahead: answered at once, without a query.
		n := min(want, len(q.ready))
		jobs := q.ready[:n:n]
		q.ready = q.ready[n:]
		g.mu.Unlock()
		return jobs, nil
	}
	q.waiters = append(q.waiters, w)
	q.wake()
	g.mu.Unlock()

	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case res := <-w.got:
		return res.jobs, res.err
	case <-ctx.Done():
	case <-timeout:
	}
	// Leave the list; if dispatch answered meanwhile, take its answer: jobs it handed
	// out are this request's, given back when the client has gone (ctx ended).
	g.mu.Lock()
	if i := indexOf(q.waiters, w); i >= 0 {
		q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
		g.mu.Unlock()
		return nil, ctx.Err()
	}
	g.mu.Unlock()
	res := <-w.got
	if ctx.Err() != nil && len(res.jobs) > 0 {
		g.giveBack(context.WithoutCancel(ctx), res.jobs)
		return nil, ctx.Err()
	}
	return res.jobs, res.err
}

func indexOf(ws []*waiter, w *waiter) int {
	for i, x := range ws {
		if x == w {
			return i
		}
	}
	return -1
}

// dispatch runs the claims of q until no request waits on it and no claimed job
// waits for a request (or the gateway stops).
func (g *Gateway) dispatch(r *run, q *queue) {
	poll := time.NewTimer(hostclock.Jitter(g.opts.PollInterval))
	defer poll.Stop()
	for {
		g.mu.Lock()
		if g.running != r {
			back := g.close(q, errStopped)
			g.mu.Unlock()
			g.giveBack(r.ctx, back)
			return
		}
		q.serveReady()
		if len(q.waiters) == 0 {
			if len(q.ready) == 0 {
				g.close(q, nil)
				g.mu.Unlock()
				return
			}
			// Jobs claimed ahead wait a while for the next requests, then go back.
			hold := g.hold() - hostclock.Since(q.readySince)
			q.idle = true
			g.mu.Unlock()
			if hold > 0 {
				t := time.NewTimer(hold)
				select {
				case <-q.signal:
				case <-t.C:
				case <-r.ctx.Done():
				}
				t.Stop()
			}
			g.mu.Lock()
			q.idle = false
			var back []*skiplock.Job
			if len(q.waiters) == 0 && hostclock.Since(q.readySince) >= g.hold() {
				back, q.ready = q.ready, nil
			}
			g.mu.Unlock()
			g.giveBack(r.ctx, back)
			continue
		}
		if !q.dirty {
			q.idle = true
			g.mu.Unlock()
			select {
			case <-q.signal:
			case <-poll.C:
				poll.Reset(hostclock.Jitter(g.opts.PollInterval))
				g.mu.Lock()
				q.dirty = true
				g.mu.Unlock()
			case <-r.ctx.Done():
			}
			g.mu.Lock()
			q.idle = false
			g.mu.Unlock()
			continue
		}
		q.dirty = false
		demand := 0
		for _, w := range q.waiters {
			w.seen = true
			demand += w.want
		}
		// Claim ahead by what the requests asked since the last claim (at least what
		// waits now): the requests that arrive while this claim runs find their jobs
		// waiting (q.ready) instead of waiting a round.
		// The jobs beyond what waits are written claimed, not running, until a request
		// takes them (handOut).
		want := min(demand+q.ahead, g.opts.MaxClaimBatch)
		q.ahead, q.asked = max(demand, q.asked), 0
		q.claims++
		g.mu.Unlock()

		jobs, err := g.m.ClaimAhead(r.ctx, q.name, want, max(want-demand, 0))
		g.stats.claims.Add(1)
		g.stats.claimed.Add(int64(len(jobs)))
		if err != nil && r.ctx.Err() != nil {
			err = errStopped
		}

		g.mu.Lock()
		if len(jobs) > 0 {
			if len(q.ready) == 0 {
				q.readySince = hostclock.Now()
			}
			q.ready = mergeReady(q.ready, jobs)
		}
		q.serveReady()
		var left []*waiter
		for _, w := range q.waiters {
			switch {
			case err != nil && w.seen:
				w.got <- claimResult{err: err}
			case !w.wait && w.seen:
				w.got <- claimResult{}
			default:
				left = append(left, w)
			}
		}
		q.waiters = left
		if err == nil && len(jobs) == want {
			q.dirty = true // a full claim: more may be due
		}
		g.mu.Unlock()
		if err != nil && !errors.Is(err, errStopped) {
			g.log.Warn("gateway: claim failed", "queue", q.name, "error", err)
			hostclock.Sleep(r.ctx, 100*time.Millisecond) // a failing database is not hammered
		}
	}
}

// mergeReady adds a claim's jobs to those claimed ahead before it: the ones it wrote
// running (for the requests waiting now) first, so that they are the ones handed out
// now, then the earlier jobs, then the claim's own jobs claimed ahead.
func mergeReady(ready, jobs []*skiplock.Job) []*skiplock.Job {
	out := make([]*skiplock.Job, 0, len(ready)+len(jobs))
	for _, j := range jobs {
		if j.State != skiplock.StateClaimed {
			out = append(out, j)
		}
	}
	out = append(out, ready...)
	for _, j := range jobs {
		if j.State == skiplock.StateClaimed {
			out = append(out, j)
		}
	}
	return out
}

// serveReady hands the jobs claimed ahead to the waiting requests, in arrival
// order. g.mu is held.
func (q *queue) serveReady() {
	for len(q.ready) > 0 && len(q.waiters) > 0 {
		w := q.waiters[0]
		n := min(w.want, len(q.ready))
		w.got <- claimResult{jobs: q.ready[:n:n]}
		q.ready = q.ready[n:]
		q.waiters = q.waiters[1:]
	}
	if len(q.ready) == 0 {
		q.ready = nil
	}
}

// close ends q: its waiting requests answer err (nothing, when nil), it leaves the
// gateway's queues, and the jobs it claimed ahead are returned for giving back.
// g.mu is held.
func (g *Gateway) close(q *queue, err error) (back []*skiplock.Job) {
	for _, w := range q.waiters {
		w.got <- claimResult{err: err}
	}
	q.waiters = nil
	back, q.ready = q.ready, nil
	if g.queues[q.name] == q {
		delete(g.queues, q.name)
	}
	return back
}

// hold is how long jobs claimed ahead wait for a request before they go back: the
// poll interval, at most a tenth of the lease.
func (g *Gateway) hold() time.Duration { return min(g.opts.PollInterval, g.lease/10) }

// giveBack returns claimed jobs nobody will work to the queue at once, their
// attempt given back (a snooze of 0).
func (g *Gateway) giveBack(ctx context.Context, jobs []*skiplock.Job) {
	if len(jobs) == 0 {
		return
	}
	fs := make([]skiplock.Finish, len(jobs))
	for i, j := range jobs {
		fs[i] = skiplock.Finish{Job: j, Action: skiplock.FinishSnooze}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	states, err := g.m.FinishMany(ctx, fs)
	if err != nil {
		g.log.Warn("gateway: giving back claimed jobs nobody took failed; they return once their lease expires", "jobs", len(jobs), "error", err)
		return
	}
	for _, st := range states {
		if st != "" {
			g.stats.givenBack.Add(1)
		}
	}
}

// heard is the listener's OnNotify: a queue's NOTIFY wakes its waiting claims; any
// other payload (a limit changed) wakes every queue's.
func (g *Gateway) heard(_, payload string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.queues[payload]; q != nil {
		q.wake()
		return
	}
	if len(payload) > 0 && payload[0] == ':' {
		for _, q := range g.queues {
			q.wake()
		}
	}
}

// wakeAll is the listener's OnConnect: notifications sent while it was down are lost.
func (g *Gateway) wakeAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range g.queues {
		q.wake()
	}
}
