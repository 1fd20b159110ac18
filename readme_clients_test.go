package skiplock_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/clienttest"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// readmeWorker returns the first code block of lang after the "A worker in ten lines"
// heading of a client's README, and fails when it is longer than a dozen lines.
func readmeWorker(t *testing.T, readme, lang string) string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "## A worker in ten lines")
	if i < 0 {
		t.Fatalf("%s has no \"A worker in ten lines\" section", readme)
	}
	s = s[i:]
	j := strings.Index(s, "```"+lang+"\n")
	if j < 0 {
		t.Fatalf("%s: no ```%s block in its ten-line worker section", readme, lang)
	}
	s = s[j+len("```"+lang+"\n"):]
	code, _, ok := strings.Cut(s, "```")
	if !ok {
		t.Fatalf("%s: an unterminated code block", readme)
	}
	if n := strings.Count(strings.TrimSpace(code), "\n") + 1; n > 12 {
		t.Fatalf("%s: the ten-line worker has %d lines", readme, n)
	}
	return code
}

// runReadmeWorker runs cmd (a README's worker, on the database url whose schema
// "skiplock" is migrated) until its job has succeeded, then SIGTERMs it: it must
// print what its handler prints and exit 0.
func runReadmeWorker(t *testing.T, cmd *exec.Cmd, url string, pool *pgxpool.Pool) {
	t.Helper()
	out := &syncWriter{w: &bytes.Buffer{}} // hardening_test.go
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(cmd.Env, "DATABASE_URL="+url)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case err := <-exited:
			t.Fatalf("the README's worker exited before its job succeeded (%v):\n%s", err, out.String())
		case <-deadline.C:
			cmd.Process.Kill()
			t.Fatalf("the README's job did not succeed within 2 minutes:\n%s", out.String())
		case <-tick.C:
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM skiplock.jobs
WHERE kind = 'send_email' AND status = 'succeeded' AND output = '{"sent": true}'`).Scan(&n); err == nil && n == 1 {
				done = true
			}
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the README's worker exited with %v after SIGTERM:\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the README's worker did not exit within 30s of SIGTERM:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "to ann@example.com attempt 1") {
		t.Fatalf("the README's handler did not print what it says:\n%s", out.String())
	}
}

// The Python client's README: its ten-line worker, as written, enqueues a job, works it
// and stops on SIGTERM, on Debian's interpreter with the package on PYTHONPATH.
func TestPythonReadmeWorker(t *testing.T) {
	t.Parallel()
	python := clienttest.Python(t)
	code := readmeWorker(t, filepath.Join("clients", "python", "README.md"), "python")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "worker.py"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	client, err := filepath.Abs(filepath.Join("clients", "python"))
	if err != nil {
		t.Fatal(err)
	}
	url, pool := pgtest.MigratedDatabase(t, "skiplock")
	cmd := exec.Command(python, "worker.py")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+client, "PYTHONDONTWRITEBYTECODE=1")
	runReadmeWorker(t, cmd, url, pool)
}

// The Node client's README: its ten-line worker, as written, compiles with the
// README's tsc command in a project that has the package and pg installed (linked here
// from clients/node, as npm install links a directory), then enqueues a job, works it
// and exits on SIGTERM.
func TestNodeReadmeWorker(t *testing.T) {
	t.Parallel()
	client := clienttest.Node(t)
	code := readmeWorker(t, filepath.Join("clients", "node", "README.md"), "ts")
	dir := t.TempDir()
	mods := filepath.Join(dir, "node_modules")
	for link, target := range map[string]string{
		filepath.Join(mods, "@skiplock", "client"): client,
		filepath.Join(mods, "pg"):                  filepath.Join(client, "node_modules", "pg"),
		filepath.Join(mods, "@types"):              filepath.Join(client, "node_modules", "@types"),
	} {
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "worker.mts"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	tsc := exec.Command("node", filepath.Join(client, "node_modules", "typescript", "bin", "tsc"),
		"--module", "nodenext", "--target", "es2022", "--strict", "--skipLibCheck", "worker.mts")
	tsc.Dir = dir
	if out, err := tsc.CombinedOutput(); err != nil {
		t.Fatalf("tsc worker.mts (the README's command): %v\n%s", err, out)
	}
	url, pool := pgtest.MigratedDatabase(t, "skiplock")
	cmd := exec.Command("node", "worker.mjs")
	cmd.Dir = dir
	cmd.Env = os.Environ()
	runReadmeWorker(t, cmd, url, pool)
}
