// Package clienttest prepares skiplock's clients in other languages (clients/node,
// clients/python) for the Go tests that run them: it finds their interpreters, builds
// the Node package once per test process (npm ci when its lock file changed, then tsc)
// under a file lock shared by every test binary, and skips — or, when CI=true or the
// client's SKIPLOCK_REQUIRE_* variable says so, fails — a test whose tools are missing.
package clienttest

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PythonInterpreter is the interpreter the Python client runs with: Debian's, which
// has python3-psycopg (scripts/deps.sh installs it); a python3 earlier on PATH
// (pyenv, a virtualenv) may not.
const PythonInterpreter = "/usr/bin/python3"

// Root is the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Track reads every file under paths, so that go test's cache, which knows only the
// files the test process opens, runs the test again when one of them changes (the
// clients' sources are read by node and python, not by the test process).
func Track(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			_, err = os.ReadFile(path)
			return err
		})
		if err != nil {
			t.Fatalf("clienttest: reading %s: %v", p, err)
		}
	}
}

// missing skips t, or fails it when CI=true or env=1 requires the client.
func missing(t testing.TB, env, msg string) {
	t.Helper()
	if Required(env) {
		t.Fatalf("%s (CI=true or %s=1, so this is a failure)", msg, env)
	}
	t.Skip(msg)
}

// Python returns PythonInterpreter when it can import psycopg 3; otherwise it skips
// t (fails it under CI=true or SKIPLOCK_REQUIRE_PYTHON=1).
func Python(t testing.TB) string {
	t.Helper()
	if err := PythonMissing(); err != nil {
		missing(t, "SKIPLOCK_REQUIRE_PYTHON", err.Error())
	}
	return PythonInterpreter
}

// PythonMissing says why the Python client cannot run here (nil when
// PythonInterpreter imports psycopg 3), for programs that are not tests (tools/chaos).
func PythonMissing() error {
	if out, err := exec.Command(PythonInterpreter, "-c", "import psycopg").CombinedOutput(); err != nil {
		return fmt.Errorf("the Python client needs %s with psycopg 3 (apt-get install python3-psycopg; make deps): %v: %s",
			PythonInterpreter, err, out)
	}
	return nil
}

// Required reports whether the client that env names (SKIPLOCK_REQUIRE_PYTHON,
// SKIPLOCK_REQUIRE_NODE) must run: env=1 or CI=true.
func Required(env string) bool { return os.Getenv("CI") == "true" || os.Getenv(env) == "1" }

var (
	nodeOnce sync.Once
	nodeErr  error
	nodeOut  []byte
)

// Node builds clients/node (npm ci when node_modules is missing or older than
// package-lock.json, then npm run build) once per test process and returns its
// directory. Without node and npm it skips t (fails it under CI=true or
// SKIPLOCK_REQUIRE_NODE=1); a failing build fails t.
func Node(t testing.TB) string {
	t.Helper()
	if err := NodeMissing(); err != nil {
		missing(t, "SKIPLOCK_REQUIRE_NODE", err.Error())
	}
	dir := filepath.Join(Root(), "clients", "node")
	Track(t, filepath.Join(dir, "src"), filepath.Join(dir, "test"), filepath.Join(dir, "package.json"))
	if out, err := BuildNode(); err != nil {
		t.Fatalf("building clients/node: %v\n%s", err, out)
	}
	return dir
}

// NodeMissing says why the Node client cannot be built and run here (nil when node
// and npm are on PATH).
func NodeMissing() error {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("the Node client needs node (≥ 18) and npm (apt-get install nodejs npm; make deps): %w", err)
		}
	}
	return nil
}

// BuildNode builds clients/node (Root) once per process, as Node does, and returns
// the build's output; for programs that are not tests (tools/chaos).
func BuildNode() ([]byte, error) {
	nodeOnce.Do(func() { nodeOut, nodeErr = buildNode(filepath.Join(Root(), "clients", "node")) })
	return nodeOut, nodeErr
}

func buildNode(dir string) ([]byte, error) {
	// Test binaries of several packages build the same directory at once: one at a time.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "skiplock-clients-node.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("locking: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing releases it too
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out []byte
	if stale(filepath.Join(dir, "node_modules", ".package-lock.json"), filepath.Join(dir, "package-lock.json")) {
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		o, err := cmd.CombinedOutput()
		out = append(out, o...)
		if err != nil {
			return out, fmt.Errorf("npm ci (the npm registry must be reachable, or node_modules installed): %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, "npm", "run", "--silent", "build")
	cmd.Dir = dir
	o, err := cmd.CombinedOutput()
	out = append(out, o...)
	if err != nil {
		return out, fmt.Errorf("npm run build: %w", err)
	}
	return out, nil
}

// stale reports whether installed is missing or older than lockfile.
func stale(installed, lockfile string) bool {
	a, err := os.Stat(installed)
	if err != nil {
		return true
	}
	b, err := os.Stat(lockfile)
	return err != nil || a.ModTime().Before(b.ModTime())
}
