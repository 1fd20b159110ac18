package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/store"
)

// This file connects the schedules to the runtime: the scheduler maintenance
// service, how its fires are enqueued, and the reconciliation of Config.Periodic.

// scheduleStats reads Stats' schedule figures (one statement).
func (c *Client) scheduleStats(ctx context.Context) (ScheduleStats, error) {
	n, err := c.store.ScheduleStats(ctx, c.pool)
	if err != nil {
		return ScheduleStats{}, fmt.Errorf("reading schedule stats: %w", wrapPgError(err))
	}
	s := ScheduleStats{Total: n.Total, Enabled: n.Enabled}
	if n.NextFireAt != nil {
		s.NextFireAt = *n.NextFireAt
	}
	return s, nil
}

// schedulerServices returns the scheduler service, or none when
// Config.SchedulerInterval disables it.
func (c *Client) schedulerServices() []maint.Service {
	if c.cfg.SchedulerInterval <= 0 {
		return nil
	}
	return []maint.Service{c.scheduler()}
}

func (c *Client) scheduler() *maint.Scheduler {
	s := &maint.Scheduler{Store: c.store, Every: c.cfg.SchedulerInterval, Clock: c.cfg.Clock,
		Grace: c.cfg.SchedulerMisfireGrace, Enqueue: c.enqueueFires,
		Refused: func(name string, err error) {
			c.failures.notice("schedule:"+name, "skiplock: a schedule's fire enqueued no job (recorded as its last_error)",
				"schedule", name, "error", err)
		}}
	if len(c.cfg.Periodic) > 0 || c.cfg.PeriodicRemoveUndeclared {
		s.Reconcile = c.reconcileSchedules
	}
	return s
}

// enqueueFires inserts the jobs of a run's fires through EnqueueManyTx: hooks,
// validation, deduplication and NOTIFY as for any job.
func (c *Client) enqueueFires(ctx context.Context, tx pgx.Tx, fires []maint.Fire) ([]store.InsertResult, error) {
	ps := make([]EnqueueParams, len(fires))
	for i, f := range fires {
		s := f.Schedule
		ps[i] = EnqueueParams{Kind: s.Kind, Payload: s.Payload, Opts: EnqueueOpts{Queue: s.Queue, Priority: s.Priority,
			MaxAttempts: s.MaxAttempts, RunAt: f.RunAt, DeduplicationKey: f.DedupKey,
			Metadata: map[string]string{MetaSchedule: s.Name, MetaFireTime: f.At.UTC().Format(time.RFC3339)}}}
	}
	res, err := c.EnqueueManyTx(ctx, tx, ps)
	if err != nil {
		var pgErr *pgconn.PgError
		switch {
		case ctx.Err() != nil:
		case errors.As(err, &pgErr):
			if !pgerr.Retryable(err) {
				err = &maint.RefusedError{Err: err}
			}
		case !tx.Conn().IsClosed():
			// A hook or validation refused it, or the database refused its text:
			// the connection is fine, so it was the job, not the database.
			err = &maint.RefusedError{Err: err}
		}
		return nil, err
	}
	out := make([]store.InsertResult, len(res))
	for i, r := range res {
		out[i] = store.InsertResult{ID: r.ID, Inserted: !r.Duplicate}
	}
	return out, nil
}

// reconcileSchedules writes Config.Periodic to the schedules table in one transaction:
// declared schedules that are missing are added, those whose definition differs are
// updated (taking ownership of a same-named schedule added at run time), and — with
// PeriodicRemoveUndeclared — schedules declared before but no longer are deleted.
// A schedule's paused state is left alone.
func (c *Client) reconcileSchedules(ctx context.Context) error {
	var added, updated int
	var removed []string
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		added, updated, removed = 0, 0, nil
		now, err := c.scheduleNow(ctx, tx)
		if err != nil {
			return err
		}
		rows, err := c.store.ScheduleList(ctx, tx)
		if err != nil {
			return err
		}
		have := map[string]*store.Schedule{}
		for _, r := range rows {
			have[r.Name] = r
		}
		names := make([]string, 0, len(c.cfg.Periodic))
		for _, p := range c.cfg.Periodic {
			names = append(names, p.Name)
			def, spec, err := c.scheduleDef(p, now)
			if err != nil {
				return err // validated by NewClient; cannot happen
			}
			def.Source = store.ScheduleSourceConfig
			cur := have[p.Name]
			if cur == nil {
				next := spec.Next(now)
				def.Enabled, def.NextFireAt = true, &next
				row, err := c.store.ScheduleInsert(ctx, tx, store.NowParam(c.cfg.Clock), def)
				if err != nil {
					return fmt.Errorf("adding schedule %q: %w", p.Name, err)
				}
				if row != nil {
					added++
					continue
				}
				// Added at run time since we listed: take it over below.
				if cur, err = c.store.ScheduleGet(ctx, tx, p.Name, true); err != nil {
					return fmt.Errorf("reading schedule %q: %w", p.Name, err)
				}
				if cur == nil {
					return fmt.Errorf("schedule %q was added and deleted while being declared; retrying", p.Name)
				}
			}
			if sameDefinition(cur, def) {
				continue
			}
			def.NextFireAt = rescheduled(cur, def, spec, now)
			if _, err := c.store.ScheduleUpdate(ctx, tx, store.NowParam(c.cfg.Clock), def); err != nil {
				return fmt.Errorf("updating schedule %q: %w", p.Name, err)
			}
			updated++
		}
		if c.cfg.PeriodicRemoveUndeclared {
			if removed, err = c.store.ScheduleDeleteUndeclared(ctx, tx, names); err != nil {
				return fmt.Errorf("removing undeclared schedules: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return wrapPgError(err)
	}
	if added+updated+len(removed) > 0 {
		c.log.Info("skiplock: declared schedules written", "added", added, "updated", updated, "removed", removed)
	}
	return nil
}

// sameDefinition reports whether a stored schedule already has def's definition and
// source (payloads compared as JSON values: jsonb does not keep the text).
func sameDefinition(cur, def *store.Schedule) bool {
	if cur.Spec != def.Spec || cur.Timezone != def.Timezone || cur.Kind != def.Kind || cur.Queue != def.Queue ||
		cur.Priority != def.Priority || cur.MaxAttempts != def.MaxAttempts || cur.Misfire != def.Misfire ||
		cur.MaxCatchUp != def.MaxCatchUp || cur.Jitter != def.Jitter || cur.Source != def.Source {
		return false
	}
	var a, b any
	if json.Unmarshal(cur.Payload, &a) != nil || json.Unmarshal(def.Payload, &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// rescheduled is the next fire time of cur once def replaces its definition: unchanged
// unless the spec or the time zone changed, else the new spec's first after now (or
// after the last fire, if later).
func rescheduled(cur, def *store.Schedule, spec *maint.Spec, now time.Time) *time.Time {
	if cur.Spec == def.Spec && cur.Timezone == def.Timezone && cur.NextFireAt != nil {
		return cur.NextFireAt
	}
	return nextAfter(spec, cur, now)
}

// nextAfter is spec's first fire time after now and after cur's last fire; nil if none.
func nextAfter(spec *maint.Spec, cur *store.Schedule, now time.Time) *time.Time {
	from := now
	if cur.LastFireAt != nil && cur.LastFireAt.After(from) {
		from = *cur.LastFireAt
	}
	next := spec.Next(from)
	if next.IsZero() {
		return nil
	}
	return &next
}

// scheduleNow is the time schedules are computed from: the client's Clock, else the
// database's.
func (c *Client) scheduleNow(ctx context.Context, db store.DBTX) (time.Time, error) {
	if c.cfg.Clock != nil {
		return c.cfg.Clock.Now(), nil
	}
	t, err := c.store.DBClock(ctx, db)
	if err != nil {
		return t, fmt.Errorf("reading the database clock: %w", wrapPgError(err))
	}
	return t, nil
}

// scheduleDef validates p and returns its stored definition and parsed spec.
func (c *Client) scheduleDef(p PeriodicJob, now time.Time) (*store.Schedule, *maint.Spec, error) {
	return periodicDef(p, c.insertParams, now)
}

// periodicDef validates p — its job with insertParams, the checks every enqueue
// applies — and returns its stored definition and parsed spec. Errors name the field.
func periodicDef(p PeriodicJob, check func(*EnqueueParams) (store.InsertParams, error), now time.Time) (*store.Schedule, *maint.Spec, error) {
	if err := validScheduleName(p.Name); err != nil {
		return nil, nil, err
	}
	if p.Timezone == "" {
		p.Timezone = "UTC"
	}
	spec, err := maint.ParseSpec(p.Spec, p.Timezone)
	if err != nil {
		var se *maint.SpecError
		if errors.As(err, &se) {
			return nil, nil, invalid(se.Field, "%s", se.Reason)
		}
		return nil, nil, invalid("spec", "%v", err)
	}
	if spec.Next(now).IsZero() {
		return nil, nil, invalid("spec", "%q has no fire time in the next five years", p.Spec)
	}
	if p.Args == nil && len(p.Payload) == 0 {
		p.Payload = []byte("{}")
	}
	if p.Queue == "" {
		p.Queue = DefaultQueue
	}
	ip, err := check(&EnqueueParams{Kind: p.Kind, Payload: p.Payload, Args: p.Args,
		Opts: EnqueueOpts{Queue: p.Queue, Priority: p.Priority, MaxAttempts: p.MaxAttempts}})
	if err != nil {
		return nil, nil, err
	}
	if p.Misfire == "" {
		p.Misfire = MisfireRunOnce
	}
	if !validMisfire(p.Misfire) {
		return nil, nil, invalid("misfire", "%q is not one of: %s", p.Misfire, words(MisfirePolicies))
	}
	if p.MaxCatchUp == 0 {
		p.MaxCatchUp = DefaultMaxCatchUp
	}
	if p.MaxCatchUp < 1 || p.MaxCatchUp > MaxMaxCatchUp {
		return nil, nil, invalid("max_catch_up", "%d is outside 1..%d", p.MaxCatchUp, MaxMaxCatchUp)
	}
	if p.Jitter < 0 || p.Jitter > MaxScheduleJitter {
		return nil, nil, invalid("jitter", "%s is outside 0..%s", p.Jitter, MaxScheduleJitter)
	}
	return &store.Schedule{Name: p.Name, Spec: p.Spec, Timezone: p.Timezone, Kind: ip.Kind, Payload: ip.Payload,
		Queue: ip.Queue, Priority: ip.Priority, MaxAttempts: p.MaxAttempts, Misfire: string(p.Misfire),
		MaxCatchUp: p.MaxCatchUp, Jitter: p.Jitter}, spec, nil
}

// validatePeriodic checks Config.Periodic in withDefaults, with the enqueue checks of
// a client of cfg.
func validatePeriodic(cfg *Config) error {
	check := (&Client{cfg: *cfg, workers: cfg.Workers}).insertParams
	now := hostclock.Now()
	if cfg.Clock != nil {
		now = cfg.Clock.Now()
	}
	seen := map[string]bool{}
	for i, p := range cfg.Periodic {
		if _, _, err := periodicDef(p, check, now); err != nil {
			return invalid("Config.Periodic", "[%d] %q: %v", i, p.Name, err)
		}
		if seen[p.Name] {
			return invalid("Config.Periodic", "[%d]: two schedules are named %q", i, p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

func validMisfire(m MisfirePolicy) bool {
	for _, v := range MisfirePolicies {
		if m == v {
			return true
		}
	}
	return false
}

// validScheduleName checks a schedule's name (it is part of its jobs' deduplication
// keys and of the CLI's output, so it is kept plain).
func validScheduleName(name string) error {
	if name == "" {
		return invalid("name", "must not be empty")
	}
	if len(name) > MaxScheduleNameLen {
		return invalid("name", "longer than %d bytes", MaxScheduleNameLen)
	}
	for i, r := range name {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9', r == '-', r == '.':
			if i == 0 {
				return invalid("name", "%q must start with a letter or an underscore", name)
			}
		default:
			return invalid("name", "%q: character %q not allowed (use letters, digits, '_', '-' and '.')", name, r)
		}
	}
	return nil
}

func checkScheduleName(ctx context.Context, name string) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	return validScheduleName(name)
}

// scheduleRow turns a statement's result for one named schedule into the verb's answer.
func (c *Client) scheduleRow(name, verb string, row *store.Schedule, err error) (*Schedule, error) {
	if err != nil {
		return nil, fmt.Errorf("%s schedule %q: %w", verb, name, wrapPgError(err))
	}
	if row == nil {
		return nil, fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
	}
	return fromScheduleRow(row), nil
}

func fromScheduleRow(r *store.Schedule) *Schedule {
	s := &Schedule{Name: r.Name, Spec: r.Spec, Timezone: r.Timezone, Kind: r.Kind, Payload: r.Payload, Queue: r.Queue,
		Priority: r.Priority, MaxAttempts: r.MaxAttempts, Misfire: MisfirePolicy(r.Misfire), MaxCatchUp: r.MaxCatchUp,
		Jitter: r.Jitter, Enabled: r.Enabled, Source: ScheduleSource(r.Source), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if r.NextFireAt != nil {
		s.NextFireAt = *r.NextFireAt
	}
	if r.LastFireAt != nil {
		s.LastFireAt = *r.LastFireAt
	}
	if r.LastJobID != nil {
		s.LastJobID = *r.LastJobID
	}
	if r.LastError != nil {
		s.LastError = *r.LastError
	}
	return s
}
