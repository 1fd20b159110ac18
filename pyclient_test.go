package skiplock_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// pythonForClient is the interpreter the Python client's tests run with: Debian's,
// which has python3-psycopg (scripts/deps.sh installs it); a python3 earlier on PATH
// (pyenv, a virtualenv) may not.
const pythonForClient = "/usr/bin/python3"

// TestPythonClient runs the Python client's unit tests (clients/python/tests) against
// a freshly migrated schema: enqueue, every outcome, completion in the handler's
// transaction, a stale completion, SIGTERM and a SIGKILLed worker's job reclaimed.
// Without python3-psycopg it skips, unless CI=true or SKIPLOCK_REQUIRE_PYTHON=1
// (.ci/run), where it fails.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command(pythonForClient, "-c", "import psycopg").CombinedOutput(); err != nil {
		msg := "the Python client's tests need " + pythonForClient + " with psycopg 3 (apt-get install python3-psycopg; make deps): " + err.Error() + ": " + string(out)
		if os.Getenv("CI") == "true" || os.Getenv("SKIPLOCK_REQUIRE_PYTHON") == "1" {
			t.Fatal(msg + " (CI=true or SKIPLOCK_REQUIRE_PYTHON=1, so this is a failure)")
		}
		t.Skip(msg)
	}
	schema := pgtest.Schema(t)
	dir, err := filepath.Abs(filepath.Join("clients", "python"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonForClient, "-m", "unittest", "discover", "-s", "tests", "-v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SKIPLOCK_TEST_DSN="+pgtest.URL(t), "SKIPLOCK_TEST_SCHEMA="+schema,
		"PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("skipped")) || !bytes.Contains(out, []byte("\nOK")) {
		t.Fatalf("python3 -m unittest skipped tests or did not report OK:\n%s", out)
	}
	t.Logf("%s", out)
}
