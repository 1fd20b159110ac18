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
}

// QueuePause pauses a queue for every client: from their next claim on — at once for
// a client woken by a NOTIFY, within one PollInterval otherwise — no client claims
// its jobs. Running jobs finish; enqueueing still works; a queue no client serves yet
// can be paused too. The pause is stored in the database, so it survives restarts
// and deploys until QueueResume. Pausing a paused queue keeps its first pause time.
func (c *Client) QueuePause(ctx context.Context, queue string) error {
	if err := checkQueue(ctx, queue); err != nil {
		return err
	}
	if _, err := c.store.QueuePause(ctx, c.pool, store.NowParam(c.cfg.Clock), queue); err != nil {
		return fmt.Errorf("pausing queue %q: %w", queue, wrapPgError(err))
	}
	return nil
}

// QueueResume resumes a paused queue and wakes the clients that work it (a NOTIFY
// at commit; polling catches up otherwise). Resuming an active queue does nothing.
func (c *Client) QueueResume(ctx context.Context, queue string) error {
	if err := checkQueue(ctx, queue); err != nil {
		return err
	}
	if err := c.store.QueueResume(ctx, c.pool, store.NowParam(c.cfg.Clock), queue, c.channel); err != nil {
		return fmt.Errorf("resuming queue %q: %w", queue, wrapPgError(err))
	}
	return nil
}

// QueueList lists the queues that have settings (today: that were ever paused),
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
		out[i] = QueueInfo{Name: r.Name, UpdatedAt: r.UpdatedAt}
		if r.PausedAt != nil {
			out[i].Paused, out[i].PausedAt = true, *r.PausedAt
		}
	}
	return out, nil
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
