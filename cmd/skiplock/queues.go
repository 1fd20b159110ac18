package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/spf13/cobra"
)

func newQueuesCmd(db *dbFlags) *cobra.Command {
	return group("queues", "list queues with their state, pause or resume them (for every client at once)",
		newQueuesListCmd(db), newQueuePauseCmd(db, true), newQueuePauseCmd(db, false))
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
	verb, short := "resume", "resume paused queues: every client claims their jobs again at once"
	if pause {
		verb, short = "pause", "pause queues for every client: no new claims (running jobs finish; enqueue still works)"
	}
	return newEachNameCmd(db, "queues", verb, "queue", short, func(cmd *cobra.Command, c *skiplock.Client, name string) error {
		act := c.QueueResume
		if pause {
			act = c.QueuePause
		}
		if err := act(cmd.Context(), name); err != nil {
			if errors.Is(err, skiplock.ErrInvalid) {
				return usagef(cmd, "%v", err)
			}
			return err
		}
		return nil
	})
}
