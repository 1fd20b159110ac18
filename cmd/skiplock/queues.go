package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/spf13/cobra"
)

func newQueuesCmd(db *dbFlags) *cobra.Command {
	return group("queues", "list queues with their state, pause or resume them, make them fair (for every client at once)",
		newQueuesListCmd(db), newQueuePauseCmd(db, true), newQueuePauseCmd(db, false), newQueueDepthCmd(db),
		newQueueFairCmd(db), newQueueWeightCmd(db), newQueueKeysCmd(db))
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
			Claimed       int64     `json:"claimed"`
			Running       int64     `json:"running"`
			OldestDueSecs float64   `json:"oldest_due_age_seconds"`
		}
		views := []queueView{}
		for _, q := range s.Queues {
			views = append(views, queueView{Queue: q.Queue, Paused: q.Paused, PausedAt: pausedAt[q.Queue], Pending: q.Pending,
				Due: q.Due, Claimed: q.Claimed, Running: q.Running, OldestDueSecs: q.OldestDueAge.Seconds()})
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), views)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "QUEUE\tSTATE\tPENDING\tDUE\tCLAIMED\tRUNNING\tOLDEST_DUE")
		for _, v := range views {
			state := "active"
			if v.Paused {
				state = "paused since " + v.PausedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", v.Queue, state, v.Pending, v.Due, v.Claimed, v.Running,
				(time.Duration(v.OldestDueSecs * float64(time.Second))).Round(time.Second))
		}
		return tw.Flush()
	})
	return cmd
}

func newQueuePauseCmd(db *dbFlags, pause bool) *cobra.Command {
	var ahead bool
	e := eachName{group: "queues", verb: "resume", what: "queue",
		short: "resume paused queues: every client claims their jobs again at once",
		check: ident.ValidateQueue, prepare: queuesKnown(false, nil), act: func(cmd *cobra.Command, c *skiplock.Client, name string) error {
			return invalidAsUsage(cmd, c.QueueResume(cmd.Context(), name))
		}}
	if pause {
		e.verb, e.short = "pause", "pause queues for every client: no new claims (running jobs finish; enqueue still works)"
		e.prepare = queuesKnown(true, &ahead)
		e.act = func(cmd *cobra.Command, c *skiplock.Client, name string) error {
			return invalidAsUsage(cmd, c.QueuePauseAhead(cmd.Context(), name))
		}
	}
	cmd := newEachNameCmd(db, e)
	if pause {
		cmd.Flags().BoolVar(&ahead, "ahead", false, "also pause queues nothing names yet (no job, schedule, limit or setting), ahead of their first job")
	}
	return cmd
}

// queuesKnown checks every name before the first action, as the library's
// QueuePause and QueueResume do: a queue nothing names is refused (misspelt?) unless
// ahead is set (pause --ahead). Resuming a queue that is not paused changes nothing:
// it is said on stderr, and the command goes on.
func queuesKnown(pause bool, ahead *bool) func(cmd *cobra.Command, c *skiplock.Client, names []string) error {
	return func(cmd *cobra.Command, c *skiplock.Client, names []string) error {
		var unknown []string
		for _, name := range names {
			q, err := c.QueueGet(cmd.Context(), name)
			switch {
			case errors.Is(err, skiplock.ErrQueueNotFound):
				if !pause || !*ahead {
					unknown = append(unknown, name)
				}
			case err != nil:
				return err
			case !pause && !q.Paused:
				fmt.Fprintf(cmd.ErrOrStderr(), "queue %s is not paused; resuming it changes nothing\n", name)
			}
		}
		if len(unknown) == 0 {
			return nil
		}
		hint := ""
		if pause {
			hint = " (to pause a queue ahead of its first job, add --ahead)"
		}
		return fmt.Errorf("queues %s: no job, schedule, limit or setting names queue %s: misspelt?%s",
			map[bool]string{true: "pause", false: "resume"}[pause], strings.Join(unknown, ", "), hint)
	}
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
