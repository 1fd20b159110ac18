package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/store"
)

// This file holds periodic jobs (docs/scheduling.md): schedules declared in Config
// and managed at run time, and the glue between the scheduler service
// (internal/maint/scheduler.go) and the client's enqueue path.

// MisfirePolicy says what a schedule does about fire times that passed more than
// Config.SchedulerMisfireGrace ago when the scheduler gets to them — after every
// client was down, or the clock jumped ahead. Fire times within the grace are on time
// and always fire, whatever the policy.
type MisfirePolicy string

const (
	// MisfireSkip drops missed fire times: the schedule goes on with the next one.
	MisfireSkip MisfirePolicy = "skip"
	// MisfireRunOnce enqueues one job for all the missed fire times (for the newest
	// of them), unless a fire time on time is due in the same run and stands for them.
	// The default.
	MisfireRunOnce MisfirePolicy = "run_once"
	// MisfireCatchUp enqueues one job per missed fire time, at most
	// PeriodicJob.MaxCatchUp of them (the newest).
	MisfireCatchUp MisfirePolicy = "catch_up"
)

// MisfirePolicies lists the valid misfire policies.
var MisfirePolicies = []MisfirePolicy{MisfireSkip, MisfireRunOnce, MisfireCatchUp}

// ScheduleSource tells where a schedule came from.
type ScheduleSource string

const (
	// ScheduleFromConfig schedules were declared in a client's Config.Periodic.
	ScheduleFromConfig ScheduleSource = "config"
	// ScheduleFromAPI schedules were added at run time (ScheduleAdd, the CLI).
	ScheduleFromAPI ScheduleSource = "api"
)

// Limits of a schedule's definition.
const (
	MaxScheduleNameLen = 128
	DefaultMaxCatchUp  = 100
	MaxMaxCatchUp      = 1000
	MaxScheduleJitter  = 24 * time.Hour
)

// Metadata keys of the jobs a schedule enqueues (see JobSchedule).
const (
	MetaSchedule = "skiplock.schedule"
	MetaFireTime = "skiplock.fire_time"
)

// ErrScheduleNotFound is returned for a schedule name that matches no schedule. It
// matches ErrNotFound too.
var ErrScheduleNotFound error = &notFoundError{"skiplock: schedule not found"}

// ErrBatchNotFound is returned for a batch id that matches no batch. It matches
// ErrNotFound too.
var ErrBatchNotFound error = &notFoundError{"skiplock: batch not found"}

// ErrScheduleExists is returned by ScheduleAdd for a name that is taken.
var ErrScheduleExists = errors.New("skiplock: schedule exists")

// PeriodicJob defines a schedule: a job to enqueue at every fire time of a cron spec.
// Declare schedules in Config.Periodic, or add them at run time with ScheduleAdd.
type PeriodicJob struct {
	// Name identifies the schedule: letters, digits, '_', '-' and '.', starting with a
	// letter or an underscore, at most MaxScheduleNameLen bytes. Required.
	Name string
	// Spec is when it fires: a cron spec of 5 fields (minute hour day-of-month month
	// day-of-week) or 6 (seconds first), a descriptor (@yearly, @monthly, @weekly,
	// @daily, @hourly) or @every <duration> (at least 1s, in whole seconds, counted
	// from when the schedule was added or resumed). Required.
	Spec string
	// Timezone is the IANA zone the spec's wall-clock times are in. Default "UTC".
	Timezone string
	// Args is the job's typed payload; its Kind is the job's kind. Or set Kind and
	// Payload instead.
	Args JobArgs
	// Kind and Payload are the job's kind and JSON payload when Args is nil. Payload
	// defaults to {}.
	Kind    string
	Payload []byte
	// Queue, Priority and MaxAttempts are the job's, as in EnqueueOpts. MaxAttempts 0
	// means the kind's WorkerOpts.MaxAttempts (else 8) in the client that fires it.
	Queue       string
	Priority    int
	MaxAttempts int
	// Misfire is what happens to fire times missed by more than the misfire grace.
	// Default MisfireRunOnce.
	Misfire MisfirePolicy
	// MaxCatchUp bounds MisfireCatchUp: the jobs one catch-up enqueues for missed
	// fire times, 1..MaxMaxCatchUp. Default DefaultMaxCatchUp.
	MaxCatchUp int
	// Jitter adds a random 0..Jitter to each job's run_at (never to the schedule's
	// fire times), spreading schedules that share a fire time. 0..MaxScheduleJitter.
	// Default 0.
	Jitter time.Duration
}

// Schedule is a schedule as stored: its definition and its state.
type Schedule struct {
	Name     string          `json:"name"`
	Spec     string          `json:"spec"`
	Timezone string          `json:"timezone"`
	Kind     string          `json:"kind"`
	Payload  json.RawMessage `json:"payload"`
	Queue    string          `json:"queue"`
	Priority int             `json:"priority"`
	// MaxAttempts is 0 for the kind's default.
	MaxAttempts int           `json:"max_attempts"`
	Misfire     MisfirePolicy `json:"misfire"`
	MaxCatchUp  int           `json:"max_catch_up"`
	Jitter      time.Duration `json:"jitter"`
	// Enabled is false while the schedule is paused.
	Enabled bool           `json:"enabled"`
	Source  ScheduleSource `json:"source"`
	// NextFireAt is the next fire time (zero when the spec has none left). While a
	// schedule is paused it is stale; ScheduleResume computes it anew.
	NextFireAt time.Time `json:"next_fire_at,omitzero"`
	// LastFireAt is the newest fire time the scheduler consumed, LastJobID the job
	// it enqueued for it, LastError why it enqueued none (empty after a fire that did).
	LastFireAt time.Time `json:"last_fire_at,omitzero"`
	LastJobID  string    `json:"last_job_id,omitempty"`
	LastError  string    `json:"last_error,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// PeriodicJob returns the schedule's definition, to change and pass to ScheduleUpdate.
func (s *Schedule) PeriodicJob() PeriodicJob {
	return PeriodicJob{Name: s.Name, Spec: s.Spec, Timezone: s.Timezone, Kind: s.Kind, Payload: s.Payload,
		Queue: s.Queue, Priority: s.Priority, MaxAttempts: s.MaxAttempts, Misfire: s.Misfire,
		MaxCatchUp: s.MaxCatchUp, Jitter: s.Jitter}
}

// ScheduleStats are the schedules' figures in Stats.
type ScheduleStats struct {
	Total, Enabled int64
	// NextFireAt is the soonest next fire time of the enabled schedules (zero: none).
	NextFireAt time.Time
}

// JobSchedule reports whether a schedule enqueued j, which one, and for which fire
// time (zero for a job ScheduleTrigger enqueued).
func JobSchedule(j *Job) (schedule string, fireTime time.Time, ok bool) {
	if j == nil || j.Metadata[MetaSchedule] == "" {
		return "", time.Time{}, false
	}
	at, _ := time.Parse(time.RFC3339, j.Metadata[MetaFireTime])
	return j.Metadata[MetaSchedule], at, true
}

// ScheduleAdd adds a schedule at run time (source ScheduleFromAPI); its first fire
// time is the spec's first after now. ErrScheduleExists if the name is taken.
func (c *Client) ScheduleAdd(ctx context.Context, p PeriodicJob) (*Schedule, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	now, err := c.scheduleNow(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	def, spec, err := c.scheduleDef(p, now)
	if err != nil {
		return nil, err
	}
	next := spec.Next(now)
	def.Enabled, def.Source, def.NextFireAt = true, store.ScheduleSourceAPI, &next
	row, err := c.store.ScheduleInsert(ctx, c.pool, store.NowParam(c.cfg.Clock), def)
	if err != nil {
		return nil, fmt.Errorf("adding schedule %q: %w", p.Name, wrapPgError(err))
	}
	if row == nil {
		return nil, fmt.Errorf("%w: %q (update it, or delete it first)", ErrScheduleExists, p.Name)
	}
	return fromScheduleRow(row), nil
}

// ScheduleUpdate replaces a schedule's definition by p (found by p.Name), keeping its
// state: paused or not, its source, its last fire. A new spec or time zone takes
// effect from now: the next fire time is the new spec's first after now (or after the
// last fire time, if that is later), so no fire time fires twice; otherwise the next
// fire time stays. A run of the scheduler in progress finishes with the old definition
// first (the update waits for its row lock). A schedule declared in Config keeps the
// edit until a client whose Config declares it differently starts.
// ErrScheduleNotFound if there is no such schedule.
func (c *Client) ScheduleUpdate(ctx context.Context, p PeriodicJob) (*Schedule, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	var out *Schedule
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		now, err := c.scheduleNow(ctx, tx)
		if err != nil {
			return err
		}
		def, spec, err := c.scheduleDef(p, now)
		if err != nil {
			return err
		}
		cur, err := c.store.ScheduleGet(ctx, tx, p.Name, true)
		if err != nil {
			return fmt.Errorf("updating schedule %q: %w", p.Name, wrapPgError(err))
		}
		if cur == nil {
			return fmt.Errorf("%w: %q", ErrScheduleNotFound, p.Name)
		}
		def.NextFireAt = rescheduled(cur, def, spec, now)
		row, err := c.store.ScheduleUpdate(ctx, tx, store.NowParam(c.cfg.Clock), def)
		if err != nil {
			return fmt.Errorf("updating schedule %q: %w", p.Name, wrapPgError(err))
		}
		out = fromScheduleRow(row)
		return nil
	})
	return out, err
}

// ScheduleGet returns one schedule. ErrScheduleNotFound if there is none of that name.
func (c *Client) ScheduleGet(ctx context.Context, name string) (*Schedule, error) {
	if err := checkScheduleName(ctx, name); err != nil {
		return nil, err
	}
	row, err := c.store.ScheduleGet(ctx, c.pool, name, false)
	return c.scheduleRow(name, "reading", row, err)
}

// ScheduleList lists every schedule by name.
func (c *Client) ScheduleList(ctx context.Context) ([]*Schedule, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	rows, err := c.store.ScheduleList(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("listing schedules: %w", wrapPgError(err))
	}
	out := make([]*Schedule, len(rows))
	for i, r := range rows {
		out[i] = fromScheduleRow(r)
	}
	return out, nil
}

// SchedulePause stops a schedule from firing, for every client, until ScheduleResume;
// the pause survives restarts (and the reconciliation of a declared schedule).
// Pausing a paused schedule does nothing. ErrScheduleNotFound if there is none.
func (c *Client) SchedulePause(ctx context.Context, name string) (*Schedule, error) {
	if err := checkScheduleName(ctx, name); err != nil {
		return nil, err
	}
	row, err := c.store.ScheduleSetState(ctx, c.pool, store.NowParam(c.cfg.Clock), name, false, nil)
	return c.scheduleRow(name, "pausing", row, err)
}

// ScheduleResume makes a paused schedule fire again, from its spec's first fire time
// after now: the fire times it was paused for are not made up. Resuming an enabled
// schedule does nothing. ErrScheduleNotFound if there is none.
func (c *Client) ScheduleResume(ctx context.Context, name string) (*Schedule, error) {
	if err := checkScheduleName(ctx, name); err != nil {
		return nil, err
	}
	var out *Schedule
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		cur, err := c.store.ScheduleGet(ctx, tx, name, true)
		if err != nil || cur == nil || cur.Enabled {
			out, err = c.scheduleRow(name, "resuming", cur, err)
			return err
		}
		now, err := c.scheduleNow(ctx, tx)
		if err != nil {
			return err
		}
		spec, err := maint.ParseSpec(cur.Spec, cur.Timezone)
		if err != nil {
			return fmt.Errorf("resuming schedule %q: %w", name, err)
		}
		next := nextAfter(spec, cur, now)
		row, err := c.store.ScheduleSetState(ctx, tx, store.NowParam(c.cfg.Clock), name, true, next)
		out, err = c.scheduleRow(name, "resuming", row, err)
		return err
	})
	return out, err
}

// ScheduleDelete deletes a schedule and returns it. Its jobs stay. A schedule declared
// in Config comes back when a client declaring it starts. ErrScheduleNotFound if
// there is none.
func (c *Client) ScheduleDelete(ctx context.Context, name string) (*Schedule, error) {
	if err := checkScheduleName(ctx, name); err != nil {
		return nil, err
	}
	row, err := c.store.ScheduleDelete(ctx, c.pool, name)
	return c.scheduleRow(name, "deleting", row, err)
}

// ScheduleTrigger enqueues a schedule's job now, outside its fire times (paused or
// not), through the ordinary enqueue path; the schedule itself is unchanged. The job
// has no deduplication key, so every trigger enqueues one. ErrScheduleNotFound if
// there is none.
func (c *Client) ScheduleTrigger(ctx context.Context, name string) (EnqueueResult, error) {
	if err := checkScheduleName(ctx, name); err != nil {
		return EnqueueResult{}, err
	}
	row, err := c.store.ScheduleGet(ctx, c.pool, name, false)
	s, err := c.scheduleRow(name, "triggering", row, err)
	if err != nil {
		return EnqueueResult{}, err
	}
	return c.EnqueueRawTx(ctx, c.pool, s.Kind, s.Payload, &EnqueueOpts{Queue: s.Queue, Priority: s.Priority,
		MaxAttempts: s.MaxAttempts, Metadata: map[string]string{MetaSchedule: s.Name}})
}
