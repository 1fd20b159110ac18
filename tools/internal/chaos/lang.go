package chaos

// The lang-sigkill scenario (issue #47): the round's worker processes are the Python
// client (clients/python) and the Node client (clients/node) on the SQL worker
// protocol, not Go clients, and one worker on the HTTP worker gateway (gateway/,
// served from the harness's process; lang/gateway_worker.mjs speaks only HTTP to it). Their jobs have side effects (lang/worker.py and
// lang/worker.mjs write an audit row with the lease token they ran under; half of the
// Python worker's jobs write it and complete in one transaction). The faults: workers
// SIGKILLed mid-job at random moments and restarted in their language (the gateway's
// worker among them: its jobs, leased under the gateway's name, are reclaimed), and one frozen
// (SIGSTOP) past its lease and thawed, so its late completions arrive stale. The usual
// checks apply — 0 lost, 0 double success, 0 stale writes — and verifyLangs adds: a
// business write committed with its completion exists only beside the transition to
// succeeded it committed with (a stale one never commits), and each language succeeded
// jobs of its own.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/gateway"
	"github.com/skiplock/skiplock/internal/clienttest"
	"github.com/skiplock/skiplock/internal/ident"
)

// The languages of the scenario's workers, in the order the round starts them.
const (
	langPython  = "py"
	langNode    = "node"
	langGateway = "gw" // a worker on the HTTP gateway (its jobs' worker_id is the gateway's)
)

var langOrder = []string{langPython, langNode, langPython}

var langScenario = &scenario{name: "lang-sigkill",
	summary: "Python and Node worker processes (SQL worker protocol) and an HTTP gateway worker SIGKILLed mid-job and restarted, one frozen past its lease",
	langs:   true, inject: injectLangFaults, verify: verifyLangs, recoverOn: "jobs"}

// langsMissing says why the scenario cannot run here ("" when it can): the Python
// client's interpreter with psycopg, node and npm, and the Node client built (npm ci,
// tsc; once per process).
func langsMissing() string {
	var why []string
	if err := clienttest.PythonMissing(); err != nil {
		why = append(why, err.Error())
	}
	if err := clienttest.NodeMissing(); err != nil {
		why = append(why, err.Error())
	} else if !nodeBuilt(filepath.Join(clienttest.Root(), "clients", "node")) {
		if out, err := clienttest.BuildNode(); err != nil {
			why = append(why, fmt.Sprintf("building clients/node: %v: %s", err, strings.TrimSpace(string(out))))
		}
	}
	return strings.Join(why, "; ")
}

// nodeBuilt reports whether dir's build (dist/src/index.js) is newer than its sources
// and its lock file: CI's make test has built it, and tsc takes a while on a loaded
// machine.
func nodeBuilt(dir string) bool {
	built, err := os.Stat(filepath.Join(dir, "dist", "src", "index.js"))
	if err != nil {
		return false
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "pg")); err != nil {
		return false
	}
	fresh := true
	for _, p := range []string{filepath.Join(dir, "src"), filepath.Join(dir, "package-lock.json"), filepath.Join(dir, "tsconfig.json")} {
		filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				fresh = false
				return err
			}
			if info, err := d.Info(); err != nil || info.ModTime().After(built.ModTime()) {
				fresh = false
			}
			return nil
		})
	}
	return fresh
}

// langsRequired: CI (CI=true) or SKIPLOCK_REQUIRE_PYTHON / SKIPLOCK_REQUIRE_NODE make a
// missing language a failure of the scenario rather than a skip.
func langsRequired() bool {
	return clienttest.Required("SKIPLOCK_REQUIRE_PYTHON") || clienttest.Required("SKIPLOCK_REQUIRE_NODE")
}

// startLangWorker starts a worker process of lang (langPython or langNode) on the
// round's schema, through the fault proxy, and waits until it says it is ready.
func (r *round) startLangWorker(ctx context.Context, lang string) (*proc, error) {
	r.workSeq++
	id := fmt.Sprintf("r%02d-%s-%d", r.h.round, lang, r.workSeq)
	root := clienttest.Root()
	dir := filepath.Join(root, "tools", "internal", "chaos", "lang")
	var cmd *exec.Cmd
	switch lang {
	case langPython:
		cmd = exec.Command(clienttest.PythonInterpreter, filepath.Join(dir, "worker.py"))
		cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "clients", "python"), "PYTHONDONTWRITEBYTECODE=1")
	case langNode:
		cmd = exec.Command("node", filepath.Join(dir, "worker.mjs"), filepath.Join(root, "clients", "node"))
		cmd.Env = os.Environ()
	case langGateway:
		if r.gatewayURL == "" {
			return nil, errors.New("chaos: no gateway for a gateway worker")
		}
		cmd = exec.Command("node", filepath.Join(dir, "gateway_worker.mjs"), filepath.Join(root, "clients", "node"))
		cmd.Env = append(os.Environ(), "SKIPLOCK_CHAOS_GATEWAY="+r.gatewayURL)
	default:
		return nil, fmt.Errorf("chaos: no worker in language %q", lang)
	}
	// application_name lets the audit (chaos_transitions.app) and terminateBackends
	// find the process's sessions, as the Go children's.
	dsn := r.h.proxyURL + "&application_name=chaos-" + id
	cmd.Env = append(cmd.Env, "SKIPLOCK_CHAOS_DSN="+dsn, "SKIPLOCK_CHAOS_SCHEMA="+r.schema, "SKIPLOCK_CHAOS_ID="+id,
		fmt.Sprintf("SKIPLOCK_CHAOS_LEASE=%g", leaseDuration.Seconds()), "SKIPLOCK_CHAOS_CONCURRENCY=4")
	p, err := r.h.procs.start(id, cmd)
	if err != nil {
		return nil, err
	}
	if _, err := p.waitLine(ctx, "ready", 30*time.Second); err != nil {
		p.kill()
		return nil, fmt.Errorf("%w (its log: %s)", err, filepath.Join(r.h.logDir, id+".log"))
	}
	r.mu.Lock()
	r.workers = append(r.workers, p)
	r.mu.Unlock()
	return p, nil
}

// startGateway serves the HTTP worker gateway for the round's schema from this
// process, on a loopback port, its client connected through the fault proxy under the
// name r<round>-gw-0 (the worker_id of the jobs it claims), with the round's lease.
func (r *round) startGateway(ctx context.Context) error {
	id := fmt.Sprintf("r%02d-%s-0", r.h.round, langGateway)
	cfg, err := pgxpool.ParseConfig(r.h.proxyURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	cfg.ConnConfig.RuntimeParams["application_name"] = "chaos-" + id
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("opening the gateway's pool: %w", err)
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: r.schema, ID: id, LeaseDuration: leaseDuration, Logger: r.log})
	var g *gateway.Gateway
	if err == nil {
		g, err = gateway.New(c, gateway.Options{Unauthenticated: true, Logger: r.log})
	}
	if err == nil {
		err = g.Start(ctx)
	}
	if err != nil {
		pool.Close()
		return fmt.Errorf("starting the gateway: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = g.Stop(ctx)
		pool.Close()
		return err
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	r.gatewayURL = "http://" + l.Addr().String()
	r.gatewayStop = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = g.Stop(sctx)
		pool.Close()
	}
	return nil
}

// langOf returns the language of a worker process startLangWorker started.
func langOf(p *proc) string {
	if parts := strings.Split(p.name, "-"); len(parts) >= 3 {
		return parts[1]
	}
	return ""
}

// injectLangFaults SIGKILLs a random live worker at each fault (the first: the gateway's
// worker), restarting one of its language, except the second fault, which freezes one
// (a Node worker) past its lease (its jobs are reclaimed and run again elsewhere) and
// thaws it: what it then completes is stale.
func injectLangFaults(ctx context.Context, r *round) error {
	began := wallNow()
	n := max(r.p.faults, 3) + 1
	if err := atTimes(ctx, r.spread(n, r.p.faultPhase), func(i int) error {
		live := r.liveWorkers()
		if len(live) == 0 {
			return errors.New("no live worker")
		}
		if prefer := map[int]string{0: langGateway, 1: langNode}[i]; prefer != "" {
			// The first kill hits the gateway's worker, so every round kills one mid-job
			// (its leases are the gateway's, and expire). The freeze, a Node worker if one
			// runs: it reports each outcome (onOutcome), so its refused late completions
			// show in the audit.
			var of []*proc
			for _, p := range live {
				if langOf(p) == prefer {
					of = append(of, p)
				}
			}
			if len(of) > 0 {
				live = of
			}
		}
		victim, err := r.busyVictim(ctx, live)
		if err != nil {
			return err
		}
		start := wallNow()
		if i == 1 {
			if err := victim.signal(syscall.SIGSTOP); err != nil {
				return err
			}
			stop := leaseDuration + 1500*time.Millisecond
			err := pause(ctx, stop)
			if cerr := victim.signal(syscall.SIGCONT); err == nil {
				err = cerr
			}
			r.mark(fmt.Sprintf("SIGSTOP %s for %s", victim.name, stop), start)
			return err
		}
		victim.kill()
		_, err = r.startLangWorker(ctx, langOf(victim))
		r.mark("SIGKILL "+victim.name, start)
		return err
	}); err != nil {
		return err
	}
	return finishPhase(ctx, r, began)
}

// busyVictim picks a random process of live that holds a running job (mid-job), waiting
// up to two seconds for one to; then any.
func (r *round) busyVictim(ctx context.Context, live []*proc) (*proc, error) {
	names := make([]string, len(live))
	for i, p := range live {
		names[i] = p.name
		if langOf(p) == langGateway {
			// Its jobs are leased under the gateway's name: busy while the gateway holds one.
			names[i] = fmt.Sprintf("r%02d-%s-0", r.h.round, langGateway)
		}
	}
	deadline := wallNow().Add(2 * time.Second)
	for wallNow().Before(deadline) {
		rows, err := r.h.pool.Query(ctx, `SELECT DISTINCT worker_id FROM `+ident.Quote(r.schema)+`.jobs
WHERE status = 'running' AND worker_id = ANY($1)`, names)
		if err != nil {
			return nil, fmt.Errorf("finding a busy worker: %w", err)
		}
		busy, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("finding a busy worker: %w", err)
		}
		if len(busy) > 0 {
			pick := busy[r.rng.IntN(len(busy))]
			for i, p := range live {
				if names[i] == pick {
					return p, nil
				}
			}
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	r.note("a fault found no worker mid-job within 2s and hit an idle one")
	return live[r.rng.IntN(len(live))], nil
}

// verifyLangs adds the scenario's own checks and figures to row.
func verifyLangs(ctx context.Context, r *round, row *Row) error {
	q := ident.Quote(r.schema)
	var orphanTx, doubleTx, reclaimed, lostReports int64
	err := r.h.pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM `+q+`.chaos_audit a WHERE a.event = 'effect_tx' AND NOT EXISTS (
     SELECT 1 FROM `+q+`.chaos_transitions t WHERE t.job_id = a.job_id AND t.old_token = a.lease_token AND t.new_status = 'succeeded')),
  (SELECT count(*) FROM (SELECT job_id FROM `+q+`.chaos_audit WHERE event = 'effect_tx' GROUP BY job_id HAVING count(*) > 1) d),
  (SELECT count(*) FROM `+q+`.chaos_transitions WHERE reclaim),
  (SELECT count(*) FROM `+q+`.chaos_audit WHERE event IN ('ack_lease_lost', 'manual_lease_lost'))`).Scan(&orphanTx, &doubleTx, &reclaimed, &lostReports)
	if err != nil {
		return fmt.Errorf("checking the language workers' effects: %w", err)
	}
	if orphanTx > 0 || doubleTx > 0 {
		row.StaleWrites += orphanTx
		row.Violations = append(row.Violations, fmt.Sprintf("business writes committed with a completion: %d without their job's transition to succeeded under that lease, %d jobs with more than one", orphanTx, doubleTx))
	}
	per := map[string]int64{}
	rows, err := r.h.pool.Query(ctx, `SELECT split_part(worker, '-', 2), count(*) FROM `+q+`.chaos_transitions
WHERE new_status = 'succeeded' GROUP BY 1`)
	if err != nil {
		return fmt.Errorf("counting successes per language: %w", err)
	}
	for rows.Next() {
		var lang string
		var n int64
		if err := rows.Scan(&lang, &n); err != nil {
			rows.Close()
			return err
		}
		per[lang] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, lang := range []string{langPython, langNode, langGateway} {
		if per[lang] == 0 {
			row.Violations = append(row.Violations, fmt.Sprintf("no job succeeded on a %s worker: the round proves nothing about it", lang))
		}
	}
	r.note("succeeded on Python workers %d, on Node workers %d, through the gateway %d; %d runs reclaimed from killed or frozen workers; %d late completions refused as lease lost (reported to the worker, nothing written)",
		per[langPython], per[langNode], per[langGateway], reclaimed, lostReports)
	if reclaimed == 0 {
		r.note("no run was reclaimed this round (timing): the kills hit idle workers")
	}
	return nil
}
