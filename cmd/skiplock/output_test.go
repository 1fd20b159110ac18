package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// jobs show (table) keeps a multi-line last_error aligned under the value column and
// lists the attempts, one line each; -o json is unchanged.
func TestJobsShowMultiLineErrorAndAttempts(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	res, err := cl.EnqueueRawTx(ctx, cl.Pool(), "mail", []byte(`{"n": 1}`), &skiplock.EnqueueOpts{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	m := cl.Manual()
	for i, cause := range []error{errors.New("smtp: timeout\nsecond line of the first error"),
		errors.New("panic: boom\n\ngoroutine 7 [running]:\nmain.handle()\n\t/app/h.go:12 +0x1d")} {
		jobs, err := m.Claim(ctx, "default", 1)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim %d: %d %v", i, len(jobs), err)
		}
		if i == 0 {
			_, err = m.Retry(ctx, jobs[0], cause, 0)
		} else {
			err = m.Fail(ctx, jobs[0], cause)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	out := c.must("jobs", "show", res.ID)
	fields, attempts, ok := strings.Cut(out, "\n\n")
	if !ok {
		t.Fatalf("jobs show: no attempts section after a blank line:\n%s", out)
	}
	lines := strings.Split(fields, "\n")
	col := strings.Index(lines[0], res.ID) // where every value starts
	indent := strings.Repeat(" ", col)
	for _, want := range []string{
		"last_error" + strings.Repeat(" ", col-len("last_error")) + "panic: boom",
		indent, // the blank line of the error, still part of the table
		indent + "goroutine 7 [running]:",
		indent + "main.handle()",
		indent + "    /app/h.go:12 +0x1d",
		"payload" + strings.Repeat(" ", col-len("payload")) + `{"n": 1}`,
	} {
		found := false
		for _, l := range lines {
			found = found || l == want
		}
		if !found {
			t.Errorf("jobs show: no line %q in\n%s", want, fields)
		}
	}

	rows := strings.Split(strings.TrimSuffix(attempts, "\n"), "\n")
	if len(rows) != 3 || !strings.HasPrefix(rows[0], "ATTEMPT") || !strings.Contains(rows[0], "STARTED_AT") ||
		!strings.Contains(rows[0], "WORKER") || !strings.Contains(rows[0], "ERROR") {
		t.Fatalf("jobs show: want an attempts header and 2 rows:\n%s", attempts)
	}
	for i, want := range [][]string{{"1 ", "retried", "smtp: timeout …"}, {"2 ", "failed", "panic: boom …"}} {
		for _, w := range want {
			if !strings.Contains(rows[i+1], w) {
				t.Errorf("jobs show: attempt %d: no %q in %q", i+1, w, rows[i+1])
			}
		}
		if !strings.HasPrefix(rows[i+1], want[0]) {
			t.Errorf("jobs show: attempt row %q does not start with its number", rows[i+1])
		}
	}
	if strings.Contains(out, "second line of the first error") {
		t.Errorf("jobs show: an attempt's error is not cut to its first line:\n%s", attempts)
	}

	var j struct {
		LastError string `json:"last_error"`
		History   []struct {
			Attempt int    `json:"attempt"`
			Error   string `json:"error"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(c.must("jobs", "show", res.ID, "-o", "json")), &j); err != nil {
		t.Fatal(err)
	}
	if len(j.History) != 2 || j.History[0].Error != "smtp: timeout\nsecond line of the first error" || j.LastError != j.History[1].Error {
		t.Fatalf("jobs show -o json: %+v", j)
	}
}

// jobs show says when the attempts listed are not all of them (the history keeps the
// newest skiplock.MaxHistory).
func TestJobsShowAttemptsBeyondHistory(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	res, err := cl.EnqueueRawTx(ctx, cl.Pool(), "mail", []byte(`{}`), &skiplock.EnqueueOpts{MaxAttempts: 25})
	if err != nil {
		t.Fatal(err)
	}
	for i := range skiplock.MaxHistory + 1 {
		jobs, err := cl.Manual().Claim(ctx, "default", 1)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim %d: %d %v", i, len(jobs), err)
		}
		if _, err := cl.Manual().Retry(ctx, jobs[0], errors.New("again"), 0); err != nil {
			t.Fatal(err)
		}
	}
	out := c.must("jobs", "show", res.ID)
	_, attempts, _ := strings.Cut(out, "\nATTEMPT")
	rows := strings.Split(strings.TrimSuffix(attempts, "\n"), "\n")
	if len(rows) != skiplock.MaxHistory+2 || !strings.HasPrefix(rows[1], "2 ") ||
		rows[len(rows)-1] != fmt.Sprintf("(the newest %d attempts; earlier ones are not kept)", skiplock.MaxHistory) {
		t.Fatalf("jobs show after %d attempts:\n%s", skiplock.MaxHistory+1, out)
	}
}

func TestOneLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"refused", "refused"},
		{"refused\n", "refused"},
		{"a\tb\nmore", "a b …"},
		{"0123456789", "0123456789"},
		{"0123456789x", "012345678…"},
		{"0123456789\nmore", "012345678…"},
		{"01234567\nmore", "01234567 …"},
	} {
		if got := oneLine(tc.in, 10); got != tc.want {
			t.Errorf("oneLine(%q, 10) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLastErrorCell(t *testing.T) {
	const id = "01a234a3-107d-7f5c-8000-00626da1b4be"
	for _, tc := range []struct{ name, in, want string }{
		{"short", "broker said no", "broker said no"},
		{"own id dropped", "natspub: publishing " + id + ": no responders", "natspub: publishing: no responders"},
		{"the cause kept",
			"webhookpub: posting " + id + ` to http://127.0.0.1:1/: Post "http://127.0.0.1:1/": dial tcp 127.0.0.1:1: connect: connection refused`,
			"…dial tcp 127.0.0.1:1: connect: connection refused"},
		{"as many wrapped messages as fit",
			"webhookpub: posting " + id + " to https://hooks.example.com/a/very/long/path/to/the/endpoint: HTTP 503 Service Unavailable",
			"…HTTP 503 Service Unavailable"},
		{"a quoted body stays with its status",
			"webhookpub: posting " + id + ` to https://hooks.example.com/x: HTTP 502 Bad Gateway: "upstream: connect error or disconnect/reset before headers: reset reason: connection failure"`,
			`…HTTP 502 Bad Gateway: "upstream: connect error or disconne…`},
		{"lines joined", "kafka: produce failed:\n\tleader not available", "kafka: produce failed: leader not available"},
		{"no wrapped message to start at", strings.Repeat("x", 70), strings.Repeat("x", 59) + "…"},
	} {
		got := lastErrorCell(tc.in, id, 60)
		if got != tc.want {
			t.Errorf("%s: lastErrorCell(%q) =\n%q, want\n%q", tc.name, tc.in, got, tc.want)
		}
		if n := len([]rune(got)); n > 60 {
			t.Errorf("%s: %d runes, more than 60", tc.name, n)
		}
	}
}

// outbox list (table) shows the cause of a dead event's publisher error, not the
// event id and URL it starts with; -o json keeps the full text.
func TestOutboxListShowsTheCause(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	var id string
	if err := pgtest.Pool(t).QueryRow(ctx, `INSERT INTO "`+c.schema+`".outbox (aggregate_type, aggregate_id, event_type, payload, dead_at, attempts)
VALUES ('order', '7', 'paid', '{}', now(), 25) RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	full := "webhookpub: posting " + id + ` to http://127.0.0.1:1/: Post "http://127.0.0.1:1/": dial tcp 127.0.0.1:1: connect: connection refused`
	if _, err := pgtest.Pool(t).Exec(ctx, `UPDATE "`+c.schema+`".outbox SET last_error = $1`, full); err != nil {
		t.Fatal(err)
	}
	out := c.must("outbox", "list")
	if !strings.Contains(out, "…dial tcp 127.0.0.1:1: connect: connection refused\n") || strings.Count(out, id) != 1 {
		t.Fatalf("outbox list: want the cause and the id once:\n%s", out)
	}
	var listed []map[string]any
	if err := json.Unmarshal([]byte(c.must("outbox", "list", "-o", "json")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0]["last_error"] != full {
		t.Fatalf("outbox list -o json: %v", listed)
	}
}

// stats --watch into a file (not a terminal) writes no escape sequences: the reports
// follow each other, each under a timestamp, separated by a blank line.
func TestStatsWatchNotATerminal(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "stats"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var errb bytes.Buffer
	execute(ctx, f, &errb, "stats", "--watch", "100ms", "--database-url", pgtest.URL(t), "--schema", c.schema)
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	if strings.Contains(out, "\033") {
		t.Fatalf("stats --watch into a file wrote escape sequences:\n%q", out)
	}
	if !strings.HasPrefix(out, "stats at ") || !strings.Contains(out, ")\n\nstats at ") {
		t.Fatalf("stats --watch into a file: want reports under \"stats at <time>\" separated by a blank line:\n%s\n%s", out, errb.String())
	}
	stamp := strings.Fields(strings.TrimPrefix(out, "stats at "))[0]
	if _, err := time.Parse(time.RFC3339, stamp); err != nil {
		t.Fatalf("stats --watch header: %v", err)
	}
	if isTerminal(f) || isTerminal(&errb) {
		t.Fatal("isTerminal: a regular file or a buffer is a terminal")
	}
}
