package bench

import "context"

// runW8 measures the outbox relay (see internal/outboxbench).
func runW8(ctx context.Context, e *Env) (*Result, error) {
	return &Result{Workload: "W8", Settings: e.Settings, Verified: "not yet wired"}, nil
}
