package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// addrWatcher is the metrics command's stderr: it hands the address of the
// "serving … on http://<addr> …" line to the test.
type addrWatcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	addr  chan string
	found bool
}

func newAddrWatcher() *addrWatcher { return &addrWatcher{addr: make(chan string, 1)} }

func (w *addrWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.found {
		if _, rest, ok := strings.Cut(w.buf.String(), " on http://"); ok {
			if addr, _, ok := strings.Cut(rest, " "); ok {
				w.found = true
				w.addr <- addr
			}
		}
	}
	return len(p), nil
}

func (w *addrWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startMetrics runs `skiplock metrics` until the test ends and returns its address.
func startMetrics(t *testing.T, args ...string) string {
	t.Helper()
	addr, _ := startServing(t, append([]string{"metrics", "--listen", "127.0.0.1:0", "--min-interval", "1ms"}, args...)...)
	return addr
}

// startServing runs `skiplock args…` until the test ends (then it must exit 0) and
// returns the address it printed it serves on, and its stderr.
func startServing(t *testing.T, args ...string) (string, *addrWatcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := newAddrWatcher()
	done := make(chan int, 1)
	go func() { done <- execute(ctx, io.Discard, stderr, args...) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("%s exited %d after cancel:\n%s", args[0], code, stderr.String())
		}
	})
	select {
	case addr := <-stderr.addr:
		return addr, stderr
	case code := <-done:
		t.Fatalf("%s exited %d before listening:\n%s", args[0], code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never listened:\n%s", args[0], stderr.String())
	}
	return "", stderr
}

func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	return getPath(t, addr, path, "")
}

// wantUnavailable checks that /healthz and /readyz answer 503 with a JSON reason.
func wantUnavailable(t *testing.T, addr string) {
	t.Helper()
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body := get(t, addr, path)
		var rep struct{ Status, Error string }
		if err := json.Unmarshal([]byte(body), &rep); err != nil || code != http.StatusServiceUnavailable ||
			rep.Status != "unavailable" || rep.Error == "" {
			t.Fatalf("%s with the database down: %d %s", path, code, body)
		}
		if strings.Contains(body, "secret") {
			t.Fatalf("%s shows the password: %s", path, body)
		}
	}
	if code, body := get(t, addr, "/metrics"); code != 200 || !strings.Contains(body, "skiplock_stats_up{") ||
		!strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics with the database down: %d %s", code, body)
	}
}

func TestMetricsCommandServes(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	addr := startMetrics(t, "--database-url", pgtest.URL(t), "--schema", c.schema, "--max-oldest-due", "1m")
	for path, want := range map[string]string{"/metrics": "skiplock_stats_up", "/healthz": `"status":"ok"`, "/readyz": `"status":"ok"`} {
		if code, body := get(t, addr, path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
}

// The metrics server starts against a port where nothing listens and reports 503.
func TestMetricsStartsWhileDatabaseDown(t *testing.T) {
	t.Parallel()
	addr := startMetrics(t, "--database-url", closedURL(t))
	wantUnavailable(t, addr)
}

// The endpoints go from 503 to 200 when the database becomes reachable, without a
// restart of the metrics server.
func TestMetricsRecoversWhenDatabaseComesUp(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	cfg, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	g := pgtest.NewGate(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	url := "postgres://" + cfg.User + ":secret@" + g.Addr() + "/" + cfg.Database + "?sslmode=disable&connect_timeout=5"
	addr := startMetrics(t, "--database-url", url, "--schema", c.schema)
	wantUnavailable(t, addr)
	g.SetOpen(true)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, addr, path); code != 200 || !strings.Contains(body, `"status":"ok"`) {
			t.Fatalf("%s after the database came up: %d %s", path, code, body)
		}
	}
	if code, body := get(t, addr, "/metrics"); code != 200 || !strings.Contains(body, `skiplock_stats_up{schema="`+c.schema+`"} 1`) {
		t.Fatalf("/metrics after the database came up: %d %s", code, body)
	}
}

// TestRelayServesProbes: relay --health-addr serves /healthz and /readyz while it
// runs (the database answers; no event needs publishing for that).
func TestRelayServesProbes(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	addr, _ := startServing(t, "relay", "--to", "http://127.0.0.1:1/hook", "--webhook-secret", "0123456789abcdef0123456789abcdef",
		"--health-addr", "127.0.0.1:0", "--database-url", pgtest.URL(t), "--schema", c.schema)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, addr, path); code != http.StatusOK || !strings.Contains(body, `"status":"ok"`) {
			t.Errorf("%s: %d\n%s", path, code, body)
		}
	}
}
