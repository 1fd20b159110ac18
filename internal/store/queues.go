package store

// Queue settings: pause and resume, and the listing of configured queues.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

type queueStatements struct {
	pause, resume, list, known stmt
}

func newQueueStatements(b *builder) queueStatements {
	return queueStatements{
		// Pausing keeps the first pause time when the queue is paused already.
		pause: b.add("queue_pause", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
INSERT INTO {{s}}.queues AS q (name, paused_at, updated_at)
SELECT $2, t.now, t.now FROM t
ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(q.paused_at, excluded.paused_at), updated_at = excluded.updated_at
RETURNING q.paused_at`),

		// Resuming wakes every client working the queue with the same NOTIFY an
		// enqueue sends ($3 the jobs channel), delivered at commit.
		resume: b.add("queue_resume", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
u AS (
  UPDATE {{s}}.queues AS q SET paused_at = NULL, updated_at = t.now
  FROM t WHERE q.name = $2
  RETURNING q.name
)
SELECT count(*), (SELECT pg_notify($3, $2)::text) IS NULL FROM u`),

		list: b.add("queue_list", `SELECT name, paused_at, updated_at, fair, fair_bypass_priority FROM {{s}}.queues ORDER BY name`),

		// A queue is known when something names it: a setting, a schedule, a limit,
		// or a job that is not finished yet. Each probe reads an index (the running
		// jobs through the reclaimer's partial index, bounded by how many run), so a
		// misspelt name on a large table costs a few index probes, not a scan.
		known: b.addGuarded(planGuardOn, "queue_known", `
SELECT EXISTS (SELECT 1 FROM {{s}}.queues WHERE name = $1)
    OR EXISTS (SELECT 1 FROM {{s}}.schedules WHERE queue = $1)
    OR EXISTS (SELECT 1 FROM {{s}}.limits WHERE scope = 'queue' AND target = $1)
    OR EXISTS (SELECT 1 FROM {{s}}.jobs WHERE queue = $1 AND status = 'pending')
    OR EXISTS (SELECT 1 FROM {{s}}.jobs WHERE queue = $1 AND status > 'cancelled')
    OR EXISTS (SELECT 1 FROM {{s}}.jobs WHERE queue = $1 AND status = 'running')`),
	}
}

// QueueSetting is a row of the queues table.
type QueueSetting struct {
	Name      string
	PausedAt  *time.Time
	UpdatedAt time.Time
	// Fair and FairBypassPriority: fairclaim.go.
	Fair               bool
	FairBypassPriority *int
}

// QueuePause pauses a queue and returns when it was first paused.
func (s *Store) QueuePause(ctx context.Context, db DBTX, now *time.Time, name string) (time.Time, error) {
	var at time.Time
	err := db.QueryRow(ctx, s.queues.pause.sql, Now(now), name).Scan(&at)
	return at, err
}

// QueueResume resumes a queue (a no-op for one that is not paused) and notifies
// channel with the queue's name so idle producers claim at once.
func (s *Store) QueueResume(ctx context.Context, db DBTX, now *time.Time, name, channel string) error {
	var n int64
	var notified bool
	return db.QueryRow(ctx, s.queues.resume.sql, Now(now), name, channel).Scan(&n, &notified)
}

// QueueSettings lists the configured queues.
func (s *Store) QueueSettings(ctx context.Context, db DBTX) ([]QueueSetting, error) {
	rows, err := db.Query(ctx, s.queues.list.sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []QueueSetting
	for rows.Next() {
		var q QueueSetting
		if err := rows.Scan(&q.Name, &q.PausedAt, &q.UpdatedAt, &q.Fair, &q.FairBypassPriority); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// QueueKnown reports whether a setting, a schedule, a limit or an unfinished job
// names the queue.
func (s *Store) QueueKnown(ctx context.Context, db DBTX, name string) (bool, error) {
	return guardedRow(ctx, db, s.queues.known, func(r pgx.Row) (bool, error) {
		var known bool
		err := r.Scan(&known)
		return known, err
	}, name)
}
