package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
		citus      bool
		citusURL   string
		citusKeys  int
	)
	cmd := &cobra.Command{
		Use:   "bench [--workload W1,W5] [--runs 3] [-o json] [--scale 0.1]",
		Short: "run the benchmark workloads (B0…B3, W1…W14, W10C, W10L, W5PY, W13, E1, F1, D1, G1, C1, CH, CN, CQ) and print the figures",
		Long: `Run the benchmark workloads (B0…B3, W1…W14, W10C, W10L, W5PY, W13, E1, F1, D1, G1, C1, CH, CN, CQ) and print the figures,
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
over several runs (W6's target is stated as the median of 3).

On Citus (docs/citus.md, "Benchmarks on the cluster"): when the database is a Citus
coordinator (or with --citus), W3, W5 and W6 run on the distributed layout, their jobs
over --citus-keys concurrency keys, the working clients with DeleteOnSuccess and without
the scheduler and the retention service, as Citus requires; --citus=false runs plain
tables on the coordinator instead. --citus-url names a cluster's coordinator beside the
plain node (the throwaway PostgreSQL, or --database-url) for the cluster workloads, which
run only when named: C1 (W3, W5 and W6 on both, with ratios), CH (the router hop per
statement), CN (per-node CPU and the model of jobs/s per added worker node) and CQ (the
quiet keys' wait while key A holds 1,000,000 jobs). To compare like with like against
scripts/citus.sh's cluster (fsync off), add --relaxed:

  skiplock bench --relaxed --citus-url "$(bash scripts/citus.sh url)" --workload C1,CH,CN,CQ`,
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
	fs.BoolVar(&citus, "citus", false, "the database is a Citus coordinator: lay the schemas out for Citus (default: detected; --citus=false for plain tables)")
	fs.StringVar(&citusURL, "citus-url", "", "a Citus coordinator beside the plain node, for C1, CH, CN and CQ (bash scripts/citus.sh url)")
	fs.IntVar(&citusKeys, "citus-keys", bench.CitusKeys, "on Citus, the concurrency keys the jobs are spread over")
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
		if citusKeys < 1 {
			return usagef(cmd, "bench: --citus-keys %d: want 1 or more", citusKeys)
		}
		var err error
		if citus {
			selected, err = bench.SelectCitus(workloads)
		} else {
			selected, err = bench.Select(workloads)
		}
		if err != nil {
			return usagef(cmd, "bench: --workload: %v", err)
		}
		cluster, plain := bench.NeedsCluster(selected)
		switch {
		case cluster && citusURL == "" && db.connString() == "":
			return usagef(cmd, "bench: C1, CH, CN and CQ run on a Citus cluster: name its coordinator with --citus-url (bash scripts/citus.sh start prints one)")
		case plain && citusURL == "":
			return usagef(cmd, "bench: C1 and CH compare a plain node with a cluster: name the cluster's coordinator with --citus-url")
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
		isCoord, err := citusCoordinator(ctx, pool)
		if err != nil {
			return err
		}
		switch {
		case cmd.Flags().Changed("citus") && citus && !isCoord:
			return fmt.Errorf("bench: --citus: %s is not a Citus coordinator with active worker nodes", where)
		case !cmd.Flags().Changed("citus") && isCoord:
			fmt.Fprintln(stderr, "bench: the database is a Citus coordinator: the schemas take the distributed layout (--citus=false for plain tables)")
			citus = true
			if selected, err = bench.SelectCitus(workloads); err != nil {
				return usagef(cmd, "bench: --workload: %v (the database is a Citus coordinator)", err)
			}
		}
		if citus {
			env.Citus, env.Keys, env.DeleteOnSuccess = true, citusKeys, true
			env.Settings += fmt.Sprintf("; Citus layout, jobs over %d keys, DeleteOnSuccess", citusKeys)
		}
		if citusURL != "" {
			cl, closeCluster, err := openCluster(cmd, ctx, citusURL, citusKeys, scale)
			if err != nil {
				return err
			}
			defer closeCluster()
			env.Cluster = cl
		}
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

// citusCoordinator reports whether pool's database is a Citus coordinator with active
// worker nodes.
func citusCoordinator(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var ext bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&ext); err != nil || !ext {
		return false, err
	}
	var coordinator bool
	var workers int
	if err := pool.QueryRow(ctx, `SELECT citus_is_coordinator(), (SELECT count(*) FROM pg_dist_node WHERE isactive AND noderole = 'primary' AND groupid <> 0)`).Scan(&coordinator, &workers); err != nil {
		return false, fmt.Errorf("bench: reading the Citus nodes: %w", err)
	}
	if !coordinator && workers > 0 {
		return false, errors.New("bench: the database is a Citus worker node: point the bench at the coordinator (bash scripts/citus.sh url)")
	}
	return coordinator && workers > 0, nil
}

// openCluster connects to the Citus coordinator at url (--citus-url) and returns the
// cluster's environment.
func openCluster(cmd *cobra.Command, ctx context.Context, url string, keys int, scale float64) (*bench.Env, func(), error) {
	cfg, err := poolConfig(cmd, url, 4)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: --citus-url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("bench: --citus-url: connecting to %s: %w", target(url, cfg), err)
	}
	ok, err := citusCoordinator(ctx, pool)
	if err == nil && !ok {
		err = fmt.Errorf("bench: --citus-url: %s is not a Citus coordinator with active worker nodes", target(url, cfg))
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	var version string
	var workers int
	_ = pool.QueryRow(ctx, `SELECT (SELECT extversion FROM pg_extension WHERE extname = 'citus'), (SELECT count(*) FROM pg_dist_node WHERE isactive AND noderole = 'primary' AND groupid <> 0)`).Scan(&version, &workers)
	settings := fmt.Sprintf("Citus %s cluster, a coordinator and %d worker nodes; jobs over %d keys, DeleteOnSuccess", version, workers, keys)
	return &bench.Env{Pool: pool, URL: cfg.ConnConfig.ConnString(), Settings: settings, Scale: scale,
		Citus: true, Keys: keys, DeleteOnSuccess: true}, pool.Close, nil
}
