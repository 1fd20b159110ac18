package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/bench"
	"github.com/skiplock/skiplock/internal/pgcluster"
	"github.com/spf13/cobra"
)

func newBenchCmd(db *dbFlags) *cobra.Command {
	var (
		workloads  string
		asJSON     bool
		relaxed    bool
		scale      float64
		runs       int
		cpuProfile string
		selected   []bench.Workload
	)
	cmd := &cobra.Command{
		Use:   "bench [--workload W1,W5] [--runs 3] [-o json] [--scale 0.1]",
		Short: "run the benchmark workloads (B0…B3, W1…W14, W10C, W10L, W5PY, W13, E1, F1, D1, G1) and print the figures",
		Long: `Run the benchmark workloads (B0…B3, W1…W14, W10C, W10L, W5PY, W13, E1, F1, D1, G1) and print the figures,
each job checked for exactly-once success (D1 times the dashboard's pages on
1,000,000 jobs instead; G1 works jobs through the HTTP worker gateway). W10, its control W10C (the same timeline
with no pin) and W10L (W10 on a queue under a limit that never binds) take 13 minutes
each and run only when named. W5PY (W5's jobs worked by the Python client,
clients/python, on the SQL worker protocol) runs only when named, from the repository
(or with SKIPLOCK_PYTHON_CLIENT set) and with /usr/bin/python3's psycopg (or
SKIPLOCK_PYTHON); so does W13 (the Node client's worker against the Go
worker: it needs node and clients/node built, found from the working directory or
$SKIPLOCK_NODE_CLIENT), and E1 (the per-enqueue cost breakdown of
docs/enqueue_cost.md, about 4 minutes). W14 (hours without drift: 70% of W5's rate for 30 minutes,
a control run then a disturbed one with a held snapshot and analytic reads) takes an
hour at --scale 1 and runs only when named (SKIPLOCK_W14_RATE=N offers N jobs/s instead, to
compare two builds on a machine whose W5 moves). Without --database-url or DATABASE_URL it starts a
durable throwaway PostgreSQL (fsync=on, synchronous_commit=on). With -o json it prints
one JSON object per workload as each finishes.

With --runs N the selected workloads run N times in turn, each run with its own
baselines, and a last table gives the median of each figure over the runs (each
percentile the median of that percentile), judged against the target, and how many
runs met it. Disk-sync speed swings between minutes on one machine: judge latency
over several runs (W6's target is stated as the median of 3).`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&workloads, "workload", "all", "workloads to run: all, or a list such as W1,W5")
	out := newOutputFlag(cmd)
	fs.BoolVar(&asJSON, "json", false, "same as -o json")
	_ = fs.MarkHidden("json") // deprecated; kept so existing scripts keep working
	fs.BoolVar(&relaxed, "relaxed", false, "throwaway cluster without durability (fsync=off); labelled in every line")
	fs.Float64Var(&scale, "scale", 1, "multiply every workload's size (for a quick look: 0.1)")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the Go side) to this file")
	fs.IntVar(&runs, "runs", 1, "run the workloads this many times and add the median of each figure")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if asJSON {
			fmt.Fprintln(cmd.ErrOrStderr(), "bench: --json is deprecated; use -o json")
			out.value = "json"
		}
		if scale <= 0 {
			return usagef(cmd, "bench: --scale %g: want a positive factor", scale)
		}
		if runs < 1 {
			return usagef(cmd, "bench: --runs %d: want 1 or more", runs)
		}
		var err error
		if selected, err = bench.Select(workloads); err != nil {
			return usagef(cmd, "bench: --workload: %v", err)
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		stderr := cmd.ErrOrStderr()
		pool, where, cleanup, err := throwawayOrNamed(cmd, db, pgcluster.Options{Durable: !relaxed}, 4)
		if err != nil {
			return err
		}
		defer cleanup()
		settings := "external database (as configured)"
		url := pool.Config().ConnConfig.ConnString()
		if where == "throwaway" {
			settings = "throwaway PostgreSQL, durable: fsync=on synchronous_commit=on"
			if relaxed {
				settings = "RELAXED — fsync=off synchronous_commit=off (not a durability benchmark)"
			}
		}
		var version string
		if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err == nil {
			settings += "; PostgreSQL " + version
		}
		env := &bench.Env{Pool: pool, URL: url, Settings: settings, Progress: stderr, Scale: scale}
		if cpuProfile != "" {
			f, err := os.Create(cpuProfile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		var all [][]*bench.Result
		start := time.Now()
		stdout := cmd.OutOrStdout()
		for run := 1; run <= runs; run++ {
			var results []*bench.Result
			label := "" // which run, when there are several
			if runs > 1 {
				label = fmt.Sprintf("run %d of %d: ", run, runs)
			}
			for _, w := range selected {
				fmt.Fprintf(stderr, "bench: %s%s — %s\n", label, w.Name, w.Title)
				r, err := w.Run(ctx, env)
				if err != nil {
					return fmt.Errorf("%s%s: %w", label, w.Name, err)
				}
				r.Title = w.Title
				if runs > 1 {
					r.Run = run
				}
				results = append(results, r)
				if out.json() {
					if err := bench.JSON(stdout, []*bench.Result{r}); err != nil {
						return err
					}
				}
			}
			all = append(all, results)
			if !out.json() {
				fmt.Fprintln(stdout)
				if runs > 1 {
					fmt.Fprintf(stdout, "run %d of %d\n", run, runs)
				}
				bench.Table(stdout, results)
			}
		}
		if runs > 1 {
			summary := bench.Summarize(all)
			if out.json() {
				if err := bench.JSON(stdout, summary); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(stdout, "\nmedian of %d runs\n", runs)
				bench.Table(stdout, summary)
			}
		}
		fmt.Fprintf(stderr, "bench: done in %s\n", time.Since(start).Round(time.Second))
		return nil
	}
	return cmd
}
