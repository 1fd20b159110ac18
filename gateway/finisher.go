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
	res, err := g.submitMany(ctx, []skiplock.Finish{f})
	if err != nil {
		return "", err
	}
	return res[0].state, res[0].err
}

// submitMany hands every f of fs to the finishers at once (so they share their
// statements) and waits for each one's result, in fs's order. An error is the
// handing over's: the gateway stopping or the caller leaving before all were handed
// over (those handed over are still written and waited for).
func (g *Gateway) submitMany(ctx context.Context, fs []skiplock.Finish) ([]finishRes, error) {
	r := g.current()
	if r == nil {
		return nil, errStopped
	}
	reqs := make([]*finishReq, 0, len(fs))
	var handErr error
hand:
	for _, f := range fs {
		req := &finishReq{ctx: ctx, f: f, done: make(chan finishRes, 1)}
		select {
		case r.finishes <- req:
			reqs = append(reqs, req)
		case <-r.ctx.Done():
			handErr = errStopped
			break hand
		case <-ctx.Done():
			handErr = ctx.Err()
			break hand
		}
	}
	// Once handed over, a write is waited for even if the caller leaves: a finisher
	// answers every call it takes (its statement bounded by r.ctx), and calls left in
	// the channel when the finishers have returned were never written.
	res := make([]finishRes, len(fs))
	for i, req := range reqs {
		select {
		case res[i] = <-req.done:
		case <-r.finishersDone:
			select {
			case res[i] = <-req.done:
			default:
				res[i] = finishRes{err: errStopped}
			}
		}
	}
	if handErr != nil {
		return nil, handErr
	}
	return res, nil
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
	g.stats.finishes.Add(1)
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
			g.stats.lost.Add(1)
			req.done <- finishRes{err: skiplock.ErrLeaseLost}
		default:
			g.stats.finished.Add(1)
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
