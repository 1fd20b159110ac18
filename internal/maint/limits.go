package maint

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/store"
)

// LimitSweeper deletes the rate windows of buckets that started nothing within their
// period (and of limits that were deleted), so limit_windows holds a row per bucket
// that is active, not per concurrency key ever seen. A window it deletes holds no
// start the limited claim would count; a claim that logs a start meanwhile keeps its
// row (the DELETE rechecks the row it waited for).
type LimitSweeper struct {
	Store *store.Store
	// Every is the interval between runs.
	Every time.Duration
	// Clock supplies statement time; nil means the database's now().
	Clock interface{ Now() time.Time }
}

// LimitSweepResult reports one sweep.
type LimitSweepResult struct{ Deleted int64 }

// LogAttrs implements Result.
func (r LimitSweepResult) LogAttrs() []any { return []any{"deleted", r.Deleted} }

// Name implements Service.
func (s *LimitSweeper) Name() string { return "limit-sweeper" }

// Interval implements Service.
func (s *LimitSweeper) Interval() time.Duration { return s.Every }

// RunOnce implements Service.
func (s *LimitSweeper) RunOnce(ctx context.Context, tx pgx.Tx) (Result, error) {
	n, err := s.Store.LimitSweep(ctx, tx, store.NowParam(s.Clock))
	if err != nil {
		return LimitSweepResult{}, fmt.Errorf("sweeping rate windows: %w", err)
	}
	return LimitSweepResult{Deleted: n}, nil
}
