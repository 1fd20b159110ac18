// Package lifecycle holds what the client's and the relay's Start/Stop share: ending
// the context given to Start is a graceful stop bounded by a timeout.
package lifecycle

import (
	"context"
	"time"
)

// StopWhenDone waits until ctx ends or stopped is closed. When ctx ends first, it
// calls stop with a context that ends after timeout, and late when stop returns an
// error (the timeout cut the drain short). Run it in its own goroutine from Start.
func StopWhenDone(ctx context.Context, stopped <-chan struct{}, timeout time.Duration, stop func(context.Context) error, late func()) {
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := stop(sctx); err != nil {
			late()
		}
	case <-stopped:
	}
}
