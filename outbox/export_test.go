package outbox

import "context"

// SetBeforeMark installs a hook that runs between publish and mark; an error skips
// the mark, as a crash at that point would.
func SetBeforeMark(r *Relay, fn func(ctx context.Context) error) { r.beforeMark = fn }
