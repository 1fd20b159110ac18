package gateway

// The starts of jobs claimed ahead. A claim takes jobs ahead of the requests that will
// want them, written claimed, not running (Manual.ClaimAhead); when a request takes
// some, they are the worker's and run. Their start is written by the starter, about a
// second later, for every job taken meanwhile in one statement (Manual.Start, a lease
// renewal that also marks them started) — as a Go worker writes a prefetched job's
// start about a second after its handler began. A job that finishes sooner never needs
// the write: its outcome ends the run. The requests never wait for it.

import (
	"context"
	"time"

	"github.com/skiplock/skiplock"
)

// startWriteDelay is how long after a request takes jobs claimed ahead the starter
// writes their start: a second, at most the heartbeat interval the gateway gives its
// workers (a third of the lease), so the write comes well within the lease.
func (g *Gateway) startWriteDelay() time.Duration { return min(time.Second, g.lease/3) }

// starts holds the jobs claimed ahead that requests took and whose start is not
// written yet. Its fields are guarded by Gateway.mu.
type starts struct {
	jobs   []*skiplock.Job
	signal chan struct{} // wakes the starter (capacity 1)
}

// handOut notes the jobs claimed ahead (StateClaimed) among jobs, which a request is
// taking, for the starter; they read running to the request from now on.
func (g *Gateway) handOut(jobs []*skiplock.Job) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.running
	noted := false
	for _, j := range jobs {
		if j.State != skiplock.StateClaimed {
			continue
		}
		j.State = skiplock.StateRunning
		if r != nil {
			r.starts.jobs = append(r.starts.jobs, j)
			noted = true
		}
	}
	if noted {
		select {
		case r.starts.signal <- struct{}{}:
		default:
		}
	}
}

// starter writes the noted starts startWriteDelay after the first of a batch, until
// the run ends; then it writes what is left.
func (g *Gateway) starter(r *run) {
	for {
		select {
		case <-r.starts.signal:
		case <-r.ctx.Done():
			g.writeStarts(r)
			return
		}
		t := time.NewTimer(g.startWriteDelay())
		select {
		case <-t.C:
		case <-r.ctx.Done():
		}
		t.Stop()
		g.writeStarts(r)
	}
}

// writeStarts writes the starts noted so far in one statement. A job whose lease is
// gone (finished, cancelled) is left as it is; a failed write leaves the jobs reading
// claimed until they finish (logged).
func (g *Gateway) writeStarts(r *run) {
	g.mu.Lock()
	jobs := r.starts.jobs
	r.starts.jobs = nil
	g.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 10*time.Second)
	defer cancel()
	if _, err := g.m.Start(ctx, jobs...); err != nil {
		g.log.Warn("gateway: writing the start of jobs claimed ahead failed; they read claimed until they finish", "jobs", len(jobs), "error", err)
	}
}
