package store

import (
	"context"
	"time"
)

// DefaultDepthCap is the most due jobs QueueDepth counts before it stops: the
// queue_depth function's default cap (migration 0015).
const DefaultDepthCap = 10000

// depthStatements call the SQL function queue_depth (migration 0015), the one body
// an autoscaler's query and the Go client share; TestQueueDepthPlanIsBounded plans
// that body.
type depthStatements struct {
	depth stmt
}

func newDepthStatements(b *builder) depthStatements {
	return depthStatements{
		depth: b.add("queue_depth", `SELECT {{s}}.queue_depth($1::text, $2::bigint, $3::timestamptz)`),
	}
}

// QueueDepth returns the number of due jobs (pending, run_at <= now) of queue (""
// for all queues), counting at most limit of them: min(due, limit).
func (s *Store) QueueDepth(ctx context.Context, db DBTX, queue string, limit int64, now *time.Time) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, s.depth.depth.sql, nullable(queue), limit, Now(now)).Scan(&n)
	return n, err
}
