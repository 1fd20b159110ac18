package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/spf13/cobra"
)

// queueJSON is one queue's figures as the CLI prints them.
type queueJSON struct {
	Queue               string  `json:"queue"`
	Pending             int64   `json:"pending"`
	Due                 int64   `json:"due"`
	Claimed             int64   `json:"claimed"`
	Running             int64   `json:"running"`
	Succeeded           int64   `json:"succeeded"`
	Failed              int64   `json:"failed"`
	Cancelled           int64   `json:"cancelled"`
	ExpiredLeases       int64   `json:"expired_leases"`
	OldestDueAgeSeconds float64 `json:"oldest_due_age_seconds"`
	Paused              bool    `json:"paused"`
	Retrying            int64   `json:"retrying"`
	BlockedSequences    int64   `json:"blocked_sequences"`
	Waiting             int64   `json:"waiting"`
}

// statsJSON is Stats as the CLI prints it: durations in seconds (encoding/json
// would give a time.Duration in nanoseconds), and without the counters of this
// process, which are all zero in a CLI.
type statsJSON struct {
	Queues            []queueJSON `json:"queues"`
	FinishedEstimated bool        `json:"finished_estimated"`
	Recent            struct {
		WindowSeconds float64 `json:"window_seconds"`
		Succeeded     int64   `json:"succeeded"`
		Failed        int64   `json:"failed"`
		Cancelled     int64   `json:"cancelled"`
	} `json:"recent"`
	Outbox struct {
		Unpublished int64   `json:"unpublished"`
		LagSeconds  float64 `json:"lag_seconds"`
		Dead        int64   `json:"dead"`
	} `json:"outbox"`
	// Waiting counts flow parents and batch callbacks not yet released; OpenBatches
	// the batches whose completion callback has not fired.
	Waiting     int64 `json:"waiting"`
	OpenBatches int64 `json:"open_batches"`
	// VacuumHorizon is Stats.Horizon; held_for_seconds is null when not known.
	VacuumHorizon struct {
		Holder         string   `json:"holder"`
		PID            int      `json:"pid,omitempty"`
		Name           string   `json:"name,omitempty"`
		State          string   `json:"state,omitempty"`
		XIDAge         int64    `json:"xid_age"`
		HeldForSeconds *float64 `json:"held_for_seconds"`
		DeadJobTuples  int64    `json:"dead_job_tuples"`
	} `json:"vacuum_horizon"`
	// Limits is each limit's use per bucket (limits usage), absent when there is no
	// limit.
	Limits []limitUsageJSON `json:"limits,omitempty"`
	// Fair is each fair queue's top keys by due jobs (queues keys), absent when
	// no queue is fair.
	Fair        []fairQueueJSON `json:"fair,omitempty"`
	TookSeconds float64         `json:"took_seconds"`
}

func statsToJSON(s *skiplock.Stats, lim *limitsRead, took time.Duration) statsJSON {
	j := statsJSON{Queues: []queueJSON{}}
	for _, q := range s.Queues {
		j.Queues = append(j.Queues, queueJSON{Queue: q.Queue, Pending: q.Pending, Due: q.Due, Claimed: q.Claimed, Running: q.Running,
			Succeeded: q.Succeeded, Failed: q.Failed, Cancelled: q.Cancelled, ExpiredLeases: q.ExpiredLeases,
			OldestDueAgeSeconds: q.OldestDueAge.Seconds(), Paused: q.Paused, Retrying: q.Retrying,
			BlockedSequences: q.BlockedSequences, Waiting: q.Waiting})
	}
	j.FinishedEstimated = s.FinishedEstimated
	j.Waiting, j.OpenBatches = s.Waiting, s.OpenBatches
	j.Recent.WindowSeconds = s.Recent.Window.Seconds()
	j.Recent.Succeeded, j.Recent.Failed, j.Recent.Cancelled = s.Recent.Succeeded, s.Recent.Failed, s.Recent.Cancelled
	j.Outbox.Unpublished, j.Outbox.LagSeconds, j.Outbox.Dead = s.Outbox.Unpublished, s.Outbox.OldestUnpublishedAge.Seconds(), s.Outbox.Dead
	h, vh := s.Horizon, &j.VacuumHorizon
	vh.Holder, vh.PID, vh.Name, vh.State, vh.XIDAge, vh.DeadJobTuples = h.Holder, h.PID, h.Name, h.State, h.XIDAge, h.DeadJobTuples
	if h.HeldForKnown {
		secs := h.HeldFor.Seconds()
		vh.HeldForSeconds = &secs
	}
	for _, u := range lim.usage {
		j.Limits = append(j.Limits, limitUsageToJSON(u))
	}
	j.Fair = fairToJSON(lim.fair)
	j.TookSeconds = took.Seconds()
	return j
}

// limitsRead is what stats shows besides the queues' figures: every limit and its
// buckets' use, and the fair queues' keys (fair.go).
type limitsRead struct {
	limits []skiplock.Limit
	usage  []skiplock.LimitUsage
	fair   []fairRead
}

// readLimits reads the limits and, when there are any, their usage, and the fair
// queues' keys.
func readLimits(cmd *cobra.Command, c *skiplock.Client) (*limitsRead, error) {
	var r limitsRead
	var err error
	if r.fair, err = readFair(cmd, c); err != nil {
		return &r, err
	}
	if r.limits, err = c.LimitList(cmd.Context()); err != nil || len(r.limits) == 0 {
		return &r, err
	}
	r.usage, err = c.LimitUsages(cmd.Context())
	return &r, err
}

func newStatsCmd(db *dbFlags) *cobra.Command {
	var (
		watch time.Duration
		exact bool
	)
	cmd := &cobra.Command{
		Use:   "stats [--watch 2s] [--exact]",
		Short: "print per-queue counts, the oldest due job's age, the outbox lag, the limits' use, fair queues' top keys and what holds back vacuum",
		Args:  noArgs,
	}
	durationFlag(cmd, &watch, "watch", 0, "repeat every interval (e.g. 2s) until interrupted (0: print once)")
	cmd.Flags().BoolVar(&exact, "exact", false, "count finished jobs exactly (reads the whole table)")
	out := newOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		c, done, err := db.client(cmd, 2)
		if err != nil {
			return err
		}
		defer done()
		opts := skiplock.StatsOpts{}
		if exact {
			opts.SamplePages = 1 << 62
		}
		w := cmd.OutOrStdout()
		clearScreen := watch > 0 && isTerminal(w)
		for n := 0; ; n++ {
			start := time.Now()
			s, err := c.Stats(ctx, &opts)
			if err != nil {
				return err
			}
			lim, err := readLimits(cmd, c)
			if err != nil {
				return err
			}
			took := time.Since(start)
			if out.json() {
				if err := printJSON(cmd.OutOrStdout(), statsToJSON(s, lim, took)); err != nil {
					return err
				}
			} else {
				switch {
				case clearScreen:
					fmt.Fprint(w, "\033[H\033[2J")
				case watch > 0:
					// Piped to a file or a pager, where the escape sequences would be
					// noise: the reports follow each other, each under the time it was read.
					if n > 0 {
						fmt.Fprintln(w)
					}
					fmt.Fprintf(w, "stats at %s\n", start.Format(time.RFC3339))
				}
				printStats(w, s, lim, took)
			}
			if watch <= 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(watch):
			}
		}
	}
	return cmd
}

// isTerminal reports whether w is a terminal: an *os.File that is a character
// device (a pipe, a regular file or a buffer is not).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func printStats(w io.Writer, s *skiplock.Stats, lim *limitsRead, took time.Duration) {
	tw := newTable(w)
	est := ""
	if s.FinishedEstimated {
		est = "~"
	}
	fmt.Fprintln(tw, "QUEUE\tSTATE\tPENDING\tDUE\tOLDEST_DUE\tCLAIMED\tRUNNING\tEXPIRED\tRETRYING\tBLOCKED_SEQ\tWAITING\tSUCCEEDED\tFAILED\tCANCELLED")
	for _, q := range s.Queues {
		state := "active"
		if q.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s%d\t%s%d\t%s%d\n", q.Queue, state, q.Pending, q.Due,
			q.OldestDueAge.Round(time.Millisecond), q.Claimed, q.Running, q.ExpiredLeases, q.Retrying, q.BlockedSequences, q.Waiting,
			est, q.Succeeded, est, q.Failed, est, q.Cancelled)
	}
	tw.Flush()
	r := s.Recent
	fmt.Fprintf(w, "\nlast %s: %d succeeded, %d failed, %d cancelled (%.1f jobs/s)\n", r.Window, r.Succeeded, r.Failed,
		r.Cancelled, float64(r.Succeeded+r.Failed+r.Cancelled)/max(r.Window.Seconds(), 1))
	fmt.Fprintf(w, "outbox: %d unpublished, lag %s, %d dead\n", s.Outbox.Unpublished,
		s.Outbox.OldestUnpublishedAge.Round(time.Millisecond), s.Outbox.Dead)
	if s.Waiting > 0 || s.OpenBatches > 0 {
		fmt.Fprintf(w, "flows and batches: %d waiting jobs, %d open batches\n", s.Waiting, s.OpenBatches)
	}
	fmt.Fprintf(w, "vacuum horizon: %s; jobs: %d dead tuples\n", s.Horizon, s.Horizon.DeadJobTuples)
	printLimits(w, lim.limits, lim.usage)
	printFair(w, lim.fair)
	if s.FinishedEstimated {
		fmt.Fprintln(w, "~ estimated from a sample of the table (--exact to count)")
	}
	fmt.Fprintf(w, "(read in %s)\n", took.Round(100*time.Microsecond))
}
