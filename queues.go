package skiplock

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/store"
)

// QueueInfo is a queue's cluster-wide settings.
type QueueInfo struct {
	Name string `json:"name"`
	// Paused is true while no client claims the queue's jobs.
	Paused bool `json:"paused"`
	// PausedAt is when the queue was paused (zero when it is not).
	PausedAt time.Time `json:"paused_at,omitzero"`
	// UpdatedAt is when its settings last changed.
	UpdatedAt time.Time `json:"updated_at"`
	// Fair is true when claims take the due jobs of the queue's concurrency keys in
	// turn (QueueSetFair, docs/fairness.md).
	Fair bool `json:"fair,omitempty"`
	// FairBypassPriority is the fair queue's bypass priority (FairOpts), nil for none.
	FairBypassPriority *int `json:"fair_bypass_priority,omitempty"`
}

// ErrQueueNotFound is returned by QueuePause and QueueResume for a queue that
// nothing names: no setting, schedule, limit or unfinished job, nor this client's
// Config.Queues. It matches ErrNotFound too. A misspelt name is the usual cause; to
// pause a queue before its first job, use QueuePauseAhead.
var ErrQueueNotFound error = &notFoundError{"skiplock: queue not found"}

// QueuePause pauses a queue for every client: from their next claim on — at once for
// a client woken by a NOTIFY, within one PollInterval otherwise — no client claims
// its jobs. Running jobs finish; enqueueing still works. The pause is stored in the
// database, so it survives restarts and deploys until QueueResume. Pausing a paused
// queue keeps its first pause time. A queue nothing names (see ErrQueueNotFound) is
// refused, so that a misspelt name does not pause a queue no job uses; pause one
// ahead of its first job with QueuePauseAhead.
func (c *Client) QueuePause(ctx context.Context, queue string) error {
	if err := c.checkKnownQueue(ctx, queue, "pausing"); err != nil {
		return err
	}
	return c.QueuePauseAhead(ctx, queue)
}

// QueuePauseAhead pauses a queue as QueuePause does, also one that nothing names
// yet: its jobs will wait from the first one on.
func (c *Client) QueuePauseAhead(ctx context.Context, queue string) error {
	if err := checkQueue(ctx, queue); err != nil {
		return err
	}
	if _, err := c.store.QueuePause(ctx, c.pool, store.NowParam(c.cfg.Clock), queue); err != nil {
		return fmt.Errorf("pausing queue %q: %w", queue, wrapPgError(err))
	}
	return nil
}

// QueueResume resumes a paused queue and wakes the clients that work it (a NOTIFY
// at commit; polling catches up otherwise). Resuming an active queue does nothing
// and returns nil; a queue nothing names is refused with ErrQueueNotFound.
func (c *Client) QueueResume(ctx context.Context, queue string) error {
	if err := c.checkKnownQueue(ctx, queue, "resuming"); err != nil {
		return err
	}
	if err := c.store.QueueResume(ctx, c.pool, store.NowParam(c.cfg.Clock), queue, c.channel); err != nil {
		return fmt.Errorf("resuming queue %q: %w", queue, wrapPgError(err))
	}
	return nil
}

// checkKnownQueue checks the arguments of a queue verb and that something names the
// queue (ErrQueueNotFound otherwise); verb says what was being done, for the error.
func (c *Client) checkKnownQueue(ctx context.Context, queue, verb string) error {
	if err := checkQueue(ctx, queue); err != nil {
		return err
	}
	if _, ok := c.cfg.Queues[queue]; ok {
		return nil
	}
	known, err := c.store.QueueKnown(ctx, c.pool, queue)
	if err != nil {
		return fmt.Errorf("%s queue %q: %w", verb, queue, wrapPgError(err))
	}
	if !known {
		return fmt.Errorf("%s queue %q: %w: no setting, schedule, limit or unfinished job names it (misspelt?)", verb, queue, ErrQueueNotFound)
	}
	return nil
}

// QueueList lists the queues that have settings (that were ever paused or made fair),
// paused or not, by name. A queue that is not listed is active.
func (c *Client) QueueList(ctx context.Context) ([]QueueInfo, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	rows, err := c.store.QueueSettings(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("listing queues: %w", wrapPgError(err))
	}
	out := make([]QueueInfo, len(rows))
	for i, r := range rows {
		out[i] = QueueInfo{Name: r.Name, UpdatedAt: r.UpdatedAt, Fair: r.Fair, FairBypassPriority: r.FairBypassPriority}
		if r.PausedAt != nil {
			out[i].Paused, out[i].PausedAt = true, *r.PausedAt
		}
	}
	return out, nil
}

// QueueGet returns a queue's settings: Paused and PausedAt for a paused queue, the
// zero settings for an active one. ErrQueueNotFound when nothing names the queue (no
// setting, schedule, limit or unfinished job, nor this client's Config.Queues).
func (c *Client) QueueGet(ctx context.Context, queue string) (QueueInfo, error) {
	if err := c.checkKnownQueue(ctx, queue, "reading"); err != nil {
		return QueueInfo{}, err
	}
	settings, err := c.QueueList(ctx)
	if err != nil {
		return QueueInfo{}, err
	}
	for _, q := range settings {
		if q.Name == queue {
			return q, nil
		}
	}
	return QueueInfo{Name: queue}, nil
}

func checkQueue(ctx context.Context, queue string) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	if err := ident.ValidateQueue(queue); err != nil {
		return invalid("queue", "%v", err)
	}
	return nil
}
