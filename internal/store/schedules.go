package store

// Periodic schedules (migration 0008): the operator's verbs, the reconciliation of
// schedules declared in code, and the scheduler service's scan and advance. Fire times
// are computed in Go; these statements store them and compare them with the
// statement's time.

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Schedule sources: declared in a client's Config, or added at run time.
const (
	ScheduleSourceConfig = "config"
	ScheduleSourceAPI    = "api"
)

type scheduleStatements struct {
	insert, update, setState, get, getForUpdate, list, delete, deleteUndeclared stmt
	due, advance, stats                                                         stmt
}

// scheduleColumns lists what statements returning schedules select, in scanSchedule's order.
const scheduleColumns = `name, spec, timezone, kind, payload, queue, priority, max_attempts, misfire, max_catch_up,
  jitter_us, enabled, source, next_fire_at, last_fire_at, last_job_id, last_error, created_at, updated_at`

func newScheduleStatements(b *builder) scheduleStatements {
	return scheduleStatements{
		// A name that exists inserts nothing (and returns no row).
		insert: b.add("schedule_insert", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
INSERT INTO {{s}}.schedules AS s (name, spec, timezone, kind, payload, queue, priority, max_attempts, misfire,
  max_catch_up, jitter_us, enabled, source, next_fire_at, created_at, updated_at)
SELECT $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14, $15, t.now, t.now FROM t
ON CONFLICT (name) DO NOTHING
RETURNING `+scheduleColumns),

		// Rewrites a schedule's definition and its next fire time; $13 (the source)
		// NULL keeps the row's. (t has one column, now, so the bare column names of
		// RETURNING are the row's.) Timing state (last fire, last job) is kept.
		update: b.add("schedule_update", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.schedules AS s
SET spec = $3, timezone = $4, kind = $5, payload = $6::jsonb, queue = $7, priority = $8, max_attempts = $9,
    misfire = $10, max_catch_up = $11, jitter_us = $12, source = coalesce($13, s.source), next_fire_at = $14,
    updated_at = t.now
FROM t
WHERE s.name = $2
RETURNING `+scheduleColumns),

		// Pause ($3 false) or resume ($3 true, with the next fire time $4 computed from
		// now). A schedule already in that state is returned unchanged.
		setState: b.add("schedule_set_state", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.schedules AS s
SET enabled = $3,
    next_fire_at = CASE WHEN $3 AND NOT s.enabled THEN $4::timestamptz ELSE s.next_fire_at END,
    updated_at = CASE WHEN s.enabled <> $3 THEN t.now ELSE s.updated_at END
FROM t
WHERE s.name = $2
RETURNING `+scheduleColumns),

		get:          b.add("schedule_get", `SELECT `+scheduleColumns+` FROM {{s}}.schedules WHERE name = $1`),
		getForUpdate: b.add("schedule_get_for_update", `SELECT `+scheduleColumns+` FROM {{s}}.schedules WHERE name = $1 FOR UPDATE`),
		list:         b.add("schedule_list", `SELECT `+scheduleColumns+` FROM {{s}}.schedules ORDER BY name`),
		delete:       b.add("schedule_delete", `DELETE FROM {{s}}.schedules WHERE name = $1 RETURNING `+scheduleColumns),

		// Schedules a client's Config declared before and declares no more; those added
		// at run time (source 'api') are never removed here.
		deleteUndeclared: b.add("schedule_delete_undeclared", `
DELETE FROM {{s}}.schedules WHERE source = 'config' AND name <> ALL ($1::text[]) RETURNING name`),

		// The scheduler's scan, inside its run's transaction: due rows are locked, so an
		// operator's edit of one waits for the run to commit, and a run that does not
		// hold the service's advisory lock (there should be none) would wait here and
		// then find next_fire_at advanced (the row is re-checked after the wait).
		due: b.add("schedule_due", `
SELECT `+scheduleColumns+`
FROM {{s}}.schedules
WHERE enabled AND next_fire_at <= $1::timestamptz
ORDER BY next_fire_at, name
LIMIT $2
FOR UPDATE`),

		// The outcome of one run for every schedule it looked at, in one statement:
		// the next fire time, and — when a fire time was consumed — the last fire time,
		// the job it inserted or why it inserted none.
		advance: b.add("schedule_advance", `
UPDATE {{s}}.schedules AS s
SET next_fire_at = u.next,
    last_fire_at = coalesce(u.last_fire, s.last_fire_at),
    last_job_id = coalesce(u.job_id, s.last_job_id),
    last_error = CASE WHEN u.job_id IS NOT NULL THEN NULL ELSE coalesce(u.err, s.last_error) END
FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::uuid[], $5::text[])
     AS u(name, next, last_fire, job_id, err)
WHERE s.name = u.name`),

		// Stats: one pass over a table of (typically) a few dozen rows.
		stats: b.add("schedule_stats", `
SELECT count(*), count(*) FILTER (WHERE enabled), min(next_fire_at) FILTER (WHERE enabled)
FROM {{s}}.schedules`),
	}
}

// Schedule is a row of the schedules table (and the definition a write takes).
type Schedule struct {
	Name        string
	Spec        string
	Timezone    string
	Kind        string
	Payload     []byte
	Queue       string
	Priority    int
	MaxAttempts int // 0: the kind's default when it fires
	Misfire     string
	MaxCatchUp  int
	Jitter      time.Duration
	Enabled     bool
	Source      string
	NextFireAt  *time.Time
	LastFireAt  *time.Time
	LastJobID   *string
	LastError   *string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

func scanSchedule(row pgx.Row) (*Schedule, error) {
	var s Schedule
	var jitterUS int64
	err := row.Scan(&s.Name, &s.Spec, &s.Timezone, &s.Kind, &s.Payload, &s.Queue, &s.Priority, &s.MaxAttempts,
		&s.Misfire, &s.MaxCatchUp, &jitterUS, &s.Enabled, &s.Source, &s.NextFireAt, &s.LastFireAt, &s.LastJobID,
		&s.LastError, &s.CreatedAt, &s.UpdatedAt)
	if err != nil {
		return nil, err
	}
	s.Jitter = time.Duration(jitterUS) * time.Microsecond
	return &s, nil
}

// oneSchedule scans a statement's only row; (nil, nil) when it returned none.
func oneSchedule(row pgx.Row) (*Schedule, error) {
	s, err := scanSchedule(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return s, err
}

// ScheduleInsert adds a schedule; (nil, nil) when one of that name exists.
func (s *Store) ScheduleInsert(ctx context.Context, db DBTX, now *time.Time, d *Schedule) (*Schedule, error) {
	return oneSchedule(db.QueryRow(ctx, s.schedules.insert.sql, Now(now), d.Name, d.Spec, d.Timezone, d.Kind,
		string(d.Payload), d.Queue, d.Priority, d.MaxAttempts, d.Misfire, d.MaxCatchUp, micros(d.Jitter), d.Enabled,
		d.Source, d.NextFireAt))
}

// ScheduleUpdate rewrites a schedule's definition and next fire time (an empty
// d.Source keeps the row's source); (nil, nil) when there is no such schedule.
func (s *Store) ScheduleUpdate(ctx context.Context, db DBTX, now *time.Time, d *Schedule) (*Schedule, error) {
	return oneSchedule(db.QueryRow(ctx, s.schedules.update.sql, Now(now), d.Name, d.Spec, d.Timezone, d.Kind,
		string(d.Payload), d.Queue, d.Priority, d.MaxAttempts, d.Misfire, d.MaxCatchUp, micros(d.Jitter),
		nullable(d.Source), d.NextFireAt))
}

// ScheduleSetState pauses (enabled false) or resumes a schedule; a resumed one gets
// next as its next fire time. (nil, nil) when there is no such schedule.
func (s *Store) ScheduleSetState(ctx context.Context, db DBTX, now *time.Time, name string, enabled bool, next *time.Time) (*Schedule, error) {
	return oneSchedule(db.QueryRow(ctx, s.schedules.setState.sql, Now(now), name, enabled, next))
}

// ScheduleGet reads one schedule, locking it FOR UPDATE when forUpdate (inside a
// transaction); (nil, nil) when there is no such schedule.
func (s *Store) ScheduleGet(ctx context.Context, db DBTX, name string, forUpdate bool) (*Schedule, error) {
	st := s.schedules.get
	if forUpdate {
		st = s.schedules.getForUpdate
	}
	return oneSchedule(db.QueryRow(ctx, st.sql, name))
}

// ScheduleList lists every schedule by name.
func (s *Store) ScheduleList(ctx context.Context, db DBTX) ([]*Schedule, error) {
	rows, err := db.Query(ctx, s.schedules.list.sql)
	return collect(rows, err, scanSchedule)
}

// ScheduleDelete deletes a schedule and returns it; (nil, nil) when there was none.
func (s *Store) ScheduleDelete(ctx context.Context, db DBTX, name string) (*Schedule, error) {
	return oneSchedule(db.QueryRow(ctx, s.schedules.delete.sql, name))
}

// ScheduleDeleteUndeclared deletes the schedules of source 'config' whose names are
// not in declared, and returns their names.
func (s *Store) ScheduleDeleteUndeclared(ctx context.Context, db DBTX, declared []string) ([]string, error) {
	if declared == nil {
		declared = []string{}
	}
	rows, err := db.Query(ctx, s.schedules.deleteUndeclared.sql, declared)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ScheduleDue locks and returns up to limit enabled schedules whose next fire time is
// at or before now, oldest first. db must be a transaction.
func (s *Store) ScheduleDue(ctx context.Context, db DBTX, now time.Time, limit int) ([]*Schedule, error) {
	rows, err := db.Query(ctx, s.schedules.due.sql, now.UTC(), limit)
	return collect(rows, err, scanSchedule)
}

// ScheduleAdvance is what one scheduler run did with one schedule.
type ScheduleAdvance struct {
	Name     string
	Next     *time.Time // nil: the spec has no fire time left
	LastFire *time.Time // the newest fire time consumed; nil: none (the row keeps its own)
	JobID    *string    // the job of LastFire (inserted, or holding its deduplication key)
	Err      *string    // why LastFire inserted no job
}

// ScheduleAdvance writes a run's outcomes in one statement.
func (s *Store) ScheduleAdvance(ctx context.Context, db DBTX, adv []ScheduleAdvance) error {
	if len(adv) == 0 {
		return nil
	}
	n := len(adv)
	names, errs := make([]string, n), make([]*string, n)
	nexts, lasts := make([]*time.Time, n), make([]*time.Time, n)
	jobs := make([]*string, n)
	for i, a := range adv {
		names[i], nexts[i], lasts[i], jobs[i], errs[i] = a.Name, a.Next, a.LastFire, a.JobID, a.Err
	}
	_, err := db.Exec(ctx, s.schedules.advance.sql, names, nexts, lasts, jobs, errs)
	return err
}

// ScheduleCounts are the schedules' figures for Stats.
type ScheduleCounts struct {
	Total, Enabled int64
	NextFireAt     *time.Time // the soonest of the enabled schedules; nil when none
}

// ScheduleStats counts the schedules and finds the soonest next fire time.
func (s *Store) ScheduleStats(ctx context.Context, db DBTX) (ScheduleCounts, error) {
	var c ScheduleCounts
	err := db.QueryRow(ctx, s.schedules.stats.sql).Scan(&c.Total, &c.Enabled, &c.NextFireAt)
	return c, err
}
