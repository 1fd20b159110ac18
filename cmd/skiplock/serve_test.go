package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// serve refuses, as usage errors before touching the database, to listen beyond
// loopback without tokens (the dashboard's rule), and weak or malformed settings.
func TestServeUsageErrors(t *testing.T) {
	t.Parallel()
	db := closedURL(t)
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# workers\nmailer:short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:8090"}, "serve: --listen 0.0.0.0:8090 is reachable beyond this host: give --token, --tokens-file or $SKIPLOCK_GATEWAY_TOKENS"},
		{[]string{"--listen", ":8090"}, "is reachable beyond this host"},
		{[]string{"--listen", "nonsense"}, `--listen "nonsense"`},
		{[]string{"--token", "mailer:short"}, "--token of worker mailer is 5 characters: use at least 16"},
		{[]string{"--token", "0123456789abcdef0123"}, "want worker:token"},
		{[]string{"--token", "mailer:0123456789abcdef:"}, "names no queue"},
		{[]string{"--tokens-file", file}, "of worker mailer is 5 characters"},
		{[]string{"--tokens-file", file + ".missing"}, "--tokens-file"},
		{[]string{"--push", "default=http://x"}, "--push needs --push-secret"},
		{[]string{"--push", "nourl", "--push-secret", "s"}, `--push "nourl": want queue=url`},
		{[]string{"--max-wait", "10m"}, "--max-wait 10m0s: want 1s to 5m0s"},
		{[]string{"--max-claim", "0"}, `invalid argument "0" for "--max-claim" flag`},
		{[]string{"--lease", "-1s"}, "want 0 or more"},
	} {
		var out, errb bytes.Buffer
		code := execute(context.Background(), &out, &errb, append([]string{"serve", "--database-url", db}, tc.args...)...)
		if code != 2 || !strings.Contains(errb.String(), tc.want) || !strings.Contains(errb.String(), "Run 'skiplock serve --help' for usage.") {
			t.Errorf("serve %v: exit %d\n%s\nwant %q", tc.args, code, errb.String(), tc.want)
		}
		if strings.Contains(errb.String(), "0123456789abcdef") {
			t.Errorf("serve %v: the error shows the token:\n%s", tc.args, errb.String())
		}
	}
	// Accepted command lines get as far as the database (closed here: exit 1).
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:0"},
		{"--listen", "0.0.0.0:0", "--token", "mailer:0123456789abcdef:mail,reports"},
	} {
		var out, errb bytes.Buffer
		if code := execute(context.Background(), &out, &errb, append([]string{"serve", "--database-url", db}, args...)...); code != 1 {
			t.Errorf("serve %v: exit %d, want 1 (no database)\n%s", args, code, errb.String())
		}
	}
}

// `skiplock serve --token` serves the gateway: the probes and the document without
// the token, the routes with it, limited to the token's queues.
func TestServeServes(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	const token = "0123456789abcdef-gw"
	app, err := skiplock.NewClient(pgtest.Pool(t), skiplock.Config{Schema: c.schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.EnqueueRaw(context.Background(), "mail", []byte(`{"to":"ana"}`), &skiplock.EnqueueOpts{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	addr, stderr := startServing(t, "serve", "--listen", "127.0.0.1:0", "--token", "mailer:"+token+":mail",
		"--database-url", pgtest.URL(t), "--schema", c.schema)
	addr, _, _ = strings.Cut(addr, "/")
	for _, path := range []string{"/healthz", "/readyz", "/openapi.json"} {
		if code, body := getPath(t, addr, path, ""); code != http.StatusOK {
			t.Errorf("%s: %d\n%s", path, code, body)
		}
	}
	post := func(path, auth, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(res.Body)
		return res.StatusCode, b.String()
	}
	if code, body := post("/v1/claim", "", `{"queue":"mail"}`); code != http.StatusUnauthorized {
		t.Errorf("claim without the token: %d %s", code, body)
	}
	if code, body := post("/v1/claim", token, `{"queue":"default"}`); code != http.StatusForbidden {
		t.Errorf("claim outside the token's queues: %d %s", code, body)
	}
	code, body := post("/v1/claim", token, `{"queue":"mail","wait_ms":5000}`)
	var cr struct {
		Jobs []struct {
			ID, Kind   string
			LeaseToken string `json:"lease_token"`
		}
	}
	if err := json.Unmarshal([]byte(body), &cr); code != http.StatusOK || err != nil || len(cr.Jobs) != 1 || cr.Jobs[0].Kind != "mail" {
		t.Fatalf("claim: %d %s", code, body)
	}
	j := cr.Jobs[0]
	if code, body := post("/v1/jobs/"+j.ID+"/complete", token, `{"lease_token":"`+j.LeaseToken+`","output":{"ok":true}}`); code != http.StatusOK || !strings.Contains(body, `"succeeded"`) {
		t.Fatalf("complete: %d %s", code, body)
	}
	if out := c.must("jobs", "show", j.ID); !strings.Contains(out, "succeeded") {
		t.Errorf("jobs show after complete:\n%s", out)
	}
	if !strings.Contains(stderr.String(), "1 worker token(s)") {
		t.Errorf("stderr: %s", stderr.String())
	}
}
