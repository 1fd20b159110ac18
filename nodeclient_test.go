package skiplock_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/clienttest"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestNodeClient runs the Node client's tests (clients/node/test, `node --test`)
// against a freshly migrated schema: enqueue, every outcome, completion in the
// handler's transaction and its refusal after a lost lease, a stale completion,
// heartbeats and an operator's cancel, SIGTERM and a SIGKILLed worker's job reclaimed.
// Without node and npm it skips, unless CI=true or SKIPLOCK_REQUIRE_NODE=1 (.ci/run),
// where it fails.
func TestNodeClient(t *testing.T) {
	t.Parallel()
	dir := clienttest.Node(t)
	schema := pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	files, err := filepath.Glob(filepath.Join(dir, "dist", "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no compiled tests in %s/dist/test (%v)", dir, err)
	}
	cmd := exec.CommandContext(ctx, "node", append([]string{"--test", "--test-reporter=tap"}, files...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SKIPLOCK_TEST_DSN="+pgtest.URL(t), "SKIPLOCK_TEST_SCHEMA="+schema)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^# pass [1-9]`).Match(out) || !bytes.Contains(out, []byte("\n# skipped 0")) || !bytes.Contains(out, []byte("\n# fail 0")) {
		t.Fatalf("node --test skipped tests or passed none:\n%s", out)
	}
	t.Logf("%s", out)
}
