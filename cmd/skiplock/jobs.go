package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock"
)

// streams are the standard output and error of the operations commands (jobs,
// stats, outbox, roles, retention, partitions, metrics); tests put their own in the
// context with withStreams.
type streams struct{ out, err io.Writer }

type streamsKey struct{}

func withStreams(ctx context.Context, out, err io.Writer) context.Context {
	return context.WithValue(ctx, streamsKey{}, streams{out, err})
}

func outW(ctx context.Context) io.Writer {
	if s, ok := ctx.Value(streamsKey{}).(streams); ok {
		return s.out
	}
	return os.Stdout
}

func errW(ctx context.Context) io.Writer {
	if s, ok := ctx.Value(streamsKey{}).(streams); ok {
		return s.err
	}
	return os.Stderr
}

func init() {
	register("jobs", "list, show, retry, cancel or delete jobs", runJobs)
}

// outputFlag is -o table|json.
type outputFlag struct{ format string }

func (o *outputFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&o.format, "o", "table", "output format: table or json")
}

func (o *outputFlag) check() error {
	if o.format != "table" && o.format != "json" {
		return fmt.Errorf("-o %q: use table or json", o.format)
	}
	return nil
}

func (o *outputFlag) json() bool { return o.format == "json" }

func printJSON(ctx context.Context, v any) error {
	enc := json.NewEncoder(outW(ctx))
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseMixed parses flags that may follow positional arguments (`jobs cancel <id>
// --reason x`) and returns the positional ones.
func parseMixed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func table(ctx context.Context) *tabwriter.Writer {
	return tabwriter.NewWriter(outW(ctx), 0, 0, 2, ' ', 0)
}

// opsClient opens a pool and an unstarted client for an operations command.
func opsClient(ctx context.Context, db *dbFlags, maxConns int32) (*skiplock.Client, func(), error) {
	pool, err := db.pool(ctx, maxConns)
	if err != nil {
		return nil, nil, err
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: db.schema, Logger: db.logger()})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); pool.Close() }, nil
}

// jobJSON is a job as the CLI prints it.
type jobJSON struct {
	ID               string          `json:"id"`
	Queue            string          `json:"queue"`
	Kind             string          `json:"kind"`
	State            string          `json:"state"`
	Priority         int             `json:"priority"`
	Attempt          int             `json:"attempt"`
	MaxAttempts      int             `json:"max_attempts"`
	RunAt            time.Time       `json:"run_at"`
	CreatedAt        time.Time       `json:"created_at"`
	UpdatedAt        time.Time       `json:"updated_at"`
	DeduplicationKey string          `json:"deduplication_key,omitempty"`
	LastError        string          `json:"last_error,omitempty"`
	Payload          json.RawMessage `json:"payload,omitempty"`
}

func toJSON(j *skiplock.Job, payload bool) jobJSON {
	out := jobJSON{ID: j.ID, Queue: j.Queue, Kind: j.Kind, State: string(j.State), Priority: j.Priority, Attempt: j.Attempt,
		MaxAttempts: j.MaxAttempts, RunAt: j.RunAt, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt,
		DeduplicationKey: j.DeduplicationKey, LastError: j.LastError}
	if payload {
		out.Payload = json.RawMessage(j.Payload)
	}
	return out
}

func runJobs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	fs.SetOutput(errW(ctx))
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage:
  skiplock jobs list   [--state s[,s]] [--queue q] [--kind k] [--after id] [--limit n] [--all]
  skiplock jobs show   <id>
  skiplock jobs retry  <id>... | --state failed|cancelled [--queue q] [--kind k]   (bulk, with progress)
  skiplock jobs cancel <id>... [--reason text]
  skiplock jobs delete <id>...
flags:
`)
		fs.PrintDefaults()
	}
	var (
		db     dbFlags
		out    outputFlag
		states string
		queue  string
		kind   string
		after  string
		limit  int
		all    bool
		reason string
	)
	db.register(fs)
	out.register(fs)
	fs.StringVar(&states, "state", "", "comma-separated states: pending, running, succeeded, failed, cancelled")
	fs.StringVar(&queue, "queue", "", "only this queue")
	fs.StringVar(&kind, "kind", "", "only this kind")
	fs.StringVar(&after, "after", "", "list: continue after this id (the last of the previous page)")
	fs.IntVar(&limit, "limit", 50, "list: page size (1..10000)")
	fs.BoolVar(&all, "all", false, "list: every page, not just the first")
	fs.StringVar(&reason, "reason", "", "cancel: reason recorded as the job's last error")
	if len(args) == 0 {
		fs.Usage()
		return errors.New("jobs: missing subcommand")
	}
	sub := args[0]
	ids, err := parseMixed(fs, args[1:])
	if err != nil {
		return err
	}
	if err := out.check(); err != nil {
		return err
	}
	filter := skiplock.ListParams{Queue: queue, Kind: kind, AfterID: after, Limit: limit}
	for _, s := range strings.Split(states, ",") {
		if s = strings.TrimSpace(s); s != "" {
			filter.States = append(filter.States, skiplock.JobState(s))
		}
	}
	c, done, err := opsClient(ctx, &db, 4)
	if err != nil {
		return err
	}
	defer done()
	switch sub {
	case "list":
		return jobsList(ctx, c, filter, all, &out)
	case "show":
		if len(ids) != 1 {
			return errors.New("jobs show: give one job id")
		}
		j, err := c.JobGet(ctx, ids[0])
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(ctx, toJSON(j, true))
		}
		tw := table(ctx)
		for _, kv := range [][2]string{{"id", j.ID}, {"queue", j.Queue}, {"kind", j.Kind}, {"state", string(j.State)},
			{"attempt", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts)}, {"priority", fmt.Sprint(j.Priority)},
			{"run_at", j.RunAt.Format(time.RFC3339Nano)}, {"created_at", j.CreatedAt.Format(time.RFC3339Nano)},
			{"updated_at", j.UpdatedAt.Format(time.RFC3339Nano)}, {"deduplication_key", j.DeduplicationKey},
			{"last_error", j.LastError}, {"payload", string(j.Payload)}} {
			fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
		}
		return tw.Flush()
	case "retry", "cancel", "delete":
		return jobsAct(ctx, c, sub, ids, filter, reason, &out)
	}
	return fmt.Errorf("jobs: unknown subcommand %q (list, show, retry, cancel, delete)", sub)
}

func jobsList(ctx context.Context, c *skiplock.Client, p skiplock.ListParams, all bool, out *outputFlag) error {
	var listed []jobJSON
	tw := table(ctx)
	if !out.json() {
		fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tATTEMPT\tRUN_AT\tLAST_ERROR")
	}
	for {
		page, err := c.JobList(ctx, p)
		if err != nil {
			return err
		}
		for _, j := range page {
			if out.json() {
				listed = append(listed, toJSON(j, false))
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", j.ID, j.Queue, j.Kind, j.State, j.Attempt, j.MaxAttempts,
				j.RunAt.Format(time.RFC3339), oneLine(j.LastError, 60))
		}
		if !all || len(page) < p.Limit {
			if !all && len(page) == p.Limit {
				fmt.Fprintf(errW(ctx), "more jobs: --after %s\n", page[len(page)-1].ID)
			}
			break
		}
		p.AfterID = page[len(page)-1].ID
	}
	if out.json() {
		if listed == nil {
			listed = []jobJSON{}
		}
		return printJSON(ctx, listed)
	}
	return tw.Flush()
}

func oneLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n-1] + "…"
	}
	return s
}

// jobsAct retries, cancels or deletes the given jobs, or every job matching the
// filter (which must name a state), printing progress on errW(ctx).
func jobsAct(ctx context.Context, c *skiplock.Client, action string, ids []string, p skiplock.ListParams, reason string, out *outputFlag) error {
	act := func(id string) (*skiplock.Job, error) {
		switch action {
		case "retry":
			return c.JobRetry(ctx, id)
		case "cancel":
			return c.JobCancel(ctx, id, reason)
		}
		return c.JobDelete(ctx, id)
	}
	type result struct {
		ID    string `json:"id"`
		State string `json:"state,omitempty"`
		Error string `json:"error,omitempty"`
	}
	var results []result
	var failed int
	do := func(id string) {
		j, err := act(id)
		r := result{ID: id}
		if err != nil {
			r.Error = err.Error()
			failed++
		} else if action != "delete" {
			r.State = string(j.State)
		} else {
			r.State = "deleted"
		}
		results = append(results, r)
	}
	if len(ids) > 0 {
		for _, id := range ids {
			do(id)
		}
	} else {
		if len(p.States) == 0 {
			return fmt.Errorf("jobs %s: give job ids, or --state (with --queue/--kind) for a bulk %s", action, action)
		}
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
					fmt.Fprintf(errW(ctx), "%s: %d jobs (%d failed), %.0f/s\n", action, n, failed, float64(n)/time.Since(start).Seconds())
				}
			}
			if len(page) < p.Limit {
				break
			}
			p.AfterID = page[len(page)-1].ID
		}
		fmt.Fprintf(errW(ctx), "%s: %d jobs done, %d failed\n", action, n, failed)
	}
	if out.json() {
		if results == nil {
			results = []result{}
		}
		if err := printJSON(ctx, results); err != nil {
			return err
		}
	} else {
		tw := table(ctx)
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
	if failed > 0 {
		return fmt.Errorf("jobs %s: %d of %d failed", action, failed, len(results))
	}
	return nil
}
