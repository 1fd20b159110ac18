package main

import (
	"fmt"
	"math"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/spf13/cobra"
)

func newRetentionCmd(db *dbFlags) *cobra.Command {
	var r skiplock.RetentionConfig
	run := &cobra.Command{
		Use:   "run [--succeeded 168h] [--failed 168h] [--cancelled 168h] [--outbox-published 0] [--batch 1000]",
		Short: "delete old finished jobs (and published outbox events) now, and maintain partitions",
		Args:  noArgs,
	}
	fs := run.Flags()
	fs.DurationVar(&r.Succeeded, "succeeded", skiplock.DefaultRetention, "keep succeeded jobs this long (0: keep none; negative: keep forever)")
	fs.DurationVar(&r.Failed, "failed", skiplock.DefaultRetention, "keep failed jobs this long (0: keep none; negative: keep forever)")
	fs.DurationVar(&r.Cancelled, "cancelled", skiplock.DefaultRetention, "keep cancelled jobs this long (0: keep none; negative: keep forever)")
	durationFlag(run, &r.OutboxPublished, "outbox-published", 0, "also delete outbox events published longer ago (0: no)")
	intFlag(run, &r.BatchSize, "batch", 1000, 1, math.MaxInt, "rows per DELETE, 1 or more")
	out := newOutputFlag(run)
	run.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		// In RetentionConfig 0 is the 7-day default; here it keeps none: the
		// shortest retention there is.
		for _, d := range []*time.Duration{&r.Succeeded, &r.Failed, &r.Cancelled} {
			if *d == 0 {
				*d = time.Nanosecond
			}
		}
		pool, err := db.pool(cmd, 4)
		if err != nil {
			return err
		}
		defer pool.Close()
		r.MaxBatches = 100 // report progress every 100 batches
		c, err := skiplock.NewClient(pool, skiplock.Config{Schema: db.schemaName(), Logger: db.logger(cmd), Retention: r})
		if err != nil {
			return err
		}
		defer c.Close()
		var total skiplock.RetentionResult
		start := time.Now()
		for {
			res, err := c.RunRetention(ctx)
			if err != nil {
				return err
			}
			total.Succeeded += res.Succeeded
			total.Failed += res.Failed
			total.Cancelled += res.Cancelled
			total.OutboxPublished += res.OutboxPublished
			total.Partitioned = res.Partitioned
			total.PartitionsCreated = append(total.PartitionsCreated, res.PartitionsCreated...)
			total.PartitionsDropped = append(total.PartitionsDropped, res.PartitionsDropped...)
			total.PartitionsKept = res.PartitionsKept
			if !res.Incomplete {
				break
			}
			n := total.Deleted() + total.OutboxPublished
			fmt.Fprintf(cmd.ErrOrStderr(), "retention: %d rows deleted, %.0f rows/s\n", n, float64(n)/time.Since(start).Seconds())
		}
		total.Duration = time.Since(start)
		w := cmd.OutOrStdout()
		if out.json() {
			return printJSON(w, total)
		}
		fmt.Fprintf(w, "deleted %d succeeded, %d failed, %d cancelled jobs and %d outbox events in %s\n", total.Succeeded,
			total.Failed, total.Cancelled, total.OutboxPublished, total.Duration.Round(time.Millisecond))
		if total.Partitioned {
			fmt.Fprintf(w, "partitions: created %v, dropped %v\n", total.PartitionsCreated, total.PartitionsDropped)
			for _, k := range total.PartitionsKept {
				fmt.Fprintf(w, "kept %s: %s\n", k.Name, k.Reason)
			}
		}
		return nil
	}
	return group("retention", "run retention now: delete old finished jobs, maintain partitions", run)
}

// maxPremake is the most periods skiplock.PartitionJobs creates ahead.
const maxPremake = 60

func newPartitionsCmd(db *dbFlags) *cobra.Command {
	var (
		period      = enumFlag{value: "day", valid: []string{"day", "week"}}
		premake     int
		lockTimeout time.Duration
	)
	enable := &cobra.Command{
		Use:   "enable [--period day|week] [--premake 3] [--lock-timeout 5s]",
		Short: "convert jobs to the partitioned layout (takes the lock on jobs briefly)",
		Args:  noArgs,
	}
	addEnum(enable, &period, "period", "", "partition period")
	intFlag(enable, &premake, "premake", 3, 1, maxPremake, fmt.Sprintf("periods created ahead, counting the current one, 1..%d", maxPremake))
	durationFlag(enable, &lockTimeout, "lock-timeout", 5*time.Second, "longest wait for the lock on jobs (0: the default, 5s)")
	enableOut := newOutputFlag(enable)
	enable.RunE = func(cmd *cobra.Command, _ []string) error {
		pool, err := db.pool(cmd, 2)
		if err != nil {
			return err
		}
		defer pool.Close()
		rep, err := skiplock.PartitionJobs(cmd.Context(), pool, db.schemaName(), skiplock.PartitionOpts{
			Period: skiplock.PartitionPeriod(period.value), Premake: premake, LockTimeout: lockTimeout, Progress: cmd.ErrOrStderr()})
		if err != nil {
			return invalidAsUsage(cmd, err)
		}
		if enableOut.json() {
			return printJSON(cmd.OutOrStdout(), rep)
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "jobs is partitioned: legacy partition until %s, created %v, %d deduplication keys copied, lock held %s\n",
			rep.LegacyUntil.Format(time.RFC3339), rep.Created, rep.DedupKeys, rep.LockHeld.Round(time.Millisecond))
		return err
	}

	list := &cobra.Command{
		Use:   "list",
		Short: "list the partitions of jobs with their ranges, estimated rows and size",
		Args:  noArgs,
	}
	listOut := newOutputFlag(list)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		c, done, err := db.client(cmd, 2)
		if err != nil {
			return err
		}
		defer done()
		parts, err := c.Partitions(cmd.Context())
		if err != nil {
			return err
		}
		if listOut.json() {
			if parts == nil {
				parts = []skiplock.PartitionInfo{}
			}
			return printJSON(cmd.OutOrStdout(), parts)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "PARTITION\tFROM\tTO\tROWS(EST)\tSIZE")
		f := func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return t.Format(time.DateTime)
		}
		for _, p := range parts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f MB\n", p.Name, f(p.From), f(p.To), p.Rows, float64(p.Bytes)/1e6)
		}
		return tw.Flush()
	}
	return group("partitions", "convert jobs to the partitioned layout (enable) or list its partitions", enable, list)
}
