package gateway

// The finishers write the finishing calls that arrive together in one statement
// (Manual.FinishMany), the way a Go worker's completer batches its outcomes: under
// load, a statement carries every call that arrived while the previous one ran.

import (
	"context"

	"github.com/skiplock/skiplock"
)

// finishers is how many finishing statements may be in flight at once.
const finishers = 2

// finishReq is one finishing call waiting for its statement.
type finishReq struct {
	ctx  context.Context
	f    skiplock.Finish
	done chan finishRes // capacity 1
}

type finishRes struct {
	state skiplock.JobState
	err   error
}

// submit hands f to the finishers and waits for its result: the state the job is in
// now, or ErrLeaseLost.
func (g *Gateway) submit(ctx context.Context, f skiplock.Finish) (skiplock.JobState, error) {
	r := g.current()
	if r == nil {
		return "", errStopped
	}
	req := &finishReq{ctx: ctx, f: f, done: make(chan finishRes, 1)}
	select {
	case r.finishes <- req:
	case <-r.ctx.Done():
		return "", errStopped
	case <-ctx.Done():
		return "", ctx.Err()
	}
	// Once handed over, the write is waited for even if the caller leaves: a finisher
	// answers every call it takes (its statement bounded by r.ctx), and calls left
	// in the channel when the finishers have returned were never written.
	select {
	case res := <-req.done:
		return res.state, res.err
	case <-r.finishersDone:
		select {
		case res := <-req.done:
			return res.state, res.err
		default:
			return "", errStopped
		}
	}
}

// finisher takes the waiting finishing calls, up to MaxClaimBatch at a time, and
// writes them in one statement.
func (g *Gateway) finisher(r *run) {
	var held *finishReq // a call for a claim already in the batch: the next batch's first
	for {
		var first *finishReq
		if held != nil {
			first, held = held, nil
		} else {
			select {
			case first = <-r.finishes:
			case <-r.ctx.Done():
				g.drainFinishes(r)
				return
			}
		}
		batch := []*finishReq{first}
		leases := map[claimKey]bool{lease(first): true}
	fill:
		for len(batch) < g.opts.MaxClaimBatch {
			select {
			case req := <-r.finishes:
				if leases[lease(req)] {
					held = req
					break fill
				}
				leases[lease(req)] = true
				batch = append(batch, req)
			default:
				break fill
			}
		}
		g.write(r.ctx, batch)
	}
}

// claimKey is one claim of a job: FinishMany takes each at most once per statement.
type claimKey struct{ id, token string }

func lease(req *finishReq) claimKey { return claimKey{req.f.Job.ID, req.f.Job.LeaseToken} }

// write runs one batch and answers each call. A batch the database refuses as a
// whole is written again one call at a time, so one bad call cannot fail the others.
func (g *Gateway) write(ctx context.Context, batch []*finishReq) {
	fs := make([]skiplock.Finish, len(batch))
	for i, req := range batch {
		fs[i] = req.f
	}
	states, err := g.m.FinishMany(ctx, fs)
	if err != nil && len(batch) > 1 && !transient(err) && ctx.Err() == nil {
		for _, req := range batch {
			g.write(ctx, []*finishReq{req})
		}
		return
	}
	for i, req := range batch {
		switch {
		case err != nil:
			if ctx.Err() != nil {
				err = errStopped
			}
			req.done <- finishRes{err: err}
		case states[i] == "":
			req.done <- finishRes{err: skiplock.ErrLeaseLost}
		default:
			req.done <- finishRes{state: states[i]}
		}
	}
}

// drainFinishes answers the calls still queued when the gateway stops.
func (g *Gateway) drainFinishes(r *run) {
	for {
		select {
		case req := <-r.finishes:
			req.done <- finishRes{err: errStopped}
		default:
			return
		}
	}
}
