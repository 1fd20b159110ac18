package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/chaos"
)

func init() {
	// The chaos harness re-executes this binary as its worker, relay and migrator
	// processes, marked by an environment variable rather than a command so the
	// roles stay out of `skiplock help`. They run here, before main parses anything.
	if chaos.IsChild() {
		os.Exit(chaos.ChildMain())
	}
	register("chaos", "fault-injection run: kill workers, restart PostgreSQL, … and check the invariants", runChaos)
}

func runChaos(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var (
		duration  time.Duration
		seed      uint64
		scenarios string
		soak      bool
		rate      int
		idleTx    time.Duration
		verbose   bool
	)
	fs.DurationVar(&duration, "duration", 0, "short run: how long each scenario injects faults (default 6s);\nwith --soak: how long the whole soak runs (default 30m)")
	fs.Uint64Var(&seed, "seed", 0, "seed for every random choice; a failed run prints it for replay (default random)")
	fs.StringVar(&scenarios, "scenarios", "", "comma-separated scenarios to run (default all): "+strings.Join(chaos.Scenarios(), ", "))
	fs.BoolVar(&soak, "soak", false, "randomized rounds (scenario and fault parameters drawn from the seed) until --duration has passed")
	fs.IntVar(&rate, "rate", 40, "jobs enqueued per second during each scenario")
	fs.DurationVar(&idleTx, "idle-tx", 0, "how long the idle-in-tx scenario holds its transaction (default 5s; soak: random 30s–2m)")
	fs.BoolVar(&verbose, "v", false, "log every fault as it is injected")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: skiplock chaos [flags]\n\nStarts a throwaway PostgreSQL, runs worker and relay processes against it, injects one\n"+
			"kind of fault per scenario and checks: no lost job, no double success, no stale write\n"+
			"accepted, every outbox event delivered (duplicates only after a crash between publish\n"+
			"and mark). Prints a table; exits non-zero if any invariant failed.\n\nscenarios:")
		for _, s := range chaos.Scenarios() {
			fmt.Fprintf(fs.Output(), "  %-18s %s\n", s, chaos.ScenarioSummary(s))
		}
		fmt.Fprintln(fs.Output(), "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("chaos: unexpected arguments %q", fs.Args())
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	cfg := chaos.Config{Seed: seed, Soak: soak, Rate: rate, IdleTx: idleTx, Progress: os.Stderr,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))}
	if soak {
		cfg.SoakDuration = duration
	} else {
		cfg.FaultPhase = duration
	}
	if scenarios != "" {
		cfg.Scenarios = strings.Split(scenarios, ",")
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	fmt.Fprintf(os.Stderr, "chaos: seed %d (replay with --seed %d)\n", cfg.Seed, cfg.Seed)
	rep, err := chaos.Run(ctx, cfg)
	if rep != nil && len(rep.Rows) > 0 {
		rep.WriteTable(os.Stdout)
	}
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if !rep.OK() {
		return errors.New("chaos: invariants violated")
	}
	return nil
}
