package store

import (
	"context"
	"time"
)

// QueueStats are one queue's figures.
type QueueStats struct {
	Queue                                               string
	Pending, Due, Running, Succeeded, Failed, Cancelled int64
	ExpiredLeases                                       int64
	OldestDueAge                                        time.Duration // 0 when nothing is due
}

// Stats returns per-queue figures. Finished-state counts come from the partial
// retention index; pending and running from their partial indexes.
func (s *Store) Stats(ctx context.Context, db DBTX, now *time.Time) ([]QueueStats, error) {
	rows, err := db.Query(ctx, `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
SELECT queue,
       count(*) FILTER (WHERE status = 'pending'),
       count(*) FILTER (WHERE status = 'pending' AND run_at <= t.now),
       count(*) FILTER (WHERE status = 'running'),
       count(*) FILTER (WHERE status = 'succeeded'),
       count(*) FILTER (WHERE status = 'failed'),
       count(*) FILTER (WHERE status = 'cancelled'),
       count(*) FILTER (WHERE status = 'running' AND lease_until < t.now),
       coalesce(extract(epoch FROM t.now - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= t.now)), 0)
FROM `+s.q+`.jobs, t
GROUP BY queue, t.now
ORDER BY queue`, Now(now))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []QueueStats
	for rows.Next() {
		var q QueueStats
		var age float64
		if err := rows.Scan(&q.Queue, &q.Pending, &q.Due, &q.Running, &q.Succeeded, &q.Failed, &q.Cancelled, &q.ExpiredLeases, &age); err != nil {
			return nil, err
		}
		q.OldestDueAge = time.Duration(age * float64(time.Second))
		out = append(out, q)
	}
	return out, rows.Err()
}
