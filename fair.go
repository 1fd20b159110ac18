package skiplock

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// FairOpts are a fair queue's options (QueueSetFair, docs/fairness.md).
type FairOpts struct {
	// BypassPriority, when set, lets the jobs of this priority or higher skip the
	// rotation: every claim takes them first, in priority order, whatever their key
	// (an express lane for urgent or system jobs). Nil, the default: priority orders
	// jobs only within their key, and a key's urgent job waits for its key's turn.
	BypassPriority *int
}

// MaxFairWeight bounds a key's weight in a fair queue (FairWeightSet).
const MaxFairWeight = 1000

// QueueSetFair makes queue fair for every client: from their next claim on — at once
// for a client woken by the NOTIFY it sends, within one PollInterval otherwise — claims
// take the due jobs of the queue's concurrency keys (EnqueueOpts.ConcurrencyKey; jobs
// without one share the key "") in turn, round-robin, so one key's backlog never
// delays another key's jobs (docs/fairness.md). opts may be nil. Setting it again
// replaces the options. The setting is stored in the database with the queue's other
// settings (QueueGet reports it), as is the rotation itself, which every client
// shares. A queue nothing names is refused with ErrQueueNotFound, as QueuePause does.
func (c *Client) QueueSetFair(ctx context.Context, queue string, opts *FairOpts) error {
	if err := c.checkKnownQueue(ctx, queue, "making fair"); err != nil {
		return err
	}
	if err := c.refuseOnCitus(ctx, fmt.Sprintf("making queue %q fair", queue), "fair queue settings (QueueSetFair, skiplock queues fair)",
		"the claims there rotate over the keys with work in every queue already"); err != nil {
		return err
	}
	var bypass *int
	if opts != nil && opts.BypassPriority != nil {
		p := *opts.BypassPriority
		bypass = &p
	}
	if _, err := c.store.FairSet(ctx, c.pool, store.NowParam(c.cfg.Clock), queue, true, bypass, c.channel); err != nil {
		return fmt.Errorf("making queue %q fair: %w", queue, wrapPgError(err))
	}
	return nil
}

// QueueUnsetFair makes queue claim in plain priority order again, for every client.
// Its key weights are kept for a later QueueSetFair. Unsetting a queue that is not
// fair does nothing; a queue nothing names is refused with ErrQueueNotFound.
func (c *Client) QueueUnsetFair(ctx context.Context, queue string) error {
	if err := c.checkKnownQueue(ctx, queue, "unsetting fairness of"); err != nil {
		return err
	}
	if err := c.refuseOnCitus(ctx, fmt.Sprintf("unsetting fairness of queue %q", queue), "fair queue settings (QueueUnsetFair, skiplock queues fair)",
		"the claims there rotate over the keys with work in every queue already"); err != nil {
		return err
	}
	if _, err := c.store.FairSet(ctx, c.pool, store.NowParam(c.cfg.Clock), queue, false, nil, c.channel); err != nil {
		return fmt.Errorf("unsetting fairness of queue %q: %w", queue, wrapPgError(err))
	}
	return nil
}

// FairWeight is a concurrency key's weight in a fair queue: the key takes Weight
// jobs per turn where a key without a weight takes one.
type FairWeight struct {
	Queue     string    `json:"queue"`
	Key       string    `json:"key"`
	Weight    int       `json:"weight"`
	UpdatedAt time.Time `json:"updated_at"`
}

// FairWeightSet sets key's weight in queue, from 1 (the default: the key's row is
// removed) to MaxFairWeight; a change applies from the next claim. The queue need
// not be fair yet. key "" is the key of jobs enqueued without one.
func (c *Client) FairWeightSet(ctx context.Context, queue, key string, weight int) error {
	if err := checkQueue(ctx, queue); err != nil {
		return err
	}
	if key != "" {
		if err := validateConcurrencyKey("key", key); err != nil {
			return err
		}
	}
	if weight < 1 || weight > MaxFairWeight {
		return invalid("weight", "must be from 1 to %d, not %d", MaxFairWeight, weight)
	}
	var err error
	if weight == 1 {
		_, err = c.store.FairWeightDelete(ctx, c.pool, queue, key)
	} else {
		err = c.store.FairWeightSet(ctx, c.pool, store.NowParam(c.cfg.Clock), queue, key, weight)
	}
	if err != nil {
		return fmt.Errorf("setting the weight of key %q in queue %q: %w", key, queue, wrapPgError(err))
	}
	return nil
}

// FairWeights lists the keys of queue that have a weight other than 1 (every
// queue's when queue is ""), by queue and key.
func (c *Client) FairWeights(ctx context.Context, queue string) ([]FairWeight, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	var q *string
	if queue != "" {
		if err := checkQueue(ctx, queue); err != nil {
			return nil, err
		}
		q = &queue
	}
	rows, err := c.store.FairWeights(ctx, c.pool, q)
	if err != nil {
		return nil, fmt.Errorf("listing fair weights: %w", wrapPgError(err))
	}
	out := make([]FairWeight, len(rows))
	for i, r := range rows {
		out[i] = FairWeight{Queue: r.Queue, Key: r.Key, Weight: r.Weight, UpdatedAt: r.UpdatedAt}
	}
	return out, nil
}

// FairKeyStats is one key of a fair queue in FairKeys, or (Other) the keys beyond
// the top ones, summed.
type FairKeyStats struct {
	// Key is the concurrency key ("" for jobs enqueued without one); empty when Other.
	Key string `json:"key"`
	// Other: the row sums the Keys keys that were not among the top ones.
	Other bool `json:"other,omitempty"`
	// Keys is how many keys the row stands for: 1, or for Other the rest.
	Keys int `json:"keys"`
	// Due counts the key's due jobs, up to FairKeysOpts.Cap per key.
	Due int64 `json:"due"`
	// OldestDue is how long the oldest due job counted has been due (0: none due).
	OldestDue time.Duration `json:"oldest_due"`
}

// FairKeysOpts bound FairKeys. Zero values take the defaults.
type FairKeysOpts struct {
	// Top is how many keys are reported one by one, those with the most due jobs.
	// Default 10.
	Top int
	// Cap bounds the due jobs counted per key (and so the cost): default 10,000. The
	// oldest due job is exact for a key with at most Cap due jobs, or whose due jobs
	// share one priority.
	Cap int
	// MaxKeys bounds the keys read: default 100,000.
	MaxKeys int
}

// FairKeys returns the backlog of queue's concurrency keys: the Top keys with the
// most due jobs, each with its count and the age of its oldest due job, then one
// Other row summing the rest (absent when there is none). It reads one index
// descent per key that has pending jobs and at most Cap index entries per key,
// whatever the backlog. The queue need not be fair. ErrNotOnCitus on the Citus
// layout: the walk of the keys is a recursive query that names no key, which Citus
// refuses (the claims' own walk reads the key table there, docs/citus.md).
func (c *Client) FairKeys(ctx context.Context, queue string, opts *FairKeysOpts) ([]FairKeyStats, error) {
	if err := checkQueue(ctx, queue); err != nil {
		return nil, err
	}
	if err := c.refuseOnCitus(ctx, fmt.Sprintf("reading the keys of queue %q", queue),
		"a fair queue's key backlog (FairKeys, skiplock queues keys)", "the walk of the keys is a recursive query that names no key"); err != nil {
		return nil, err
	}
	p := store.FairKeysParams{Queue: queue, Top: 10, Cap: 10_000, MaxKeys: 100_000}
	if opts != nil {
		for _, f := range []struct {
			name string
			v    int
			to   *int
		}{{"Top", opts.Top, &p.Top}, {"Cap", opts.Cap, &p.Cap}, {"MaxKeys", opts.MaxKeys, &p.MaxKeys}} {
			switch {
			case f.v < 0:
				return nil, invalid(f.name, "must not be negative, not %d", f.v)
			case f.v > 0:
				*f.to = f.v
			}
		}
	}
	rows, err := c.store.FairKeys(ctx, c.pool, store.NowParam(c.cfg.Clock), p)
	if err != nil {
		return nil, fmt.Errorf("reading the keys of queue %q: %w", queue, wrapPgError(err))
	}
	out := make([]FairKeyStats, len(rows))
	for i, r := range rows {
		k := FairKeyStats{Keys: int(r.Keys), Due: r.Due}
		if r.Key == nil {
			k.Other = true
		} else {
			k.Key = *r.Key
		}
		if r.Oldest != nil {
			k.OldestDue = max(r.Now.Sub(*r.Oldest), 0)
		}
		out[i] = k
	}
	return out, nil
}
