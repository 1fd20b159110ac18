package store

// The key table's rows of a batch over several keys, taken in key order before the
// batch is inserted (Citus layout only; docs/citus.md, "Which keys have work").

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// CitusHoldKeys makes sure, on the Citus layout, that the key table has a row for
// every (concurrency key, queue) of ps, with a run_at no later than its jobs', before
// ps is inserted: one router statement pair per key and queue, in key order, in db's
// transaction.
//
// The layout's trigger on jobs (citus.sql, jobs_citus_key) does the same for each
// job, on the shard that takes it, while the insert runs; a new key's row inserted
// there is held until the transaction ends. A batch reaches its shards in parallel
// and each shard in its rows' order, so two concurrent batches over the same new keys
// took their rows in different orders and deadlocked (SQLSTATE 40P01, a distributed
// deadlock). Taken here first, in one order for every batch, the rows are waited for
// in that order only; the trigger then finds each row there (its own or committed)
// and takes it without waiting. On a pool (no transaction) the rows are committed
// before the insert, which is as good: a row of a key without jobs costs a worker one
// empty claim, after which the key leaves the table.
//
// A batch of one key and queue cannot deadlock this way and costs nothing; otherwise
// the first call of a Store asks the layout once (Distributed), and the single-node
// layout returns there.
func (s *Store) CitusHoldKeys(ctx context.Context, db DBTX, now *time.Time, ps []InsertParams) error {
	holds := map[keyQueue]*keyHold{}
	for i := range ps {
		p := &ps[i]
		k := keyQueue{p.ConcurrencyKey, p.Queue}
		var at time.Time
		due := false
		switch {
		case p.RunAt != nil:
			at = *p.RunAt
		case now != nil:
			at = now.Add(p.Delay)
		default:
			due = true // now() + delay, on the database's clock: not known here
		}
		h, ok := holds[k]
		if !ok {
			holds[k] = &keyHold{keyQueue: k, due: due, runAt: at}
			continue
		}
		if due {
			h.due = true
		} else if at.Before(h.runAt) {
			h.runAt = at
		}
	}
	if len(holds) < 2 {
		return nil
	}
	dist, err := s.Distributed(ctx, db)
	if err != nil || !dist {
		return err
	}
	return s.holdKeys(ctx, db, holds)
}

type keyQueue struct{ key, queue string }

// keyHold is one key and queue of a batch and the earliest run_at of its jobs.
type keyHold struct {
	keyQueue
	due   bool // a job of it is due at once, or its time is the database's: run_at NULL
	runAt time.Time
}

// holdKeys runs citus_key_lower and citus_key_hold for each of holds, in key order.
func (s *Store) holdKeys(ctx context.Context, db DBTX, holds map[keyQueue]*keyHold) error {
	order := make([]*keyHold, 0, len(holds))
	for _, h := range holds {
		order = append(order, h)
	}
	slices.SortFunc(order, func(a, b *keyHold) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.queue, b.queue))
	})
	args := func(h *keyHold) []any {
		if h.due {
			return []any{h.key, h.queue, nil}
		}
		return []any{h.key, h.queue, h.runAt}
	}
	if b, ok := db.(Batcher); ok {
		// One round trip; the statements still run one after the other, in order.
		var batch pgx.Batch
		for _, h := range order {
			batch.Queue(s.citusWork.keyLower.sql, args(h)...)
			batch.Queue(s.citusWork.keyHold.sql, args(h)...)
		}
		br := b.SendBatch(ctx, &batch)
		for range batch.Len() {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return fmt.Errorf("store: holding the key table's rows of %d keys: %w", len(order), err)
			}
		}
		if err := br.Close(); err != nil {
			return fmt.Errorf("store: holding the key table's rows of %d keys: %w", len(order), err)
		}
		return nil
	}
	for _, h := range order {
		for _, st := range []stmt{s.citusWork.keyLower, s.citusWork.keyHold} {
			if _, err := db.Exec(ctx, st.sql, args(h)...); err != nil {
				return fmt.Errorf("store: holding the key table's row of key %q, queue %q: %w", h.key, h.queue, err)
			}
		}
	}
	return nil
}
