package maint

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/store"
)

// LaneSettler completes a queue made fair whose settle did not run (migration 0024):
// the client that made it fair stopped between its commit and its settle, or its
// settle was cancelled, or the queue was made fair by SQL. Until a settle, a job that
// an insert racing the change left out of jobs_fair_idx is not claimed; the settle
// waits for the transactions that may hold such inserts and marks their jobs. A run
// costs one read of the queues table when every fair queue is settled.
type LaneSettler struct {
	Store *store.Store
	// Every is the interval between runs.
	Every time.Duration
}

// LaneSettleResult reports one run: whether a settle ran, and the jobs it marked.
type LaneSettleResult struct {
	Settled bool
	Marked  int64
}

// LogAttrs implements Result.
func (r LaneSettleResult) LogAttrs() []any { return []any{"settled", r.Settled, "marked", r.Marked} }

// Name implements Service.
func (s *LaneSettler) Name() string { return "lane-settler" }

// Interval implements Service.
func (s *LaneSettler) Interval() time.Duration { return s.Every }

// RunOnce implements Service.
func (s *LaneSettler) RunOnce(ctx context.Context, tx pgx.Tx) (Result, error) {
	ran, n, err := s.Store.LanesHeal(ctx, tx)
	if err != nil {
		return LaneSettleResult{}, fmt.Errorf("settling the queues made fair: %w", err)
	}
	return LaneSettleResult{Settled: ran, Marked: n}, nil
}
