package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/spf13/cobra"
)

func newQueuesCmd(db *dbFlags) *cobra.Command {
	return group("queues", "list queues with their state, pause or resume them (for every client at once)",
		newQueuesListCmd(db), newQueuePauseCmd(db, true), newQueuePauseCmd(db, false), newQueueDepthCmd(db))
}

func newQueuesListCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list every queue with jobs or settings: paused or active, pending, due, running, oldest due age",
		Args:  noArgs,
	}
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, _ []string) error {
		s, err := c.Stats(cmd.Context(), &skiplock.StatsOpts{SamplePages: -1, RecentWindow: -1})
		if err != nil {
			return err
		}
		settings, err := c.QueueList(cmd.Context())
		if err != nil {
			return err
		}
		pausedAt := map[string]time.Time{}
		for _, q := range settings {
			if q.Paused {
				pausedAt[q.Name] = q.PausedAt
			}
		}
		type queueView struct {
			Queue         string    `json:"queue"`
			Paused        bool      `json:"paused"`
			PausedAt      time.Time `json:"paused_at,omitzero"`
			Pending       int64     `json:"pending"`
			Due           int64     `json:"due"`
			Running       int64     `json:"running"`
			OldestDueSecs float64   `json:"oldest_due_age_seconds"`
		}
		views := []queueView{}
		for _, q := range s.Queues {
			views = append(views, queueView{Queue: q.Queue, Paused: q.Paused, PausedAt: pausedAt[q.Queue], Pending: q.Pending,
				Due: q.Due, Running: q.Running, OldestDueSecs: q.OldestDueAge.Seconds()})
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), views)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "QUEUE\tSTATE\tPENDING\tDUE\tRUNNING\tOLDEST_DUE")
		for _, v := range views {
			state := "active"
			if v.Paused {
				state = "paused since " + v.PausedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", v.Queue, state, v.Pending, v.Due, v.Running,
				(time.Duration(v.OldestDueSecs * float64(time.Second))).Round(time.Second))
		}
		return tw.Flush()
	})
	return cmd
}

func newQueuePauseCmd(db *dbFlags, pause bool) *cobra.Command {
	e := eachName{group: "queues", verb: "resume", what: "queue",
		short: "resume paused queues: every client claims their jobs again at once",
		check: ident.ValidateQueue, prepare: queuesPaused, act: func(cmd *cobra.Command, c *skiplock.Client, name string) error {
			return invalidAsUsage(cmd, c.QueueResume(cmd.Context(), name))
		}}
	if pause {
		// A queue no job names yet can be paused, ahead of its first job.
		e.verb, e.short, e.prepare = "pause", "pause queues for every client: no new claims (running jobs finish; enqueue still works)", nil
		e.act = func(cmd *cobra.Command, c *skiplock.Client, name string) error {
			return invalidAsUsage(cmd, c.QueuePause(cmd.Context(), name))
		}
	}
	return newEachNameCmd(db, e)
}

// queuesPaused checks that every queue to resume is paused: resuming an active queue
// would do nothing, and a misspelt name would look like success. It says which
// names no job and no setting knows.
func queuesPaused(cmd *cobra.Command, c *skiplock.Client, names []string) error {
	ctx := cmd.Context()
	settings, err := c.QueueList(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{} // queues with settings: paused or not
	paused := map[string]bool{}
	for _, q := range settings {
		known[q.Name], paused[q.Name] = true, q.Paused
	}
	var problems []string
	for _, name := range names {
		if paused[name] {
			continue
		}
		if !known[name] {
			jobs, err := c.JobList(ctx, skiplock.ListParams{Queue: name, Limit: 1})
			if err != nil {
				return err
			}
			known[name] = len(jobs) > 0
		}
		if known[name] {
			problems = append(problems, fmt.Sprintf("queue %s is not paused", name))
		} else {
			problems = append(problems, fmt.Sprintf("queue %s is not paused, and no job or setting names it (misspelt?)", name))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("queues resume: %s", strings.Join(problems, "; "))
	}
	return nil
}

func newQueueDepthCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "depth [queue]",
		Short: fmt.Sprintf("print how many jobs are due in a queue (or all queues), counted up to %d: what an autoscaler reads", skiplock.DepthCap),
		Long: fmt.Sprintf(`Print how many jobs of a queue are due — pending, with run_at passed — counted up to
%d (a larger backlog prints %d). Without a queue, every queue's due jobs together.

It runs one indexed statement, the SQL function queue_depth that KEDA's PostgreSQL
scaler can run itself (docs/operations.md, "Deploying"); scheduled, running and
finished jobs are not counted, a paused queue's due jobs are.`, skiplock.DepthCap, skiplock.DepthCap),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef(cmd, "%s: want at most one queue, got %d arguments", pathOf(cmd), len(args))
			}
			if len(args) == 1 {
				if err := ident.ValidateQueue(args[0]); err != nil {
					return usagef(cmd, "%s: %v", pathOf(cmd), err)
				}
			}
			return nil
		},
	}
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		queue := ""
		if len(args) == 1 {
			queue = args[0]
		}
		n, err := c.Depth(cmd.Context(), queue)
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), struct {
				Queue  string `json:"queue"`
				Depth  int64  `json:"depth"`
				Cap    int64  `json:"cap"`
				Capped bool   `json:"capped"`
			}{queue, n, skiplock.DepthCap, n >= skiplock.DepthCap})
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), n)
		return err
	})
	return cmd
}
