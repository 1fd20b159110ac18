package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// The dashboard refuses, as a usage error before touching the database, to listen
// beyond loopback without authentication, and weak or malformed credentials.
func TestDashboardUsageErrors(t *testing.T) {
	t.Parallel()
	db := closedURL(t)
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:8080"}, "--listen 0.0.0.0:8080 is reachable beyond this host: give --token or --basic-auth"},
		{[]string{"--listen", ":8080"}, "--listen :8080 is reachable beyond this host"},
		{[]string{"--listen", "[::]:8080"}, "is reachable beyond this host"},
		{[]string{"--listen", "10.1.2.3:8080"}, "is reachable beyond this host"},
		{[]string{"--listen", "dashboard.internal:8080"}, "is reachable beyond this host"},
		{[]string{"--listen", "nonsense"}, `--listen "nonsense"`},
		{[]string{"--token", "short"}, "--token is 5 characters: use at least 16"},
		{[]string{"--basic-auth", "nocolon"}, "--basic-auth wants user:password"},
		{[]string{"--basic-auth", "user:"}, "--basic-auth wants user:password"},
		{[]string{"--base-path", "admin"}, `--base-path "admin" must start with /`},
		{[]string{"--refresh", "-1s"}, `invalid argument "-1s" for "--refresh" flag: want 0 or more`},
	} {
		var out, errb bytes.Buffer
		code := execute(ctx, &out, &errb, append([]string{"dashboard", "--database-url", db}, tc.args...)...)
		if code != 2 || !strings.Contains(errb.String(), tc.want) || !strings.Contains(errb.String(), "Run 'skiplock dashboard --help' for usage.") {
			t.Errorf("dashboard %v: exit %d\n%s\nwant %q", tc.args, code, errb.String(), tc.want)
		}
	}
	// Accepted command lines get as far as the database (closed here: exit 1).
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:0"},
		{"--listen", "localhost:0"},
		{"--listen", "[::1]:0"},
		{"--listen", "0.0.0.0:0", "--token", "0123456789abcdef"},
		{"--listen", ":0", "--basic-auth", "ops:pw"},
	} {
		var out, errb bytes.Buffer
		if code := execute(ctx, &out, &errb, append([]string{"dashboard", "--database-url", db}, args...)...); code != 1 {
			t.Errorf("dashboard %v: exit %d, want 1 (no database)\n%s", args, code, errb.String())
		}
	}
}

// The token may come from the environment (not parallel: it sets a variable).
func TestDashboardTokenFromEnvironment(t *testing.T) {
	db := closedURL(t)
	t.Setenv("SKIPLOCK_DASHBOARD_TOKEN", "0123456789abcdef")
	var out, errb bytes.Buffer
	if code := execute(context.Background(), &out, &errb, "dashboard", "--database-url", db, "--listen", "0.0.0.0:0"); code != 1 {
		t.Errorf("exit %d, want 1 (no database)\n%s", code, errb.String())
	}
	t.Setenv("SKIPLOCK_DASHBOARD_TOKEN", "short")
	if code := execute(context.Background(), &out, &errb, "dashboard", "--database-url", db, "--listen", "0.0.0.0:0"); code != 2 {
		t.Errorf("a short token from the environment: exit %d, want 2\n%s", code, errb.String())
	}
}

func TestDashboardHelp(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := execute(context.Background(), &out, &errb, "dashboard", "--help")
	if code != 0 || errb.Len() != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	for _, want := range []string{"--listen", "--token", "--basic-auth", "--read-only", "--redact-payloads", "read-only"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
}

// `skiplock dashboard --token` serves the dashboard: a page asks for the token, and
// answers with it.
func TestDashboardServes(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	const token = "0123456789abcdef-test"
	addr, stderr := startServing(t, "dashboard", "--listen", "127.0.0.1:0", "--token", token,
		"--base-path", "/ops", "--database-url", pgtest.URL(t), "--schema", c.schema)
	addr, _, _ = strings.Cut(addr, "/")
	get := func(auth string) (int, string) {
		return getPath(t, addr, "/ops/queues", auth)
	}
	// The container probes answer without the token, outside the base path.
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := getPath(t, addr, path, ""); code != http.StatusOK || !strings.Contains(body, `"status":"ok"`) {
			t.Errorf("%s without the token: %d\n%s", path, code, body)
		}
	}
	if code, body := get(""); code != http.StatusUnauthorized || !strings.Contains(body, `data-testid="login-form"`) {
		t.Errorf("without the token: %d\n%s", code, body)
	}
	if code, body := get(token); code != http.StatusOK || !strings.Contains(body, `href="/ops/jobs"`) {
		t.Errorf("with the token: %d\n%s", code, body)
	}
	if !strings.Contains(stderr.String(), "actions allowed to authenticated users") {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// getPath GETs path from addr, with a bearer token unless auth is "".
func getPath(t *testing.T, addr, path, auth string) (int, string) {
	t.Helper()
	return request(t, http.MethodGet, addr, path, auth, "")
}

// request sends body (none when "") to path on addr, with a bearer token unless auth
// is "", and returns the status and the answer.
func request(t *testing.T, method, addr, path, auth, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://"+addr+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(answer)
}
