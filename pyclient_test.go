package skiplock_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/clienttest"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestPythonClient runs the Python client's unit tests (clients/python/tests) against
// a freshly migrated schema: enqueue, every outcome, completion in the handler's
// transaction, a stale completion, SIGTERM and a SIGKILLed worker's job reclaimed. It
// runs on Debian's python3, which has python3-psycopg (scripts/deps.sh installs it):
// without it the test skips, unless CI=true or SKIPLOCK_REQUIRE_PYTHON=1 (.ci/run),
// where it fails (clienttest.Python).
func TestPythonClient(t *testing.T) {
	t.Parallel()
	python := clienttest.Python(t)
	clienttest.Track(t, "clients/python") // go test's cache does not see the files python reads
	schema := pgtest.Schema(t)
	dir, err := filepath.Abs(filepath.Join("clients", "python"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-s", "tests", "-v")
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
