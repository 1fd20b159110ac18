// Package chaos is skiplock's fault-injection harness, run by tools/chaos (make chaos,
// make soak). It runs real worker and relay OS processes (the harness's own binary
// re-executed as a child, see ChildEnv) against a throwaway PostgreSQL cluster,
// injects one kind of fault per scenario while a producer enqueues jobs (and outbox
// events) at a steady rate, lets the system drain, and then checks the contract from
// the database:
//
//	lost             every committed job reached a terminal state (or is pending with
//	                 a future run_at, or running under a valid lease); every
//	                 acknowledged commit exists; nothing rolled back exists; every
//	                 committed outbox event was delivered and processed
//	double success   no job entered 'succeeded' twice (trigger audit of transitions)
//	stale writes     no transition out of 'running' presented a token other than the
//	                 one of the job's latest claim; no completion the library reported
//	                 as ErrLeaseLost changed a row; no acknowledged success is missing
//	duplicates       events delivered more than once; allowed only in scenarios that
//	                 hit the relays (a crash or failure between publish and mark) and,
//	                 with a relay killed between publish and mark, only for the
//	                 events of the killed batch; the consumer (outbox.Inbox) must still
//	                 process each event exactly once
//	recovery         seconds from the end of each fault until throughput is back to
//	                 half the pre-fault rate (worst fault of the scenario)
//	limits           (the flow-control scenarios, limits.go) no concurrency limit's
//	                 bucket ever held more slots than its limit, replayed from every
//	                 claim and end; no rate window held more starts than its rate
//	pickup           (mvcc-pin, pin.go) while a snapshot is held open, the pickup p99
//	                 (the median of its 10 s windows') stays within max(2 × the
//	                 baseline's, the baseline's + 50 ms), and every window completes at
//	                 least 90% of the jobs offered in it
//
// The audit lives in the scenario's schema, created by the harness (never by
// skiplock's migrations): chaos_enqueued (written in the producer's transaction),
// chaos_audit (handler effects and the outcomes the library reported, with the
// lease token), chaos_transitions (an AFTER UPDATE trigger on jobs: every status or
// token change, with OLD/NEW and the token of the latest claim) and chaos_consumed.
package chaos

// The harness: Config, Run, and the harness's lifetime (setup and cleanup of the
// cluster, fault proxy, consumer and RabbitMQ node) and its sequence of rounds, each
// with its parameters (one pass over the scenarios, or a seeded soak).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/pgcluster"
	"github.com/skiplock/skiplock/tools/internal/faultproxy"
)

// Config configures a chaos run.
type Config struct {
	// Scenarios to run, by name (see Scenarios). Default: all.
	Scenarios []string
	// Seed drives every random choice (fault timing, victims, job mix). Default: random;
	// the report prints it so a run can be replayed.
	Seed uint64
	// FaultPhase is how long each scenario injects faults. Default 6s.
	FaultPhase time.Duration
	// Soak runs randomized rounds (scenario and parameters drawn from Seed) until
	// SoakDuration has passed, instead of each scenario once.
	Soak         bool
	SoakDuration time.Duration
	// Rate is how many jobs per second the producer enqueues. Default 40.
	Rate int
	// Workers is how many worker processes run. Default 3.
	Workers int
	// IdleTx is how long the idle-in-transaction session holds back xmin. Default 5s
	// (in a soak: drawn between 30s and 2m).
	IdleTx time.Duration
	// Pin is how long the mvcc-pin scenario holds its snapshot, in windows of 10s.
	// Default 60s (in a soak: drawn between 30s and 2m).
	Pin time.Duration
	// ChildCommand returns the command that runs a child process; the harness adds
	// ChildEnv with the spec. Default: this executable (tools/chaos, or a test
	// binary) with no arguments; its main must call ChildMain when IsChild.
	ChildCommand func() *exec.Cmd
	// RequireBrokers fails the broker scenario instead of skipping it when RabbitMQ
	// is not available. Default: $SKIPLOCK_REQUIRE_BROKERS is set.
	RequireBrokers bool
	// RequireHA fails the failover scenarios instead of skipping them when pg_autoctl
	// (postgresql-15-auto-failover) is not installed. Default: $SKIPLOCK_REQUIRE_HA is set.
	RequireHA bool
	// KeepLogs keeps the children's logs (and, after a failover scenario, the HA
	// cluster's: ha-*.log, ha-events.txt) also when every invariant held; the report
	// names their directory. Default: kept only when something failed.
	KeepLogs bool
	// Logger receives the harness's progress. Default: discard.
	Logger *slog.Logger
	// Progress, if set, receives one line per finished round.
	Progress io.Writer
}

// Run starts a cluster, runs the configured scenarios and returns the report. It
// cleans up every process and cluster it started, also when ctx is cancelled; the
// report then holds the rounds that finished.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Seed == 0 {
		var b [8]byte
		rand.Read(b[:])
		for _, x := range b {
			cfg.Seed = cfg.Seed<<8 | uint64(x)
		}
	}
	if cfg.FaultPhase <= 0 {
		cfg.FaultPhase = 6 * time.Second
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 40
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 3
	}
	if cfg.IdleTx <= 0 {
		cfg.IdleTx = 5 * time.Second
	}
	if cfg.Pin <= 0 {
		cfg.Pin = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ChildCommand == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("chaos: finding this executable to re-run as a child: %w", err)
		}
		cfg.ChildCommand = func() *exec.Cmd { return exec.Command(exe) }
	}
	if !cfg.RequireBrokers && os.Getenv("SKIPLOCK_REQUIRE_BROKERS") != "" {
		cfg.RequireBrokers = true
	}
	if !cfg.RequireHA && os.Getenv("SKIPLOCK_REQUIRE_HA") != "" {
		cfg.RequireHA = true
	}
	if cfg.Soak && cfg.SoakDuration <= 0 {
		cfg.SoakDuration = 30 * time.Minute
	}
	selected, err := selectScenarios(cfg.Scenarios)
	if err != nil {
		return nil, err
	}
	if len(cfg.Scenarios) == 0 && !cfg.Soak {
		selected = shortProfile(selected)
	}
	h := &harness{cfg: cfg, log: cfg.Logger, rng: mrand.New(mrand.NewPCG(cfg.Seed, 0x5eed))}
	report := &Report{Seed: cfg.Seed, Soak: cfg.Soak}
	start := wallNow()
	defer func() { report.Elapsed = time.Since(start) }()
	if err := h.setup(ctx, selected); err != nil {
		h.cleanup(false)
		return report, err
	}
	runErr := h.runAll(ctx, selected, report)
	keep := !report.OK() || runErr != nil || cfg.KeepLogs
	h.cleanup(!keep)
	if keep {
		report.LogDir = h.logDir
	}
	return report, runErr
}

// shortProfile is what a run with no scenario named runs (make chaos): every scenario
// but what only measures (failover-async), which runs when named or in a soak.
func shortProfile(all []*scenario) []*scenario {
	var short []*scenario
	for _, s := range all {
		if !s.async {
			short = append(short, s)
		}
	}
	return short
}

type harness struct {
	cfg Config
	log *slog.Logger
	rng *mrand.Rand

	cluster  *pgcluster.Cluster
	pool     *pgxpool.Pool // the harness's own, direct connections
	proxy    *faultproxy.Proxy
	proxyURL string
	consumer *consumer
	secret   string
	rabbit   *rabbitNode
	procs    *procs
	logDir   string
	round    int
	// The failover scenarios' cluster (hacluster.go), started on first use; pool and
	// proxyURL point at it for their rounds, and at plainPool and plainURL (the
	// throwaway server, through the fault proxy) for the others.
	ha                *haCluster
	haPool, plainPool *pgxpool.Pool
	plainURL          string
	// appPool is the producer's and the components' pool, the application's way in:
	// pool, or (failover-pgbouncer) bouncerPool, through PgBouncer in front of the
	// HA cluster (started on first use), where proxyURL then points too.
	appPool, bouncerPool *pgxpool.Pool
	// The Citus scenarios' cluster (citus.go), started on first use, and the
	// harness's pool on its coordinator.
	citus                   *citusCluster
	citusPool, citusAppPool *pgxpool.Pool
}

func (h *harness) setup(ctx context.Context, selected []*scenario) error {
	var err error
	if h.logDir, err = os.MkdirTemp("", "skiplock-chaos-logs-"); err != nil {
		return fmt.Errorf("chaos: creating the log directory: %w", err)
	}
	h.procs = &procs{all: map[*proc]struct{}{}, logDir: h.logDir, cmd: func(spec []byte) *exec.Cmd {
		cmd := h.cfg.ChildCommand()
		cmd.Env = append(os.Environ(), ChildEnv+"="+string(spec))
		return cmd
	}}
	for _, s := range selected {
		if s.broker {
			h.rabbit = startRabbit() // boots in the background while other scenarios run
			break
		}
	}
	// synchronous_commit=on: an immediate restart must not lose acknowledged commits.
	// fsync stays off: only processes crash here, never the machine.
	h.log.Info("chaos: starting PostgreSQL")
	h.cluster, err = pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
		"synchronous_commit": "on", "max_connections": "400", "shared_buffers": "'128MB'",
		// Commit times make an audit's evidence show which transitions a claim could see.
		"track_commit_timestamp": "on",
	}})
	if err != nil {
		return fmt.Errorf("chaos: starting PostgreSQL: %w", err)
	}
	if h.pool, err = openPool(ctx, h.cluster.URL, harnessApp, 16, 5*time.Second); err != nil {
		return fmt.Errorf("chaos: the harness pool: %w", err)
	}
	if h.proxy, err = faultproxy.New(fmt.Sprintf("127.0.0.1:%d", h.cluster.Port), h.log); err != nil {
		return err
	}
	h.proxyURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", h.proxy.Port())
	h.plainPool, h.plainURL = h.pool, h.proxyURL
	var b [16]byte
	rand.Read(b[:])
	h.secret = hex.EncodeToString(b[:])
	if h.consumer, err = startConsumer(h.pool, h.secret, h.log); err != nil {
		return err
	}
	return nil
}

// cleanup stops everything the harness started, and removes the logs when removeLogs.
func (h *harness) cleanup(removeLogs bool) {
	if h.procs != nil {
		h.procs.killAll()
	}
	if h.consumer != nil {
		h.consumer.close()
	}
	if h.proxy != nil {
		h.proxy.Close()
	}
	closePools(h.plainPool, h.haPool, h.bouncerPool, h.citusPool, h.citusAppPool)
	if h.plainPool == nil && h.pool != nil {
		h.pool.Close()
	}
	if h.ha != nil {
		h.ha.destroy()
	}
	if h.citus != nil {
		h.citus.destroy()
	}
	if h.cluster != nil {
		if err := h.cluster.Stop(); err != nil {
			h.log.Warn("chaos: stopping PostgreSQL", "error", err)
		}
	}
	if h.rabbit != nil {
		h.rabbit.stop()
	}
	if removeLogs && h.logDir != "" {
		os.RemoveAll(h.logDir)
	}
}

func (h *harness) runAll(ctx context.Context, selected []*scenario, report *Report) error {
	runOne := func(s *scenario, p params) error {
		row, err := h.runRound(ctx, s, p)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			row = &Row{Scenario: s.name, Runs: 1, Violations: []string{"harness error: " + err.Error()}}
		}
		report.add(row)
		if h.cfg.Progress != nil {
			fmt.Fprintln(h.cfg.Progress, row.progressLine(p))
		}
		return nil
	}
	if !h.cfg.Soak {
		for _, s := range selected {
			if err := runOne(s, h.shortParams(s)); err != nil {
				return err
			}
		}
		return nil
	}
	// Rounds deal scenarios from a deck shuffled by the seed, so every scenario runs
	// about equally often; each round's fault parameters are drawn too.
	deadline := wallNow().Add(h.cfg.SoakDuration)
	var deck []*scenario
	for wallNow().Before(deadline) {
		if len(deck) == 0 {
			deck = append(deck, selected...)
			h.rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		s := deck[0]
		deck = deck[1:]
		if err := runOne(s, h.soakParams(s)); err != nil {
			return err
		}
	}
	return nil
}

// params are one round's knobs.
type params struct {
	faultPhase time.Duration
	idleTx     time.Duration
	pin        time.Duration // the mvcc-pin scenario's pin (a soak draws its own: injectPin)
	stall      time.Duration
	zombieStop time.Duration
	faults     int // how many faults the scenario injects (kills, drops, …)
	rate       int
}

func (h *harness) shortParams(s *scenario) params {
	phase := h.cfg.FaultPhase
	if s.citus {
		// A node's stop and start take seconds of the phase: room for both, and for
		// a rebalance's baseline and its after-window.
		phase = max(phase, citusFaultPhase)
	}
	return params{faultPhase: phase, idleTx: h.cfg.IdleTx, pin: h.cfg.Pin, stall: 3 * time.Second, zombieStop: 5 * time.Second, faults: 3, rate: s.rate(h.cfg.Rate)}
}

// rate is the producer's rate in s's rounds, of the configured rate: a share of it on
// Citus (citusRateShare).
func (s *scenario) rate(configured int) int {
	if s.citus {
		return max(configured/citusRateShare, 1)
	}
	return configured
}

func (h *harness) soakParams(s *scenario) params {
	return params{
		faultPhase: time.Duration(10+h.rng.IntN(31)) * time.Second,
		idleTx:     time.Duration(30+h.rng.IntN(91)) * time.Second,
		pin:        h.cfg.Pin,
		stall:      time.Duration(1000+h.rng.IntN(9000)) * time.Millisecond,
		zombieStop: time.Duration(3000+h.rng.IntN(7000)) * time.Millisecond,
		faults:     2 + h.rng.IntN(6),
		rate:       s.rate(h.cfg.Rate/2 + h.rng.IntN(h.cfg.Rate+1)),
	}
}

var errNoScenario = errors.New("chaos: unknown scenario")

// harnessApp is the application_name of the harness's own connections.
const harnessApp = "skiplock-chaos-harness"

// closePools closes each pool that is not nil.
func closePools(ps ...*pgxpool.Pool) {
	for _, p := range ps {
		if p != nil {
			p.Close()
		}
	}
}
