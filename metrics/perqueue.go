package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
)

// perQueue is a collector's last read of a figure per queue, read again only once it
// is older than a minimum interval: the depth and fair collectors' cache.
type perQueue[T any] struct {
	mu   sync.Mutex
	last time.Time
	vals map[string]T
	ok   bool
}

// get returns the values and whether every read succeeded, calling read (under a
// context bounded by timeout) when the last values are older than minInterval. read
// fills vals and returns false when any of its reads failed.
func (p *perQueue[T]) get(ctx context.Context, minInterval, timeout time.Duration, read func(ctx context.Context, vals map[string]T) bool) (map[string]T, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := hostclock.Now() // paces the reads only
	if p.vals != nil && now.Sub(p.last) < minInterval {
		return p.vals, p.ok
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p.vals, p.last = map[string]T{}, now
	p.ok = read(ctx, p.vals)
	return p.vals, p.ok
}
