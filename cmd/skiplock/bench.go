package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/skiplock/skiplock/internal/bench"
	"github.com/skiplock/skiplock/internal/pgcluster"
)

func init() {
	register("bench", "run the benchmark workloads (B0, B1, W1…W8) and print the figures", runBench)
}

func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var db dbFlags
	db.register(fs)
	workloads := fs.String("workload", "all", "workloads to run: all, or a list such as W1,W5")
	asJSON := fs.Bool("json", false, "print one JSON object per workload instead of the table")
	relaxed := fs.Bool("relaxed", false, "throwaway cluster without durability (fsync=off); labelled in every line")
	scale := fs.Float64("scale", 1, "multiply every workload's size (for a quick look: 0.1)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (the Go side) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	selected, err := bench.Select(*workloads)
	if err != nil {
		return err
	}
	settings := "external database (as configured)"
	url := db.url
	if url == "" {
		fmt.Fprintln(os.Stderr, "bench: starting a throwaway PostgreSQL cluster (durable settings: fsync=on, synchronous_commit=on)…")
		c, err := pgcluster.Start(ctx, pgcluster.Options{Durable: !*relaxed})
		if err != nil {
			return err
		}
		defer c.Stop()
		url = c.URL
		settings = "throwaway PostgreSQL, durable: fsync=on synchronous_commit=on"
		if *relaxed {
			settings = "RELAXED — fsync=off synchronous_commit=off (not a durability benchmark)"
		}
	}
	db.url = url
	pool, err := db.pool(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	var version string
	pool.QueryRow(ctx, "SHOW server_version").Scan(&version)
	settings += "; PostgreSQL " + version
	env := &bench.Env{Pool: pool, URL: url, Settings: settings, Progress: os.Stderr, Scale: *scale}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var results []*bench.Result
	start := time.Now()
	for _, w := range selected {
		fmt.Fprintf(os.Stderr, "bench: %s — %s\n", w.Name, w.Title)
		r, err := w.Run(ctx, env)
		if err != nil {
			return fmt.Errorf("%s: %w", w.Name, err)
		}
		r.Title = w.Title
		results = append(results, r)
		if *asJSON {
			bench.JSON(os.Stdout, []*bench.Result{r})
		}
	}
	if !*asJSON {
		fmt.Println()
		bench.Table(os.Stdout, results)
	}
	fmt.Fprintf(os.Stderr, "bench: done in %s\n", time.Since(start).Round(time.Second))
	return nil
}
