package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/spf13/cobra"
)

// misfirePolicies are the valid values of --misfire.
var misfirePolicies = names(skiplock.MisfirePolicies)

func newSchedulesCmd(db *dbFlags) *cobra.Command {
	return group("schedules", "list, show, add, update, pause, resume, delete or trigger periodic schedules",
		newSchedulesListCmd(db), newSchedulesShowCmd(db), newSchedulesWriteCmd(db, true), newSchedulesWriteCmd(db, false),
		newSchedulesActCmd(db, "pause"), newSchedulesActCmd(db, "resume"), newSchedulesActCmd(db, "delete"),
		newSchedulesTriggerCmd(db))
}

// scheduleView is a schedule as the CLI prints it: durations in words.
type scheduleView struct {
	*skiplock.Schedule
	Jitter string `json:"jitter"`
}

func view(s *skiplock.Schedule) scheduleView { return scheduleView{s, s.Jitter.String()} }

// scheduleState says whether a schedule is paused, and when it fires next.
func scheduleState(s *skiplock.Schedule) (state, next string) {
	state = "active"
	if !s.Enabled {
		state = "paused"
	}
	switch {
	case !s.Enabled:
		next = "-"
	case s.NextFireAt.IsZero():
		next = "never"
	default:
		next = s.NextFireAt.Format(time.RFC3339)
	}
	return state, next
}

func tsOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func newSchedulesListCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list every schedule: spec, zone, kind, queue, state, next and last fire, last error",
		Args:  noArgs,
	}
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, _ []string) error {
		list, err := c.ScheduleList(cmd.Context())
		if err != nil {
			return err
		}
		if out.json() {
			views := make([]scheduleView, len(list))
			for i, s := range list {
				views[i] = view(s)
			}
			return printJSON(cmd.OutOrStdout(), views)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "NAME\tSPEC\tTIMEZONE\tKIND\tQUEUE\tSTATE\tNEXT_FIRE\tLAST_FIRE\tSOURCE\tLAST_ERROR")
		for _, s := range list {
			state, next := scheduleState(s)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Spec, s.Timezone, s.Kind, s.Queue, state,
				next, tsOrDash(s.LastFireAt), s.Source, oneLine(s.LastError, 60))
		}
		return tw.Flush()
	})
	return cmd
}

func newSchedulesShowCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show <name>",
		Short: "show every field of one schedule, payload included",
		Args:  exactArgs(1, "one schedule name"),
	}
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		s, err := c.ScheduleGet(cmd.Context(), args[0])
		if err != nil {
			return scheduleErr(cmd, args[0], err)
		}
		return printSchedule(cmd, out, s)
	})
	return cmd
}

func printSchedule(cmd *cobra.Command, out *outputFlag, s *skiplock.Schedule) error {
	if out.json() {
		return printJSON(cmd.OutOrStdout(), view(s))
	}
	state, next := scheduleState(s)
	maxAttempts := fmt.Sprint(s.MaxAttempts)
	if s.MaxAttempts == 0 {
		maxAttempts = "the kind's default"
	}
	tw := newTable(cmd.OutOrStdout())
	for _, kv := range [][2]string{{"name", s.Name}, {"spec", s.Spec}, {"timezone", s.Timezone}, {"kind", s.Kind},
		{"payload", string(s.Payload)}, {"queue", s.Queue}, {"priority", fmt.Sprint(s.Priority)},
		{"max_attempts", maxAttempts}, {"misfire", string(s.Misfire)}, {"max_catch_up", fmt.Sprint(s.MaxCatchUp)},
		{"jitter", s.Jitter.String()}, {"state", state}, {"source", string(s.Source)}, {"next_fire_at", next},
		{"last_fire_at", tsOrDash(s.LastFireAt)}, {"last_job_id", s.LastJobID}, {"last_error", s.LastError},
		{"created_at", s.CreatedAt.Format(time.RFC3339)}, {"updated_at", s.UpdatedAt.Format(time.RFC3339)}} {
		fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
	}
	return tw.Flush()
}

// scheduleFlags are the definition flags of schedules add and update.
type scheduleFlags struct {
	spec, timezone, kind, payload, queue string
	priority, maxAttempts, maxCatchUp    int
	misfire                              enumFlag
	jitter                               time.Duration
}

// scheduleFlagNames are the definition flags, in the order --help lists them.
var scheduleFlagNames = []string{"spec", "timezone", "kind", "payload", "queue", "priority", "max-attempts",
	"misfire", "max-catch-up", "jitter"}

// register adds the definition flags. For add, an unset flag is its default, which
// --help shows; for update, an unset flag leaves the field as it is, so no default
// is shown.
func (f *scheduleFlags) register(cmd *cobra.Command, add bool) {
	timezone, payload, queue, maxCatchUp, misfire := "", "", "", 0, ""
	if add {
		timezone, payload, queue, maxCatchUp, misfire = "UTC", "{}", skiplock.DefaultQueue, skiplock.DefaultMaxCatchUp, string(skiplock.MisfireRunOnce)
	}
	fs := cmd.Flags()
	fs.StringVar(&f.spec, "spec", "", `when it fires: 5 or 6 cron fields, @hourly/@daily/…, or "@every 30s"`)
	fs.StringVar(&f.timezone, "timezone", timezone, "IANA time zone of the spec")
	fs.StringVar(&f.kind, "kind", "", "the job's kind")
	fs.StringVar(&f.payload, "payload", payload, "the job's JSON payload")
	fs.StringVar(&f.queue, "queue", queue, "the job's queue")
	fs.IntVar(&f.priority, "priority", 0, "the job's priority")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "the job's max attempts (0: the kind's default)")
	fs.IntVar(&f.maxCatchUp, "max-catch-up", maxCatchUp, "catch_up: most jobs for missed fire times")
	f.misfire = enumFlag{value: misfire, valid: misfirePolicies}
	addEnum(cmd, &f.misfire, "misfire", "", "what missed fire times do")
	fs.DurationVar(&f.jitter, "jitter", 0, "random delay of up to this much added to each job's run_at")
}

// apply sets the flags given on the command line (all of them for add) on p.
func (f *scheduleFlags) apply(cmd *cobra.Command, p *skiplock.PeriodicJob, all bool) {
	set := func(name string) bool { return all || cmd.Flags().Changed(name) }
	if set("spec") {
		p.Spec = f.spec
	}
	if set("timezone") {
		p.Timezone = f.timezone
	}
	if set("kind") {
		p.Kind = f.kind
	}
	if set("payload") {
		p.Payload = []byte(f.payload)
	}
	if set("queue") {
		p.Queue = f.queue
	}
	if set("priority") {
		p.Priority = f.priority
	}
	if set("max-attempts") {
		p.MaxAttempts = f.maxAttempts
	}
	if set("max-catch-up") {
		p.MaxCatchUp = f.maxCatchUp
	}
	if set("misfire") {
		p.Misfire = skiplock.MisfirePolicy(f.misfire.value)
	}
	if set("jitter") {
		p.Jitter = f.jitter
	}
}

// newSchedulesWriteCmd builds schedules add (add) or schedules update.
func newSchedulesWriteCmd(db *dbFlags, add bool) *cobra.Command {
	var f scheduleFlags
	cmd := &cobra.Command{
		Use:   "update <name> [--spec s] [--timezone z] [--kind k] [--payload json] [--queue q] [--priority n] [--max-attempts n] [--misfire m] [--max-catch-up n] [--jitter d]",
		Short: "change a schedule: only the flags given change (a new spec or zone fires from now on)",
		Args:  exactArgs(1, "one schedule name"),
	}
	if add {
		cmd.Use = "add <name> --spec s --kind k [--timezone z] [--payload json] [--queue q] [--priority n] [--max-attempts n] [--misfire m] [--max-catch-up n] [--jitter d]"
		cmd.Short = "add a schedule at run time (source api): its job is enqueued at every fire time of --spec"
	}
	f.register(cmd, add)
	out := newOutputFlag(cmd)
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if add && (f.spec == "" || f.kind == "") {
			return usagef(cmd, "%s: --spec and --kind are required", pathOf(cmd))
		}
		if !add && !slices.ContainsFunc(scheduleFlagNames, cmd.Flags().Changed) {
			return usagef(cmd, "%s: nothing to update: give at least one of --%s", pathOf(cmd), strings.Join(scheduleFlagNames, ", --"))
		}
		return nil
	}
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		var (
			s   *skiplock.Schedule
			err error
		)
		if add {
			p := skiplock.PeriodicJob{Name: args[0]}
			f.apply(cmd, &p, true)
			s, err = c.ScheduleAdd(cmd.Context(), p)
		} else {
			cur, gerr := c.ScheduleGet(cmd.Context(), args[0])
			if gerr != nil {
				return scheduleErr(cmd, args[0], gerr)
			}
			p := cur.PeriodicJob()
			f.apply(cmd, &p, false)
			s, err = c.ScheduleUpdate(cmd.Context(), p)
		}
		if err != nil {
			return scheduleErr(cmd, args[0], err)
		}
		return printSchedule(cmd, out, s)
	})
	return cmd
}

// newSchedulesActCmd builds schedules pause, resume and delete.
func newSchedulesActCmd(db *dbFlags, verb string) *cobra.Command {
	short := map[string]string{
		"pause":  "pause schedules for every client: they fire no more until resumed (survives restarts)",
		"resume": "resume paused schedules: they fire again from their next fire time after now (no backlog)",
		"delete": "delete schedules (their jobs stay; a schedule declared in a Config returns when such a client starts)",
	}[verb]
	return newEachNameCmd(db, eachName{group: "schedules", verb: verb, what: "schedule", short: short,
		prepare: func(cmd *cobra.Command, c *skiplock.Client, names []string) error {
			var missing []string
			for _, name := range names {
				_, err := c.ScheduleGet(cmd.Context(), name)
				switch {
				case errors.Is(err, skiplock.ErrScheduleNotFound):
					missing = append(missing, name)
				case err != nil:
					return scheduleErr(cmd, name, err)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("%s: no schedule %s", pathOf(cmd), strings.Join(missing, ", "))
			}
			return nil
		},
		act: func(cmd *cobra.Command, c *skiplock.Client, name string) error {
			var err error
			switch verb {
			case "pause":
				_, err = c.SchedulePause(cmd.Context(), name)
			case "resume":
				_, err = c.ScheduleResume(cmd.Context(), name)
			default:
				_, err = c.ScheduleDelete(cmd.Context(), name)
			}
			if err != nil {
				return scheduleErr(cmd, name, err)
			}
			return nil
		}})
}

func newSchedulesTriggerCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trigger <name>",
		Short: "enqueue a schedule's job now, outside its fire times (the schedule is unchanged)",
		Args:  exactArgs(1, "one schedule name"),
	}
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		res, err := c.ScheduleTrigger(cmd.Context(), args[0])
		if err != nil {
			return scheduleErr(cmd, args[0], err)
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), map[string]string{"schedule": args[0], "job_id": res.ID})
		}
		fmt.Fprintf(cmd.OutOrStdout(), "triggered %s: job %s\n", args[0], res.ID)
		return nil
	})
	return cmd
}

// scheduleErr maps the library's errors to the CLI's: bad input is a usage error
// (exit 2), a missing schedule is named.
func scheduleErr(cmd *cobra.Command, name string, err error) error {
	switch {
	case errors.Is(err, skiplock.ErrInvalid):
		return usagef(cmd, "%s: %v", pathOf(cmd), err)
	case errors.Is(err, skiplock.ErrScheduleNotFound):
		return fmt.Errorf("no schedule %s", name)
	}
	return err
}
