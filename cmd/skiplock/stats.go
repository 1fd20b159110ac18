package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

func init() {
	register("stats", "print per-queue counts, the oldest due job's age and the outbox lag (--watch to repeat)", runStats)
}

// queueJSON is one queue's figures as the CLI prints them.
type queueJSON struct {
	Queue               string  `json:"queue"`
	Pending             int64   `json:"pending"`
	Due                 int64   `json:"due"`
	Running             int64   `json:"running"`
	Succeeded           int64   `json:"succeeded"`
	Failed              int64   `json:"failed"`
	Cancelled           int64   `json:"cancelled"`
	ExpiredLeases       int64   `json:"expired_leases"`
	OldestDueAgeSeconds float64 `json:"oldest_due_age_seconds"`
}

// statsJSON is Stats as the CLI prints it (durations in seconds).
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
	TookSeconds float64 `json:"took_seconds"`
}

func statsToJSON(s *skiplock.Stats, took time.Duration) statsJSON {
	j := statsJSON{Queues: []queueJSON{}}
	for _, q := range s.Queues {
		j.Queues = append(j.Queues, queueJSON{Queue: q.Queue, Pending: q.Pending, Due: q.Due, Running: q.Running,
			Succeeded: q.Succeeded, Failed: q.Failed, Cancelled: q.Cancelled, ExpiredLeases: q.ExpiredLeases,
			OldestDueAgeSeconds: q.OldestDueAge.Seconds()})
	}
	j.FinishedEstimated = s.FinishedEstimated
	j.Recent.WindowSeconds = s.Recent.Window.Seconds()
	j.Recent.Succeeded, j.Recent.Failed, j.Recent.Cancelled = s.Recent.Succeeded, s.Recent.Failed, s.Recent.Cancelled
	j.Outbox.Unpublished, j.Outbox.LagSeconds, j.Outbox.Dead = s.Outbox.Unpublished, s.Outbox.OldestUnpublishedAge.Seconds(), s.Outbox.Dead
	j.TookSeconds = took.Seconds()
	return j
}

func runStats(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(errW(ctx))
	var (
		db    dbFlags
		out   outputFlag
		watch time.Duration
		exact bool
	)
	db.register(fs)
	out.register(fs)
	fs.DurationVar(&watch, "watch", 0, "repeat every interval (e.g. 2s) until interrupted")
	fs.BoolVar(&exact, "exact", false, "count finished jobs exactly (reads the whole table)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := out.check(); err != nil {
		return err
	}
	c, done, err := opsClient(ctx, &db, 2)
	if err != nil {
		return err
	}
	defer done()
	opts := skiplock.StatsOptions{}
	if exact {
		opts.SamplePages = 1 << 62
	}
	for {
		start := time.Now()
		s, err := c.StatsWith(ctx, opts)
		if err != nil {
			return err
		}
		took := time.Since(start)
		if out.json() {
			if err := printJSON(ctx, statsToJSON(s, took)); err != nil {
				return err
			}
		} else {
			if watch > 0 {
				fmt.Fprint(outW(ctx), "\033[H\033[2J")
			}
			printStats(ctx, s, took)
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

func printStats(ctx context.Context, s *skiplock.Stats, took time.Duration) {
	tw := table(ctx)
	est := ""
	if s.FinishedEstimated {
		est = "~"
	}
	fmt.Fprintln(tw, "QUEUE\tPENDING\tDUE\tOLDEST_DUE\tRUNNING\tEXPIRED\tSUCCEEDED\tFAILED\tCANCELLED")
	for _, q := range s.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s%d\t%s%d\t%s%d\n", q.Queue, q.Pending, q.Due, q.OldestDueAge.Round(time.Millisecond),
			q.Running, q.ExpiredLeases, est, q.Succeeded, est, q.Failed, est, q.Cancelled)
	}
	tw.Flush()
	r := s.Recent
	fmt.Fprintf(outW(ctx), "\nlast %s: %d succeeded, %d failed, %d cancelled (%.1f jobs/s)\n", r.Window, r.Succeeded, r.Failed,
		r.Cancelled, float64(r.Succeeded+r.Failed+r.Cancelled)/max(r.Window.Seconds(), 1))
	fmt.Fprintf(outW(ctx), "outbox: %d unpublished, lag %s, %d dead\n", s.Outbox.Unpublished,
		s.Outbox.OldestUnpublishedAge.Round(time.Millisecond), s.Outbox.Dead)
	if s.FinishedEstimated {
		fmt.Fprintln(outW(ctx), "~ estimated from a sample of the table (--exact to count)")
	}
	fmt.Fprintf(outW(ctx), "(read in %s)\n", took.Round(100*time.Microsecond))
}
