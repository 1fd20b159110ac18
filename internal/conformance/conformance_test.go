package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/gateway"
	"github.com/skiplock/skiplock/internal/clienttest"
	"github.com/skiplock/skiplock/internal/conformance"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// envRunner makes this test binary a runner process (runner_test.go) instead of the suite.
const envRunner = "SKIPLOCK_CONFORMANCE_RUNNER"

func TestMain(m *testing.M) {
	if kind := os.Getenv(envRunner); kind != "" {
		os.Exit(runnerMain(kind))
	}
	pgtest.Main(m)
}

// A runner under test: how to start its process, and what it cannot do.
type runner struct {
	name string
	// lacks lists the capabilities (conformance.Need*) the runner does not have.
	lacks map[string]string
	// setup prepares the runner for a schema (a test of its own) and returns its
	// command maker.
	setup func(t *testing.T, schema string) func(env []string) *exec.Cmd
}

func runners() []runner {
	self, _ := os.Executable()
	return []runner{
		{name: "go", setup: func(t *testing.T, schema string) func([]string) *exec.Cmd {
			return func(env []string) *exec.Cmd {
				cmd := exec.Command(self)
				cmd.Env = append(env, envRunner+"=go")
				return cmd
			}
		}},
		{name: "python", setup: func(t *testing.T, schema string) func([]string) *exec.Cmd {
			py := clienttest.Python(t)
			root := clienttest.Root()
			clienttest.Track(t, filepath.Join(root, "internal", "conformance", "runner.py"), filepath.Join(root, "clients", "python", "skiplock"))
			return func(env []string) *exec.Cmd {
				cmd := exec.Command(py, filepath.Join(root, "internal", "conformance", "runner.py"))
				cmd.Env = append(env, "PYTHONPATH="+filepath.Join(root, "clients", "python"), "PYTHONDONTWRITEBYTECODE=1")
				return cmd
			}
		}},
		{name: "node", setup: func(t *testing.T, schema string) func([]string) *exec.Cmd {
			dir := clienttest.Node(t)
			return func(env []string) *exec.Cmd {
				cmd := exec.Command("node", filepath.Join(dir, "dist", "test", "conformance.js"))
				cmd.Env = env
				return cmd
			}
		}},
		{name: "gateway",
			lacks: map[string]string{conformance.NeedTransaction: "an HTTP worker has no database transaction to complete in (it passes the job's idempotency_key to the systems it writes to instead)"},
			setup: func(t *testing.T, schema string) func([]string) *exec.Cmd {
				url, token := startGateway(t, schema)
				return func(env []string) *exec.Cmd {
					cmd := exec.Command(self)
					cmd.Env = append(env, envRunner+"=gateway", conformance.EnvGatewayURL+"="+url, conformance.EnvGatewayToken+"="+token)
					return cmd
				}
			}},
	}
}

// startGateway serves the HTTP gateway for schema for the test's lifetime.
func startGateway(t *testing.T, schema string) (url, token string) {
	client, err := skiplock.NewClient(pgtest.Pool(t), skiplock.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	token = "conformance-token-0123456789"
	g, err := gateway.New(client, gateway.Options{Tokens: []gateway.Token{{Worker: "conformance", Token: token}},
		PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := g.Stop(ctx); err != nil {
			t.Errorf("stopping the gateway: %v", err)
		}
		client.Close()
	})
	return srv.URL, token
}

// TestConformance runs every scenario of scenarios.json against every runner and checks
// the rows each leaves the same way. A runner whose language is missing skips (fails
// under CI=true or SKIPLOCK_REQUIRE_PYTHON / SKIPLOCK_REQUIRE_NODE); a scenario needing
// a capability a runner lacks by design skips with the reason.
func TestConformance(t *testing.T) {
	t.Parallel()
	suite, err := conformance.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runners() {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			schema := pgtest.Schema(t)
			pool := pgtest.Pool(t)
			if _, err := pool.Exec(context.Background(), `CREATE TABLE "`+schema+`".`+conformance.EffectsTable+` (job_id uuid NOT NULL, attempt int NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			command := r.setup(t, schema)
			client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(client.Close)
			for _, sc := range suite.Scenarios {
				t.Run(sc.Name, func(t *testing.T) {
					t.Parallel()
					for _, need := range sc.Needs {
						if why, ok := r.lacks[need]; ok {
							t.Skipf("the %s runner lacks %q by design: %s", r.name, need, why)
						}
					}
					h := &harness{t: t, pool: pool, client: client, schema: schema, queue: "conf_" + sc.Name,
						command: command, ids: map[string]string{}, events: make(chan event, 100)}
					h.run(sc)
				})
			}
		})
	}
}

type event struct {
	Event   string `json:"event"`
	ID      string `json:"id"`
	Attempt int    `json:"attempt"`
}

// harness drives one scenario against one runner.
type harness struct {
	t       *testing.T
	pool    *pgxpool.Pool
	client  *skiplock.Client
	schema  string
	queue   string
	command func(env []string) *exec.Cmd
	ids     map[string]string
	events  chan event
	seen    []event
	proc    *proc
}

// proc is one runner process.
type proc struct {
	cmd    *exec.Cmd
	stdin  interface{ Write([]byte) (int, error) }
	stderr *syncBuffer
	exited chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const stepTimeout = 30 * time.Second

func (h *harness) run(sc conformance.Scenario) {
	t := h.t
	ctx := context.Background()
	t.Cleanup(h.stop)
	for i, st := range sc.Steps {
		where := fmt.Sprintf("step %d (%s %s)", i, st.Do, st.Job)
		switch st.Do {
		case "start":
			h.start()
		case "enqueue":
			opts := &skiplock.EnqueueOpts{Queue: h.queue, MaxAttempts: st.MaxAttempts}
			res, err := h.client.EnqueueRaw(ctx, conformance.Kind, st.Args, opts)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			h.ids[st.Job] = res.ID
		case "wait_started":
			h.waitStarted(where, h.ids[st.Job], st.Attempt)
		case "release":
			line, _ := json.Marshal(map[string]string{"release": h.ids[st.Job]})
			if _, err := h.proc.stdin.Write(append(line, '\n')); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		case "expire":
			h.expire(where, h.ids[st.Job], st.Delay)
		case "operator_cancel":
			if _, err := h.client.JobCancel(ctx, h.ids[st.Job], st.Reason); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		case "kill":
			if err := h.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			<-h.proc.exited
			h.proc = nil
		case "settle":
			h.settle(where)
		default:
			t.Fatalf("%s: unknown step", where)
		}
	}
	for _, e := range sc.Expect {
		row := h.row(h.ids[e.Job])
		for _, d := range e.Check(row) {
			t.Errorf("job %s (%s): %s", e.Job, h.ids[e.Job], d)
		}
	}
}

func (h *harness) start() {
	t := h.t
	if h.proc != nil {
		t.Fatal("start: a runner process is running already")
	}
	cmd := h.command(append(os.Environ(), conformance.EnvDSN+"="+pgtest.URL(t), conformance.EnvSchema+"="+h.schema,
		conformance.EnvQueue+"="+h.queue))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdin: stdin, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the runner: %v", err)
	}
	h.proc = p
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event != "" {
				h.events <- ev
			}
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runner %s stderr:\n%s", cmd.Path, p.stderr.String())
		}
	})
}

// stop ends the running process gracefully: SIGTERM, and it must exit 0.
func (h *harness) stop() {
	p := h.proc
	if p == nil {
		return
	}
	h.proc = nil
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			h.t.Errorf("the runner did not stop cleanly on SIGTERM: %v\n%s", p.err, p.stderr.String())
		}
	case <-time.After(stepTimeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		h.t.Errorf("the runner did not stop within %s of SIGTERM\n%s", stepTimeout, p.stderr.String())
	}
}

func (h *harness) waitStarted(where, id string, attempt int) {
	for _, ev := range h.seen {
		if ev.ID == id && ev.Attempt == attempt {
			return
		}
	}
	deadline := time.After(stepTimeout)
	var exited chan struct{}
	if h.proc != nil {
		exited = h.proc.exited
	}
	for {
		select {
		case ev := <-h.events:
			h.seen = append(h.seen, ev)
			if ev.ID == id && ev.Attempt == attempt {
				return
			}
		case <-exited:
			h.t.Fatalf("%s: the runner exited (%v) before starting attempt %d of %s", where, h.proc.err, attempt, id)
		case <-deadline:
			h.t.Fatalf("%s: attempt %d of %s did not start within %s (seen: %v); job: %+v", where, attempt, id, stepTimeout, h.seen, h.row(id))
		}
	}
}

// expire ends a running job's lease and reclaims it, in one transaction (so no
// heartbeat or other reclaimer comes between), to run again after delay.
func (h *harness) expire(where, id, delay string) {
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE "`+h.schema+`".jobs SET lease_until = now() - interval '1 second' WHERE id = $1 AND status = 'running'`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errors.New("the job is not running")
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT "`+h.schema+`".reclaim_jobs($1, 100, $2::interval)`, h.queue, delay).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("reclaimed %d jobs, want 1", n)
		}
		return nil
	})
	if err != nil {
		h.t.Fatalf("%s: %v", where, err)
	}
}

// settle enqueues a plain job and waits for it to succeed: the runner works one job
// at a time, so every outcome it recorded before is written.
func (h *harness) settle(where string) {
	res, err := h.client.EnqueueRaw(context.Background(), conformance.Kind, []byte(`{"action":"complete"}`), &skiplock.EnqueueOpts{Queue: h.queue})
	if err != nil {
		h.t.Fatalf("%s: %v", where, err)
	}
	// The row's status is the synchronisation; the ticker only paces the reads.
	deadline := time.NewTimer(stepTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r := h.row(res.ID)
		if r.Status == "succeeded" {
			break
		}
		select {
		case <-deadline.C:
			h.t.Fatalf("%s: the settling job did not succeed within %s: %+v", where, stepTimeout, r)
		case <-tick.C:
		}
	}
	// A runner may write its outcomes in several batches at once (the Node client keeps
	// two finish calls in flight): the settling job's can then commit before the
	// outcome of a job that finished before it started. So also wait, within the same
	// deadline, for the scenario's jobs to leave running; one that stays is left to the
	// expectations to judge.
	ids := make([]string, 0, len(h.ids))
	for _, id := range h.ids {
		ids = append(ids, id)
	}
	for {
		var running int
		if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM "`+h.schema+`".jobs WHERE id = ANY ($1::uuid[]) AND status = 'running'`,
			ids).Scan(&running); err != nil {
			h.t.Fatalf("%s: %v", where, err)
		}
		if running == 0 {
			return
		}
		select {
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

func (h *harness) row(id string) conformance.Row {
	var r conformance.Row
	var history []byte
	var output []byte
	err := h.pool.QueryRow(context.Background(), `SELECT status::text, attempts, output, last_error, attempt_history, run_at, now(),
	        (SELECT count(*) FROM "`+h.schema+`".`+conformance.EffectsTable+` e WHERE e.job_id = j.id)
	    FROM "`+h.schema+`".jobs j WHERE id = $1`, id).
		Scan(&r.Status, &r.Attempts, &output, &r.LastError, &history, &r.RunAt, &r.Now, &r.Effects)
	if err != nil {
		h.t.Fatalf("reading job %s: %v", id, err)
	}
	if output != nil {
		r.Output = output
	}
	if history != nil {
		if err := json.Unmarshal(history, &r.History); err != nil {
			h.t.Fatalf("job %s: attempt_history: %v", id, err)
		}
	}
	return r
}
