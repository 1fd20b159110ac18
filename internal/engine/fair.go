package engine

import (
	"context"

	"github.com/skiplock/skiplock/internal/store"
)

// fairView is which queues are fair (docs/fairness.md). Like limitView it only picks
// the claim statement; it is refreshed with the limits (on their NOTIFY, which a
// change of fairness sends too, and every PollInterval).
type fairView map[string]bool

// fair reports whether the producer of queue must run the fair claim.
func (e *Engine) fair(queue string) bool {
	v := e.fairQueues.Load()
	return v != nil && (*v)[queue]
}

// refreshFair reloads which queues are fair and wakes the producers whose claim
// changes.
func (e *Engine) refreshFair(ctx context.Context) error {
	qs, err := e.cfg.Store.FairQueues(ctx, e.cfg.Pool)
	if err != nil {
		return err
	}
	v := make(fairView, len(qs))
	for _, q := range qs {
		v[q.Name] = true
	}
	old := e.fairQueues.Swap(&v)
	for name, p := range e.producers {
		if old == nil || (*old)[name] != v[name] {
			signal(p.wake)
		}
	}
	return nil
}

// claimFair is the producer's claim for a fair queue: the fair claim, limited when a
// limit may govern the queue. It claims as many jobs as a plain claim would: the
// jobs that wait for an executor wait by key (localQueue), so a prefetch filled with
// one key's backlog does not delay another key's job claimed after it. It returns,
// by job, the weight of the job's key (0: the bypass lane).
//
// A claim that took jobs and stopped for want of room (res.More) is not short,
// whatever it took: keys it did not reach may have due jobs. A short limited claim
// is reported throttled, so that a slot this client frees wakes the producer (the
// fair claim does not tell jobs a limit held back from no jobs).
func (e *Engine) claimFair(ctx context.Context, p *producer, reserved, waiting int) ([]*store.Job, []int, claimResult, error) {
	p.handoff.Store(false) // no successors: a queue that was limited before it was made fair
	if reserved <= 0 {
		return nil, nil, claimResult{short: true}, nil // a claim of successors, asked before the store above
	}
	limited := e.limited(p.queue)
	res, err := e.cfg.Store.ClaimFair(ctx, e.cfg.Pool, e.now(), store.ClaimParams{
		Queue: p.queue, WorkerID: e.cfg.WorkerID, Limit: reserved, Waiting: waiting, Lease: e.cfg.LeaseDuration,
	}, limited)
	if err != nil {
		return nil, nil, claimResult{}, err
	}
	// A claim that found nothing is short even when it stopped for want of room: its
	// keys had only scheduled or blocked jobs, and claiming again at once would walk
	// the rotation round and round while nothing is due. The next claim, at the next
	// notification or poll, goes on where this one stopped.
	out := claimResult{short: len(res.Jobs) == 0 || (len(res.Jobs) < reserved && !res.More)}
	out.throttled = limited && out.short
	return res.Jobs, res.Weights, out, nil
}
