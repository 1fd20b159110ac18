// Command chaos is skiplock's fault-injection run (make chaos, make soak): it starts a
// throwaway PostgreSQL, runs worker and relay processes against it, injects one kind
// of fault per scenario and checks the invariants. The failover scenarios run on a
// pg_auto_failover cluster (scripts/ha.sh) instead, and lose its primary; the Citus
// scenarios on a Citus cluster (scripts/citus.sh). It is a test rig, kept out of the
// skiplock binary; the worker and relay processes are this binary re-executed.
//
//	go run ./tools/chaos                              # the short profile (about 9 minutes)
//	go run ./tools/chaos --scenario rate-limit        # one scenario (--scenarios a,b for several)
//	go run ./tools/chaos --scenarios failover,failover-kill  # the failover scenarios alone
//	go run ./tools/chaos --scenarios citus,citus-rebalance   # the Citus rounds alone
//	go run ./tools/chaos --soak --duration 30m        # randomized rounds from a seed
//	go run ./tools/chaos --soak --seed N              # replay a seed
//
// Exit status: 0 when every invariant held, 1 when one failed or the run could not
// finish, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/skiplock/skiplock/tools/internal/chaos"
)

func main() {
	// The harness re-executes this binary as its worker, relay and migrator
	// processes, marked by an environment variable; they run before anything else.
	if chaos.IsChild() {
		os.Exit(chaos.ChildMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args, runs the harness and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		duration  time.Duration
		seed      uint64
		scenarios string
		soak      bool
		rate      int
		idleTx    time.Duration
		pin       time.Duration
		verbose   bool
		keepLogs  bool
	)
	fs.DurationVar(&duration, "duration", 0, "short run: how long each scenario injects faults (default 6s);\nwith --soak: how long the whole soak runs (default 30m)")
	fs.Uint64Var(&seed, "seed", 0, "seed for every random choice; a failed run prints it for replay (default random)")
	fs.StringVar(&scenarios, "scenarios", "", "comma-separated scenarios to run (default all; the short profile leaves out failover-async): "+strings.Join(chaos.Scenarios(), ", "))
	fs.StringVar(&scenarios, "scenario", "", "the same as --scenarios (e.g. --scenario limits)")
	fs.BoolVar(&soak, "soak", false, "randomized rounds (scenario and fault parameters drawn from the seed) until --duration has passed")
	fs.IntVar(&rate, "rate", 40, "jobs enqueued per second during each scenario")
	fs.DurationVar(&idleTx, "idle-tx", 0, "how long the idle-in-tx scenario holds its transaction (default 5s; soak: random 30s–2m)")
	fs.DurationVar(&pin, "pin", 0, "how long the mvcc-pin scenario holds its snapshot, in 10s windows (default 60s; soak: random 30s–2m)")
	fs.BoolVar(&verbose, "v", false, "log every fault as it is injected")
	fs.BoolVar(&keepLogs, "keep-logs", false, "keep the child processes' and the HA cluster's logs also when every invariant held (default: only when one failed)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./tools/chaos [flags]\n\nStarts a throwaway PostgreSQL, runs worker and relay processes against it, injects one\n"+
			"kind of fault per scenario and checks: no lost job, no double success, no stale write\n"+
			"accepted, every outbox event delivered (duplicates only after a crash between publish\n"+
			"and mark). Prints a table; exits 1 if any invariant failed.\n\nscenarios:")
		for _, s := range chaos.Scenarios() {
			fmt.Fprintf(fs.Output(), "  %-18s %s\n", s, chaos.ScenarioSummary(s))
		}
		fmt.Fprintln(fs.Output(), "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package has printed the error and the usage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "chaos: unexpected arguments %q (see --help)\n", fs.Args())
		return 2
	}
	cfg := chaos.Config{Seed: seed, Soak: soak, Rate: rate, IdleTx: idleTx, Pin: pin, KeepLogs: keepLogs, Progress: stderr}
	if scenarios != "" {
		cfg.Scenarios = strings.Split(scenarios, ",")
		for _, s := range cfg.Scenarios {
			if chaos.ScenarioSummary(strings.TrimSpace(s)) == "" {
				fmt.Fprintf(stderr, "chaos: unknown scenario %q; valid: %s\n", s, strings.Join(chaos.Scenarios(), ", "))
				return 2
			}
		}
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if soak {
		cfg.SoakDuration = duration
	} else {
		cfg.FaultPhase = duration
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	fmt.Fprintf(stderr, "chaos: seed %d (replay with --seed %d)\n", cfg.Seed, cfg.Seed)
	rep, err := chaos.Run(ctx, cfg)
	if rep != nil && len(rep.Rows) > 0 {
		rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 1
	}
	if !rep.OK() {
		fmt.Fprintln(stderr, "chaos: invariants violated")
		return 1
	}
	return 0
}
