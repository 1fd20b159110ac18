package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

func init() {
	register("retention", "run retention now: delete old finished jobs, maintain partitions", runRetention)
	register("partitions", "convert jobs to the partitioned layout (enable) or list its partitions", runPartitions)
}

func runRetention(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("retention", flag.ContinueOnError)
	fs.SetOutput(errW(ctx))
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: skiplock retention run [--succeeded 168h] [--failed 168h] [--cancelled 168h] [--outbox-published 0] [--batch 1000]")
		fs.PrintDefaults()
	}
	var (
		db  dbFlags
		out outputFlag
		r   skiplock.RetentionConfig
	)
	db.register(fs)
	out.register(fs)
	fs.DurationVar(&r.Succeeded, "succeeded", skiplock.DefaultRetention, "keep succeeded jobs this long (negative: forever)")
	fs.DurationVar(&r.Failed, "failed", skiplock.DefaultRetention, "keep failed jobs this long (negative: forever)")
	fs.DurationVar(&r.Cancelled, "cancelled", skiplock.DefaultRetention, "keep cancelled jobs this long (negative: forever)")
	fs.DurationVar(&r.OutboxPublished, "outbox-published", 0, "also delete outbox events published longer ago (0: no)")
	fs.IntVar(&r.BatchSize, "batch", 1000, "rows per DELETE")
	if len(args) == 0 || args[0] != "run" {
		fs.Usage()
		return errors.New("retention: the subcommand is run")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := out.check(); err != nil {
		return err
	}
	pool, err := db.pool(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	r.MaxBatches = 100 // report progress every 100 batches
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: db.schema, Logger: db.logger(), Retention: r})
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
		fmt.Fprintf(errW(ctx), "retention: %d rows deleted, %.0f rows/s\n", n, float64(n)/time.Since(start).Seconds())
	}
	total.Duration = time.Since(start)
	if out.json() {
		return printJSON(ctx, total)
	}
	fmt.Fprintf(outW(ctx), "deleted %d succeeded, %d failed, %d cancelled jobs and %d outbox events in %s\n", total.Succeeded,
		total.Failed, total.Cancelled, total.OutboxPublished, total.Duration.Round(time.Millisecond))
	if total.Partitioned {
		fmt.Fprintf(outW(ctx), "partitions: created %v, dropped %v\n", total.PartitionsCreated, total.PartitionsDropped)
		for _, k := range total.PartitionsKept {
			fmt.Fprintf(outW(ctx), "kept %s: %s\n", k.Name, k.Reason)
		}
	}
	return nil
}

func runPartitions(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("partitions", flag.ContinueOnError)
	fs.SetOutput(errW(ctx))
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: skiplock partitions enable [--period day|week] [--premake 3] [--lock-timeout 5s]\n       skiplock partitions list")
		fs.PrintDefaults()
	}
	var (
		db          dbFlags
		out         outputFlag
		period      string
		premake     int
		lockTimeout time.Duration
	)
	db.register(fs)
	out.register(fs)
	fs.StringVar(&period, "period", "day", "enable: partition period, day or week")
	fs.IntVar(&premake, "premake", 3, "enable: periods created ahead")
	fs.DurationVar(&lockTimeout, "lock-timeout", 5*time.Second, "enable: longest wait for the lock on jobs")
	if len(args) == 0 {
		fs.Usage()
		return errors.New("partitions: missing subcommand (enable or list)")
	}
	sub := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := out.check(); err != nil {
		return err
	}
	pool, err := db.pool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	switch sub {
	case "enable":
		rep, err := skiplock.PartitionJobs(ctx, pool, db.schema, skiplock.PartitionOptions{
			Period: skiplock.PartitionPeriod(period), Premake: premake, LockTimeout: lockTimeout, Progress: errW(ctx)})
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(ctx, rep)
		}
		_, err = fmt.Fprintf(outW(ctx), "jobs is partitioned: legacy partition until %s, created %v, %d deduplication keys copied, lock held %s\n",
			rep.LegacyUntil.Format(time.RFC3339), rep.Created, rep.DedupKeys, rep.LockHeld.Round(time.Millisecond))
		return err
	case "list":
		c, err := skiplock.NewClient(pool, skiplock.Config{Schema: db.schema})
		if err != nil {
			return err
		}
		defer c.Close()
		parts, err := c.Partitions(ctx)
		if err != nil {
			return err
		}
		if out.json() {
			if parts == nil {
				parts = []skiplock.PartitionInfo{}
			}
			return printJSON(ctx, parts)
		}
		tw := table(ctx)
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
	return fmt.Errorf("partitions: unknown subcommand %q (enable, list)", sub)
}
