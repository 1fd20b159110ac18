package gateway

// The long poll. The claim requests of a queue wait together in the queue's list;
// while the list is not empty, one goroutine per queue (dispatch) holds at most one
// claim statement in flight, for what the waiting requests ask together, and hands
// the jobs out in arrival order. It claims when something may have arrived — a
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
	idle    bool          // dispatch waits for a signal or the poll, with no claim in flight
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

// claimJobs claims up to want jobs of queue, waiting up to wait for one.
func (g *Gateway) claimJobs(ctx context.Context, name string, want int, wait time.Duration) ([]*skiplock.Job, error) {
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

// dispatch runs the claims of q until no request waits on it (or the gateway stops).
func (g *Gateway) dispatch(r *run, q *queue) {
	poll := time.NewTimer(hostclock.Jitter(g.opts.PollInterval))
	defer poll.Stop()
	for {
		g.mu.Lock()
		if g.running != r || len(q.waiters) == 0 {
			// Stopped, or nobody waits: answer the rest (nothing) and leave.
			for _, w := range q.waiters {
				w.got <- claimResult{err: errStopped}
			}
			q.waiters = nil
			delete(g.queues, q.name)
			g.mu.Unlock()
			return
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
		want := 0
		for _, w := range q.waiters {
			w.seen = true
			want += w.want
		}
		want = min(want, g.opts.MaxClaimBatch)
		q.claims++
		g.mu.Unlock()

		jobs, err := g.m.Claim(r.ctx, q.name, want)
		if err != nil && r.ctx.Err() != nil {
			err = errStopped
		}

		got := len(jobs)
		g.mu.Lock()
		var left []*waiter
		for _, w := range q.waiters {
			switch {
			case len(jobs) > 0:
				n := min(w.want, len(jobs))
				w.got <- claimResult{jobs: jobs[:n:n]}
				jobs = jobs[n:]
			case err != nil && w.seen:
				w.got <- claimResult{err: err}
			case !w.wait && w.seen:
				w.got <- claimResult{}
			default:
				left = append(left, w)
			}
		}
		q.waiters = left
		if err == nil && got == want {
			q.dirty = true // a full claim: more may be due
		}
		g.mu.Unlock()
		if len(jobs) > 0 {
			// The requests that asked for them left while the claim ran.
			g.giveBack(r.ctx, jobs)
		}
		if err != nil && !errors.Is(err, errStopped) {
			g.log.Warn("gateway: claim failed", "queue", q.name, "error", err)
			hostclock.Sleep(r.ctx, 100*time.Millisecond) // a failing database is not hammered
		}
	}
}

// giveBack returns claimed jobs nobody will work to the queue at once, their
// attempt given back (a snooze of 0).
func (g *Gateway) giveBack(ctx context.Context, jobs []*skiplock.Job) {
	fs := make([]skiplock.Finish, len(jobs))
	for i, j := range jobs {
		fs[i] = skiplock.Finish{Job: j, Action: skiplock.FinishSnooze}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := g.m.FinishMany(ctx, fs); err != nil {
		g.log.Warn("gateway: giving back claimed jobs whose requests left; they return once their lease expires", "jobs", len(jobs), "error", err)
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
