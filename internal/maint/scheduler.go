package maint

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"
	"github.com/skiplock/skiplock/internal/store"
)

// Misfire policies, as stored in schedules.misfire: what a schedule does about fire
// times that are more than the misfire grace in the past when a run finds them
// (after downtime, or a clock that jumped ahead). Fire times within the grace are
// never missed: they fire whatever the policy.
const (
	MisfireSkip    = "skip"     // missed fire times insert nothing
	MisfireRunOnce = "run_once" // one job for all of them (the newest), unless one on time fires
	MisfireCatchUp = "catch_up" // one job each, the newest max_catch_up of them
)

// maxOnTime bounds the fire times within the grace that one run fires for one
// schedule (a one-second schedule and a one-minute grace: 60).
const maxOnTime = 1000

// SchedulerBatch is how many due schedules one run fires; more wait for the next run.
const SchedulerBatch = 1000

// Fire is a job a schedule's fire time asks for.
type Fire struct {
	Schedule *store.Schedule
	At       time.Time // the fire time
	RunAt    time.Time // At plus a random part of the schedule's jitter
	DedupKey string    // DedupKey(name, At)
}

// DedupKey is the deduplication key of a schedule's job for fire time at: one job
// per (schedule, fire time), whichever client fires it and however often.
func DedupKey(name string, at time.Time) string {
	return "periodic:" + name + ":" + at.UTC().Format(time.RFC3339)
}

// RefusedError wraps a failure to insert a fire's job that retrying would not fix:
// an enqueue hook's error, a validation error, a statement the database refused.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Scheduler fires due schedules: for each, it inserts the jobs of its due fire times
// (by its misfire policy) through Enqueue and advances next_fire_at, in the run's
// transaction with the rows locked FOR UPDATE. A run that dies before committing
// leaves no job and no advance behind; the next run, in any client, fires the same
// fire times. Each job carries DedupKey, so a fire time that is fired again anyway
// (next_fire_at set back by hand, a restored backup) finds its job and inserts none.
type Scheduler struct {
	Store *store.Store
	// Every is the interval between runs.
	Every time.Duration
	// Clock supplies the run's time; nil means the database's clock.
	Clock interface{ Now() time.Time }
	// Grace is how late a fire time may be and still count as on time.
	Grace time.Duration
	// Reconcile, when set, writes the client's declared schedules; the first run that
	// gets the service's lock calls it (again on the next run if it failed), in a
	// transaction of its own that has committed when it returns nil.
	Reconcile func(ctx context.Context) error
	// Enqueue inserts fires' jobs in tx (a savepoint of the run's transaction) through
	// the client's enqueue path and returns the results in order (a duplicate's ID is
	// the job holding the key). It wraps failures retrying cannot fix in
	// *RefusedError; any other error fails the whole run, which the next one repeats.
	Enqueue func(ctx context.Context, tx pgx.Tx, fires []Fire) ([]store.InsertResult, error)
	// Refused, when set, hears about a schedule whose fire inserted no job (recorded
	// in its last_error) or whose spec could not be read (left as it is).
	Refused func(schedule string, err error)

	reconciled atomic.Bool
	mu         sync.Mutex
	specs      map[[2]string]*Spec
}

// SchedulerResult reports one scheduler run.
type SchedulerResult struct {
	Reconciled bool
	Due        int // schedules found due
	Fired      int // jobs inserted
	Duplicates int // fires whose deduplication key was held already
	Refused    int // schedules whose fire inserted no job
	Missed     int // fire times dropped by the misfire policy (of those looked at)
}

// LogAttrs implements Result.
func (r SchedulerResult) LogAttrs() []any {
	return []any{"due", r.Due, "fired", r.Fired, "duplicates", r.Duplicates, "refused", r.Refused, "missed", r.Missed,
		"reconciled", r.Reconciled}
}

// Name implements Service.
func (s *Scheduler) Name() string { return "scheduler" }

// Interval implements Service.
func (s *Scheduler) Interval() time.Duration { return s.Every }

// RunOnce implements Service.
func (s *Scheduler) RunOnce(ctx context.Context, tx pgx.Tx) (Result, error) {
	return s.Run(ctx, tx)
}

// Run is one scheduler run in tx, which holds the service's lock.
func (s *Scheduler) Run(ctx context.Context, tx pgx.Tx) (SchedulerResult, error) {
	var res SchedulerResult
	if s.Reconcile != nil && !s.reconciled.Load() {
		if err := s.Reconcile(ctx); err != nil {
			return res, fmt.Errorf("scheduler: writing the declared schedules: %w", err)
		}
		s.reconciled.Store(true)
		res.Reconciled = true
	}
	var now time.Time
	if s.Clock != nil {
		now = s.Clock.Now()
	} else {
		var err error
		if now, err = s.Store.DBClock(ctx, tx); err != nil {
			return res, fmt.Errorf("scheduler: reading the database clock: %w", err)
		}
	}
	due, err := s.Store.ScheduleDue(ctx, tx, now, SchedulerBatch)
	if err != nil {
		return res, fmt.Errorf("scheduler: reading due schedules: %w", err)
	}
	res.Due = len(due)
	adv := make([]store.ScheduleAdvance, 0, len(due))
	for _, sch := range due {
		a, ok, err := s.fire(ctx, tx, sch, now, &res)
		if err != nil {
			return res, err
		}
		if ok {
			adv = append(adv, a)
		}
	}
	if err := s.Store.ScheduleAdvance(ctx, tx, adv); err != nil {
		return res, fmt.Errorf("scheduler: advancing %d schedule(s): %w", len(adv), err)
	}
	return res, nil
}

// fire inserts the jobs of one due schedule and returns its advance; ok is false
// when the schedule is left as it is (its spec cannot be read).
func (s *Scheduler) fire(ctx context.Context, tx pgx.Tx, sch *store.Schedule, now time.Time, res *SchedulerResult) (a store.ScheduleAdvance, ok bool, err error) {
	spec, err := s.spec(sch.Spec, sch.Timezone)
	if err != nil {
		res.Refused++
		s.refused(sch.Name, err)
		return a, false, nil
	}
	times, missed := Plan(spec, sch, now, s.Grace)
	res.Missed += missed
	a = store.ScheduleAdvance{Name: sch.Name}
	if next := spec.After(*sch.NextFireAt, now); !next.IsZero() {
		a.Next = &next
	}
	if len(times) == 0 {
		return a, true, nil
	}
	last := times[len(times)-1]
	a.LastFire = &last
	fires := make([]Fire, len(times))
	for i, at := range times {
		runAt := at
		if sch.Jitter > 0 {
			runAt = runAt.Add(rand.N(sch.Jitter + 1))
		}
		fires[i] = Fire{Schedule: sch, At: at, RunAt: runAt, DedupKey: DedupKey(sch.Name, at)}
	}
	sp, err := tx.Begin(ctx) // a savepoint: one schedule's refused insert leaves the others' alone
	if err != nil {
		return a, false, fmt.Errorf("scheduler: %w", err)
	}
	ids, err := s.Enqueue(ctx, sp, fires)
	if err != nil {
		var refused *RefusedError
		if rbErr := sp.Rollback(ctx); rbErr != nil || ctx.Err() != nil || !errors.As(err, &refused) {
			// The database's condition, not the job's: the whole run is retried.
			return a, false, fmt.Errorf("scheduler: firing %q: %w", sch.Name, err)
		}
		msg := fmt.Sprintf("fire time %s: %v", last.UTC().Format(time.RFC3339), err)
		a.Err = &msg
		res.Refused++
		s.refused(sch.Name, err)
		return a, true, nil
	}
	if err := sp.Commit(ctx); err != nil {
		return a, false, fmt.Errorf("scheduler: firing %q: %w", sch.Name, err)
	}
	if len(ids) != len(fires) {
		return a, false, fmt.Errorf("scheduler: firing %q: %d results for %d jobs", sch.Name, len(ids), len(fires))
	}
	a.JobID = &ids[len(ids)-1].ID
	for _, r := range ids {
		if r.Inserted {
			res.Fired++
		} else {
			res.Duplicates++
		}
	}
	return a, true, nil
}

func (s *Scheduler) refused(name string, err error) {
	if s.Refused != nil {
		s.Refused(name, err)
	}
}

// spec parses (and caches) a schedule's spec.
func (s *Scheduler) spec(spec, tz string) (*Spec, error) {
	key := [2]string{spec, tz}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.specs[key]; ok {
		return p, nil
	}
	p, err := ParseSpec(spec, tz)
	if err != nil {
		return nil, err
	}
	if s.specs == nil || len(s.specs) > 10000 {
		s.specs = map[[2]string]*Spec{}
	}
	s.specs[key] = p
	return p, nil
}

// Plan returns the fire times of a due schedule that get a job in a run at now, oldest
// first, and how many due fire times its misfire policy dropped (counting only those
// it looked at). A fire time at most grace before now is on time and always fires; the
// policy decides about the older ones.
func Plan(spec *Spec, sch *store.Schedule, now time.Time, grace time.Duration) (fire []time.Time, missed int) {
	extra := 1
	if sch.Misfire == MisfireCatchUp {
		extra = max(sch.MaxCatchUp, 1)
	}
	due := spec.Newest(*sch.NextFireAt, *sch.NextFireAt, now, maxOnTime+extra)
	split := len(due)
	for split > 0 && now.Sub(due[split-1]) <= grace {
		split--
	}
	late, onTime := due[:split], due[split:]
	switch {
	case len(late) == 0:
	case sch.Misfire == MisfireCatchUp:
		keep := min(len(late), extra)
		missed = len(late) - keep
		late = late[len(late)-keep:]
	case sch.Misfire == MisfireRunOnce && len(onTime) == 0:
		missed = len(late) - 1
		late = late[len(late)-1:]
	default: // skip, or run once with a fire on time standing for the missed ones
		missed, late = len(late), nil
	}
	return append(late, onTime...), missed
}

// SpecError is a spec or time zone that cannot be parsed.
type SpecError struct {
	Field  string // "spec" or "timezone"
	Reason string
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Reason }

// parser reads 5-field (minute first) and 6-field (second first) cron specs and the
// descriptors (@hourly, @daily, @every 30s, …).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed schedule: a cron spec in a time zone, or a fixed interval.
//
// Daylight saving time. robfig/cron's search walks real time in the zone: a wall
// time that a spring-forward skips never matches (a 02:30 job does not run that day)
// and one that a fall-back repeats matches twice (it runs twice). That is right for
// a spec that fires every hour (it keeps firing once per real hour), wrong for one
// pinned to certain hours. So a spec whose hour field does not cover all 24 hours is
// searched by wall clock instead, and each matching wall time mapped to one instant:
// a repeated wall time to its first occurrence, a skipped one to the instant the
// clock jumps (03:00 for 02:30 in Europe/Berlin or America/New_York), where it
// coincides with, and is deduplicated against, any fire that the jump lands on.
// Specs covering every hour, and @every intervals, keep robfig's real-time search.
type Spec struct {
	every time.Duration      // @every: a fixed interval from the schedule's own fire times
	real  *cron.SpecSchedule // robfig's search in loc (all-hours specs)
	wall  *cron.SpecSchedule // the same fields in UTC: the wall-clock search
	loc   *time.Location
}

// allHours is the hour field of a spec that matches every hour.
const allHours = 1<<24 - 1

// ParseSpec parses spec in the IANA time zone tz ("" is UTC).
func ParseSpec(spec, tz string) (*Spec, error) {
	if tz == "" {
		tz = "UTC"
	}
	if tz == "Local" {
		return nil, &SpecError{"timezone", `"Local" depends on the host; name an IANA zone such as "Europe/Berlin"`}
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, &SpecError{"timezone", fmt.Sprintf("%q is not an IANA time zone (%v)", tz, err)}
	}
	if t := strings.TrimSpace(spec); strings.HasPrefix(t, "TZ=") || strings.HasPrefix(t, "CRON_TZ=") {
		return nil, &SpecError{"spec", "set the time zone with the timezone field, not a TZ= prefix"}
	}
	if strings.TrimSpace(spec) == "" {
		return nil, &SpecError{"spec", "must not be empty"}
	}
	if err := checkEvery(spec); err != nil {
		return nil, err
	}
	sched, err := parser.Parse(spec)
	if err != nil {
		return nil, &SpecError{"spec", fmt.Sprintf("%q: %v", spec, err)}
	}
	switch c := sched.(type) {
	case cron.ConstantDelaySchedule:
		return &Spec{every: c.Delay, loc: loc}, nil
	case *cron.SpecSchedule:
		real, wall := *c, *c
		real.Location, wall.Location = loc, time.UTC
		return &Spec{real: &real, wall: &wall, loc: loc}, nil
	}
	return nil, &SpecError{"spec", fmt.Sprintf("%q: unsupported schedule type %T", spec, sched)}
}

// checkEvery refuses an @every interval that is not a whole number of seconds of at
// least one: the cron parser would round it silently (a negative or sub-second one
// up to 1s, 1500ms down to 1s), so the schedule would fire at another pace than the
// one written.
func checkEvery(spec string) error {
	rest, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every ")
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(rest))
	if err != nil {
		return &SpecError{"spec", fmt.Sprintf("%q: %v", spec, err)}
	}
	if d < time.Second || d%time.Second != 0 {
		return &SpecError{"spec", fmt.Sprintf("%q: an @every interval is a whole number of seconds, at least 1s", spec)}
	}
	return nil
}

// Interval returns the interval of an @every spec, 0 for a cron spec.
func (s *Spec) Interval() time.Duration { return s.every }

// Next returns the first fire time after t, or the zero time when there is none
// within five years. For an @every spec it is t plus the interval (in whole seconds).
func (s *Spec) Next(t time.Time) time.Time {
	switch {
	case s.every > 0:
		return t.Truncate(time.Second).Add(s.every)
	case s.real.Hour&allHours == allHours:
		return s.real.Next(t)
	}
	w := wall(t, s.loc)
	for range 100000 {
		if w = s.wall.Next(w); w.IsZero() {
			return w
		}
		if at := instant(w, s.loc); at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// After returns the first fire time after t of the sequence anchor belongs to (anchor
// is one of the schedule's fire times: its next_fire_at). Cron fire times do not
// depend on the anchor; @every ones are the anchor plus whole intervals.
func (s *Spec) After(anchor, t time.Time) time.Time {
	if s.every <= 0 {
		return s.Next(t)
	}
	if t.Before(anchor) {
		return anchor
	}
	return anchor.Add((t.Sub(anchor)/s.every + 1) * s.every)
}

// Newest returns up to n of the newest fire times in [from, now] of anchor's sequence,
// oldest first (from must be a fire time). It looks back from now in widening windows,
// so a long downtime of a frequent schedule costs about n steps, not one per fire time
// missed.
func (s *Spec) Newest(anchor, from, now time.Time, n int) []time.Time {
	if now.Before(from) || n <= 0 {
		return nil
	}
	for window := time.Minute; ; window *= 16 {
		start := now.Add(-window)
		if window >= now.Sub(from) {
			start = from
		}
		f := from
		if start.After(from) {
			f = s.After(anchor, start.Add(-time.Nanosecond))
		}
		var got []time.Time
		for !f.IsZero() && !f.After(now) {
			got = append(got, f)
			if len(got) > n {
				got = got[1:]
			}
			f = s.After(anchor, f)
		}
		if len(got) >= n || !start.After(from) {
			return got
		}
	}
}

// wall returns t's wall clock in loc as the same reading in UTC.
func wall(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instant returns the first instant at which loc's clocks read w (a reading in UTC),
// or, when they never do (a spring-forward skips it), the instant of the jump.
func instant(w time.Time, loc *time.Location) time.Time {
	var first time.Time
	var before int
	for i, probe := range []time.Time{w.Add(-36 * time.Hour), w.Add(36 * time.Hour)} {
		_, off := probe.In(loc).Zone()
		if i == 0 {
			before = off
		}
		at := w.Add(-time.Duration(off) * time.Second)
		if wall(at, loc).Equal(w) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	if !first.IsZero() {
		return first
	}
	// In a gap: read with the offset before the jump, w lies after it, in the
	// period that began with the jump.
	start, _ := w.Add(-time.Duration(before) * time.Second).In(loc).ZoneBounds()
	return start
}
