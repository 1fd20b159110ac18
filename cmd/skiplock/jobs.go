package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/spf13/cobra"
)

// jobStates are the states a job can be in, the valid values of jobs list --state.
var jobStates = names(skiplock.JobStates)

func newJobsCmd(db *dbFlags) *cobra.Command {
	return group("jobs", "list, show, retry, cancel or delete jobs",
		newJobsListCmd(db), newJobsShowCmd(db),
		newJobsActCmd(db, jobRetry), newJobsActCmd(db, jobCancel), newJobsActCmd(db, jobDelete))
}

// filterFlags select jobs by state, queue and kind.
type filterFlags struct {
	states enumListFlag
	queue  string
	kind   string
}

func (f *filterFlags) register(cmd *cobra.Command, valid []string, usage string) {
	f.states.valid = valid
	addEnumList(cmd, &f.states, "state", usage)
	cmd.Flags().StringVar(&f.queue, "queue", "", "only this queue")
	cmd.Flags().StringVar(&f.kind, "kind", "", "only this kind")
}

func (f *filterFlags) params() skiplock.ListParams {
	p := skiplock.ListParams{Queue: f.queue, Kind: f.kind}
	for _, s := range f.states.values {
		p.States = append(p.States, skiplock.JobState(s))
	}
	return p
}

func newJobsListCmd(db *dbFlags) *cobra.Command {
	var (
		f     filterFlags
		after string
		pages pageFlags
	)
	cmd := &cobra.Command{
		Use:   "list [--state s[,s]] [--queue q] [--kind k] [--after id] [--limit n] [--all]",
		Short: "list jobs, oldest first (the first page, or --all)",
		Args:  noArgs,
	}
	f.register(cmd, jobStates, "only jobs in these states (comma-separated)")
	cmd.Flags().StringVar(&after, "after", "", "continue after this id (the last of the previous page)")
	pages.register(cmd)
	out := newOutputFlag(cmd)
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if after != "" && !isUUID(after) {
			return usagef(cmd, "%s: --after %q is not a job id (a UUID)", pathOf(cmd), after)
		}
		return nil
	}
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, _ []string) error {
		p := f.params()
		p.AfterID, p.Limit = after, pages.limit
		return jobsList(cmd, c, p, pages.all, out)
	})
	return cmd
}

func jobsList(cmd *cobra.Command, c *skiplock.Client, p skiplock.ListParams, all bool, out *outputFlag) error {
	ctx := cmd.Context()
	listed := []*skiplock.Job{}
	tw := newTable(cmd.OutOrStdout())
	if !out.json() {
		fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tATTEMPT\tRUN_AT\tLAST_ERROR")
	}
	for {
		page, err := c.JobList(ctx, p)
		if err != nil {
			return invalidAsUsage(cmd, err)
		}
		for _, j := range page {
			if out.json() {
				j.Payload = nil // jobs show prints it
				listed = append(listed, j)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", j.ID, j.Queue, j.Kind, j.State, j.Attempt, j.MaxAttempts,
				j.RunAt.Format(time.RFC3339), oneLine(j.LastError, 60))
		}
		if !all || len(page) < p.Limit {
			if !all && len(page) == p.Limit {
				fmt.Fprintf(cmd.ErrOrStderr(), "more jobs: --after %s\n", page[len(page)-1].ID)
			}
			break
		}
		p.AfterID = page[len(page)-1].ID
	}
	if out.json() {
		return printJSON(cmd.OutOrStdout(), listed)
	}
	return tw.Flush()
}

func newJobsShowCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show <id>",
		Short: "show every field of one job, payload included",
		Args:  idArgs(1, "a job id"),
	}
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		j, err := c.JobGet(cmd.Context(), args[0])
		if errors.Is(err, skiplock.ErrNotFound) {
			return fmt.Errorf("no job %s", args[0])
		}
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), j)
		}
		ts := func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.Format(time.RFC3339Nano)
		}
		tw := newTable(cmd.OutOrStdout())
		for _, kv := range [][2]string{{"id", j.ID}, {"queue", j.Queue}, {"kind", j.Kind}, {"state", string(j.State)},
			{"attempt", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts)}, {"priority", fmt.Sprint(j.Priority)},
			{"run_at", ts(j.RunAt)}, {"created_at", ts(j.CreatedAt)}, {"updated_at", ts(j.UpdatedAt)},
			{"lease_until", ts(j.LeaseUntil)}, {"lease_token", j.LeaseToken}, {"worker_id", j.WorkerID},
			{"deduplication_key", j.DeduplicationKey}, {"concurrency_key", j.ConcurrencyKey}, {"last_error", j.LastError}, {"payload", string(j.Payload)}} {
			if err := writeField(tw, kv[0], kv[1]); err != nil {
				return err
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		return printAttempts(cmd.OutOrStdout(), j.History)
	})
	return cmd
}

// printAttempts is jobs show's attempts section: after a blank line, one line per
// finished attempt, oldest first — its number, outcome, start, how long it ran until
// its outcome was written (or its lease found expired), the worker and the first
// line of its error (last_error above has the newest in full). Nothing for a job
// that has not finished an attempt.
func printAttempts(w io.Writer, history []skiplock.AttemptRecord) error {
	if len(history) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "ATTEMPT\tOUTCOME\tSTARTED_AT\tTOOK\tWORKER\tERROR")
	for _, a := range history {
		took := ""
		if !a.StartedAt.IsZero() && !a.FinishedAt.IsZero() {
			took = a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, a.Outcome, a.StartedAt.Format("2006-01-02T15:04:05.000Z07:00"),
			took, a.WorkerID, oneLine(a.Error, 72))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(history) >= skiplock.MaxHistory && history[0].Attempt > 1 {
		_, err := fmt.Fprintf(w, "(the newest %d attempts; earlier ones are not kept)\n", len(history))
		return err
	}
	return nil
}

// jobAction is one of the operator's writes to jobs: which states it applies to and
// how to say so when a job is in another.
type jobAction struct {
	name     string // the subcommand
	short    string
	from     []string // the states the action applies to
	fromText string   // the same, for a person
	run      func(ctx context.Context, c *skiplock.Client, id, reason string) (*skiplock.Job, error)
}

var (
	jobRetry = jobAction{name: "retry", short: "make failed or cancelled jobs pending and due now",
		from: []string{"failed", "cancelled"}, fromText: "failed or cancelled jobs can be retried",
		run: func(ctx context.Context, c *skiplock.Client, id, _ string) (*skiplock.Job, error) {
			return c.JobRetry(ctx, id)
		}}
	jobCancel = jobAction{name: "cancel", short: "cancel pending, claimed, running or waiting jobs",
		from: []string{"pending", "claimed", "running", "waiting"}, fromText: "pending, claimed, running or waiting jobs can be cancelled",
		run: func(ctx context.Context, c *skiplock.Client, id, reason string) (*skiplock.Job, error) {
			return c.JobCancel(ctx, id, reason)
		}}
	jobDelete = jobAction{name: "delete", short: "delete jobs that are not running",
		from: []string{"pending", "succeeded", "failed", "cancelled"}, fromText: "jobs that are not running can be deleted (cancel a running job first)",
		run: func(ctx context.Context, c *skiplock.Client, id, _ string) (*skiplock.Job, error) {
			return c.JobDelete(ctx, id)
		}}
)

// explain turns the library's refusal of an action (ErrJobState, or ErrNotFound
// from a library that does not tell the two apart) into one short line: no such job,
// or the job's current state and which states the action applies to.
func (a jobAction) explain(ctx context.Context, c *skiplock.Client, id string, err error) error {
	if !errors.Is(err, skiplock.ErrNotFound) && !errors.Is(err, skiplock.ErrJobState) {
		return err
	}
	j, gerr := c.JobGet(ctx, id)
	switch {
	case errors.Is(gerr, skiplock.ErrNotFound):
		return fmt.Errorf("no job %s", id)
	case gerr != nil:
		return err
	}
	return fmt.Errorf("job %s is %s: only %s", id, j.State, a.fromText)
}

func newJobsActCmd(db *dbFlags, a jobAction) *cobra.Command {
	var (
		f      filterFlags
		reason string
	)
	cmd := &cobra.Command{
		Use:   a.name + " <id>... | --state " + strings.Join(a.from, "|") + " [--queue q] [--kind k]",
		Short: a.short + " (by id, or in bulk by state with progress)",
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0 && len(f.states.values) == 0:
				return usagef(cmd, "jobs %s: give job ids, or --state %s (with --queue/--kind) for a bulk %s",
					a.name, strings.Join(a.from, "|"), a.name)
			case len(args) > 0 && (len(f.states.values) > 0 || f.queue != "" || f.kind != ""):
				return usagef(cmd, "jobs %s: give job ids or --state/--queue/--kind, not both", a.name)
			}
			return checkIDs(cmd, "a job id", args)
		},
	}
	f.register(cmd, a.from, "bulk: every job in these states (comma-separated)")
	if a.name == "cancel" {
		cmd.Flags().StringVar(&reason, "reason", "", "reason recorded as the job's last error")
	}
	out := newOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		c, done, err := db.client(cmd, 2)
		if err != nil {
			return err
		}
		defer done()
		return jobsAct(cmd, c, a, ids, f.params(), reason, out)
	}
	return cmd
}

// jobsAct applies the action to the given jobs, or to every job matching the filter,
// printing progress on stderr and one result per job.
func jobsAct(cmd *cobra.Command, c *skiplock.Client, a jobAction, ids []string, p skiplock.ListParams, reason string, out *outputFlag) error {
	ctx := cmd.Context()
	type result struct {
		ID    string `json:"id"`
		State string `json:"state,omitempty"`
		Error string `json:"error,omitempty"`
	}
	results := []result{}
	var failed int
	var lastErr error
	do := func(id string) {
		j, err := a.run(ctx, c, id, reason)
		r := result{ID: id}
		switch {
		case err != nil:
			lastErr = a.explain(ctx, c, id, err)
			r.Error = lastErr.Error()
			failed++
		case a.name == "delete":
			r.State = "deleted"
		default:
			r.State = string(j.State)
		}
		results = append(results, r)
	}
	if len(ids) > 0 {
		for _, id := range ids {
			do(id)
		}
	} else {
		p.Limit, p.AfterID = 1000, ""
		start, n := time.Now(), 0
		for {
			page, err := c.JobList(ctx, p)
			if err != nil {
				return err
			}
			for _, j := range page {
				do(j.ID)
				n++
				if n%1000 == 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d jobs (%d failed), %.0f/s\n", a.name, n, failed, float64(n)/time.Since(start).Seconds())
				}
			}
			if len(page) < p.Limit {
				break
			}
			p.AfterID = page[len(page)-1].ID
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d jobs done, %d failed\n", a.name, n, failed)
	}
	if len(ids) == 1 && failed == 1 && !out.json() {
		return lastErr // one job: the reason is the whole story
	}
	if out.json() {
		if err := printJSON(cmd.OutOrStdout(), results); err != nil {
			return err
		}
	} else {
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "ID\tRESULT")
		for _, r := range results {
			res := r.State
			if r.Error != "" {
				res = "error: " + r.Error
			}
			fmt.Fprintf(tw, "%s\t%s\n", r.ID, res)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch {
	case failed == 1 && len(results) == 1:
		return lastErr
	case failed > 0:
		return fmt.Errorf("jobs %s: %d of %d failed (see the results above)", a.name, failed, len(results))
	}
	return nil
}
