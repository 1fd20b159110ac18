package bench

// W5PY: W5's jobs worked by the Python client (clients/python) through the SQL worker
// protocol (docs/sql_workers.md), at W5's concurrency, judged against the Go worker's
// W5 of the same run.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// PythonEnv names the interpreter W5PY runs (default /usr/bin/python3, Debian's,
// with python3-psycopg) and PythonClientEnv the directory of the Python client (the
// one holding the skiplock package; default clients/python in the working directory
// or a parent of it).
const (
	PythonEnv       = "SKIPLOCK_PYTHON"
	PythonClientEnv = "SKIPLOCK_PYTHON_CLIENT"
)

// w5pyScript works the schema's queue with the client's Worker: a handler that does
// nothing, W5's concurrency. It prints "started" once the worker runs and stops on
// SIGTERM.
const w5pyScript = `
import logging, os, sys, threading
from skiplock import Worker
logging.basicConfig(level=logging.WARNING)
w = Worker(os.environ["W5PY_DSN"], {"noop": lambda job: None}, schema=os.environ["W5PY_SCHEMA"],
           concurrency=int(os.environ["W5PY_CONCURRENCY"]), reclaim=False)
threading.Timer(0, lambda: print("started", flush=True)).start()
w.run()
`

// PythonClient finds the interpreter and the client's directory, or says what is
// missing, naming who needs them (W5PY; the demo's Python worker).
func PythonClient(who string) (python, dir string, err error) {
	python = os.Getenv(PythonEnv)
	if python == "" {
		python = "/usr/bin/python3"
	}
	if out, err := exec.Command(python, "-c", "import psycopg").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("%s needs %s with psycopg 3 (apt-get install python3-psycopg, or set %s): %v: %s",
			who, python, PythonEnv, err, strings.TrimSpace(string(out)))
	}
	if dir = os.Getenv(PythonClientEnv); dir != "" {
		return python, dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "clients", "python", "skiplock", "__init__.py")); err == nil {
			return python, filepath.Join(d, "clients", "python"), nil
		}
		if filepath.Dir(d) == d {
			return "", "", fmt.Errorf("%s needs the Python client: run from the repository, or set %s to its clients/python", who, PythonClientEnv)
		}
	}
}

func runW5PY(ctx context.Context, e *Env) (*Result, error) {
	python, dir, err := PythonClient("W5PY")
	if err != nil {
		return nil, err
	}
	n := e.n(50000)
	schema, err := e.schema(ctx, "bench_w5py")
	if err != nil {
		return nil, err
	}
	if err := preinsertKeyed(ctx, e, schema, n, 0); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(pctx, python, "-c", w5pyScript)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1", "W5PY_DSN="+e.URL,
		"W5PY_SCHEMA="+schema, fmt.Sprintf("W5PY_CONCURRENCY=%d", W5Workers))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "started" {
		cancel()
		return nil, fmt.Errorf("W5PY: the Python worker did not start (%q, %v)", lines.Text(), cmd.Wait())
	}
	go func() {
		for lines.Scan() {
		}
		exited <- cmd.Wait()
	}()
	done := func() (int64, error) {
		var k int64
		err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".jobs WHERE status = 'succeeded'`).Scan(&k)
		return k, err
	}
	stopProgress := e.progress("W5PY", n, func() int64 { k, _ := done(); return k })
	start := time.Now()
	for {
		k, err := done()
		if err != nil {
			stopProgress()
			return nil, err
		}
		if k >= int64(n) {
			break
		}
		select {
		case err := <-exited:
			stopProgress()
			return nil, fmt.Errorf("W5PY: the Python worker exited with %d of %d jobs done: %v", k, n, err)
		case <-ctx.Done():
			stopProgress()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	stopProgress()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return nil, err
		} else if err != nil {
			return nil, fmt.Errorf("W5PY: the Python worker's graceful stop failed: %v", err)
		}
	case <-time.After(30 * time.Second):
		return nil, errors.New("W5PY: the Python worker did not stop within 30s of SIGTERM")
	}
	// Exactly-once: every job succeeded, each on its first and only attempt (a job run
	// twice would have needed a reclaim, which counts a second attempt).
	var succeeded, once int64
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE attempts = 1)
FROM "`+schema+`".jobs`).Scan(&succeeded, &once); err != nil {
		return nil, err
	}
	verified := fmt.Sprintf("ok: %d succeeded, each on one attempt", succeeded)
	if succeeded != int64(n) || once != int64(n) {
		verified = fmt.Sprintf("FAILED: %d of %d succeeded, %d on one attempt", succeeded, n, once)
	}
	r := &Result{Workload: "W5PY", N: n, Seconds: elapsed.Seconds(), JobsPerSec: float64(n) / elapsed.Seconds(),
		Settings: e.Settings, Verified: verified, Extra: map[string]any{"concurrency": W5Workers, "python": python,
			"prefetch": "the client's default, adaptive as the Go worker's: about 50 ms of work, at most 1,000 jobs ahead"}}
	r.Target = "≥ 0.5 × W5 (same run)"
	if e.w5 > 0 {
		r.Limit, r.Ratio = "W5", r.JobsPerSec/e.w5
		r.judgeBy(r.Target, func(x *Result) bool { return x.Ratio >= 0.5 })
	}
	return r, nil
}
