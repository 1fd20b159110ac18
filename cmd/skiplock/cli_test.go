package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// closedURL names a server that is not there: a command that tried to connect
// would fail with exit status 1, so help and usage errors are shown to need none.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "postgres://nobody:secret@" + addr + "/none?connect_timeout=2"
}

// commandPaths lists every command of the tree, as the arguments that reach it.
func commandPaths(root *cobra.Command) [][]string {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if sub.Hidden {
				continue
			}
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	walk(root, []string{})
	return paths
}

func TestEveryCommandHelpAndBadFlag(t *testing.T) {
	t.Parallel()
	db := closedURL(t)
	paths := commandPaths(newRootCmd())
	if len(paths) < 25 {
		t.Fatalf("only %d commands found: %v", len(paths), paths)
	}
	for _, want := range []string{"limits list", "limits set", "limits delete", "limits usage"} {
		if !slices.ContainsFunc(paths, func(p []string) bool { return strings.Join(p, " ") == want }) {
			t.Errorf("command %q is not registered", want)
		}
	}
	for _, path := range paths {
		name := strings.Join(append([]string{"skiplock"}, path...), " ")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			for _, h := range []string{"--help", "-h"} {
				var out, errb bytes.Buffer
				code := execute(ctx, &out, &errb, append(append([]string{}, path...), h, "--database-url", db)...)
				if code != 0 || !strings.Contains(out.String(), "Usage:") || errb.Len() != 0 {
					t.Fatalf("%s %s: exit %d\nstdout:\n%s\nstderr:\n%s", name, h, code, out.String(), errb.String())
				}
			}
			var out, errb bytes.Buffer
			code := execute(ctx, &out, &errb, append(append([]string{}, path...), "--no-such-flag", "--database-url", db)...)
			if code != 2 || !strings.Contains(errb.String(), "unknown flag: --no-such-flag") ||
				!strings.Contains(errb.String(), "Run '"+name+" --help' for usage.") {
				t.Fatalf("%s --no-such-flag: exit %d\n%s", name, code, errb.String())
			}
			c, _, err := newRootCmd().Find(path)
			if err != nil {
				t.Fatal(err)
			}
			if c.Flags().Lookup("output") != nil {
				errb.Reset()
				code := execute(ctx, &out, &errb, append(append([]string{}, path...), "-o", "yaml", "--database-url", db)...)
				if code != 2 || !strings.Contains(errb.String(), `"yaml" is not one of: table, json`) {
					t.Fatalf("%s -o yaml: exit %d\n%s", name, code, errb.String())
				}
			}
		})
	}
}

// Usage errors exit 2 before any database work and name what is valid.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	db := closedURL(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "skiplock"; valid: `},
		{[]string{"job"}, "did you mean jobs?"},
		{[]string{"jobs"}, "skiplock: jobs: missing command; valid: cancel, delete, list, retry, show"},
		{[]string{"jobs", "lst"}, `unknown command "lst" for "skiplock jobs"; valid: cancel, delete, list, retry, show (did you mean list?)`},
		{[]string{"jobs", "list", "--state", "done"}, `"done" is not one of: pending, running, succeeded, failed, cancelled, waiting`},
		{[]string{"jobs", "list", "--state", "failed,done"}, `"done" is not one of: pending, running, succeeded, failed, cancelled, waiting`},
		{[]string{"jobs", "list", "--limit", "0"}, "--limit 0: want 1..10000"},
		{[]string{"jobs", "list", "--limit", "many"}, `invalid argument "many" for "--limit"`},
		{[]string{"jobs", "list", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"jobs", "show"}, "want one job id, got 0 arguments"},
		{[]string{"jobs", "show", "a", "b"}, "want one job id, got 2 arguments"},
		{[]string{"jobs", "retry"}, "give job ids, or --state failed|cancelled"},
		{[]string{"jobs", "retry", "--state", "running"}, `"running" is not one of: failed, cancelled`},
		{[]string{"jobs", "retry", "x", "--state", "failed"}, "not both"},
		{[]string{"jobs", "cancel", "--state", "failed"}, `"failed" is not one of: pending, running, waiting`},
		{[]string{"jobs", "delete", "--state", "running"}, `"running" is not one of: pending, succeeded, failed, cancelled`},
		{[]string{"outbox", "list", "--state", "sent"}, `"sent" is not one of: dead, pending, published`},
		{[]string{"outbox", "requeue"}, "give event ids or --all-dead"},
		{[]string{"outbox", "requeue", "x", "--all-dead"}, "give event ids or --all-dead"},
		{[]string{"stats", "--watch", "soon"}, `invalid argument "soon" for "--watch"`},
		{[]string{"migrate", "down"}, `unknown command "down" for "skiplock migrate"; valid: sql, status, up`},
		{[]string{"partitions", "enable", "--period", "month"}, `"month" is not one of: day, week`},
		{[]string{"retention"}, "valid: run"},
		{[]string{"roles", "grant"}, "valid: sql"},
		{[]string{"relay", "--to", "ftp://u:hunter2@broker"}, "the scheme must be one of: amqp, amqps, kafka, nats, http, https"},
		{[]string{"relay", "--to", "amqp://user:hunter2@broker", "--batch", "0"}, "--batch and --concurrency"},
		{[]string{"relay", "--to", "https://hooks.example", "--webhook-secret", "s", "--webhook-endpoint", "x"}, "want name=URL"},
		{[]string{"bench", "--workload", "W99"}, "bench: --workload"},
		{[]string{"bench", "--runs", "0"}, "bench: --runs 0: want 1 or more"},
		{[]string{"bench", "--runs", "many"}, `invalid argument "many" for "--runs"`},
		{[]string{"version", "now"}, `unexpected arguments ["now"]`},
		{[]string{"help", "jobs", "lst"}, `help: unknown command "jobs lst"; valid: `},
		{[]string{"metrics", "--min-interval", "often"}, `invalid argument "often" for "--min-interval"`},
		{[]string{"limits"}, "skiplock: limits: missing command; valid: delete, list, set, usage"},
		{[]string{"limits", "set", "--max-running", "5"}, "limits set: give exactly one of --queue and --kind"},
		{[]string{"limits", "set", "--queue", "q", "--kind", "k", "--max-running", "5"}, "give exactly one of --queue and --kind"},
		{[]string{"limits", "set", "--queue", "q"}, "give --max-running, --rate with --per, or both"},
		{[]string{"limits", "set", "--queue", "q", "--per", "1s"}, "--rate and --per go together"},
		{[]string{"limits", "set", "--queue", "q", "--rate", "5"}, "--rate and --per go together"},
		{[]string{"limits", "set", "--queue", "q", "--rate", "5", "--per", "1us"}, "limits set: invalid per: 1µs is outside 1ms..24h"},
		{[]string{"limits", "set", "--queue", "q", "--max-running", "-1"}, "limits set: invalid max_running: -1 is outside 0..1000000"},
		{[]string{"limits", "set", "--queue", "q", "--max-running", "lots"}, `invalid argument "lots" for "--max-running"`},
		{[]string{"limits", "set", "--queue", "a b", "--max-running", "1"}, "limits set: invalid queue"},
		{[]string{"limits", "delete"}, "limits delete: give exactly one of --queue and --kind"},
		{[]string{"limits", "delete", "--queue", "q", "--key", "a\x01"}, "limits delete: invalid key"},
		{[]string{"limits", "usage", "now"}, `unexpected arguments ["now"]`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			code := execute(context.Background(), &out, &errb, append(tc.args, "--database-url", db)...)
			if code != 2 || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, want 2 and %q in:\n%s", code, tc.want, errb.String())
			}
			if strings.Contains(errb.String(), "hunter2") {
				t.Fatalf("a password was printed:\n%s", errb.String())
			}
		})
	}
}

func TestRootWithoutArgumentsPrintsHelp(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := execute(context.Background(), &out, &errb); code != 0 || !strings.Contains(out.String(), "Available Commands:") {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// A runtime error (here: no server) is exit status 1, and the password in the
// connection string is not printed.
func TestRuntimeErrorExitsOneWithoutPassword(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := execute(context.Background(), &out, &errb, "jobs", "list", "--database-url", closedURL(t))
	if code != 1 || !strings.Contains(errb.String(), "connecting to postgres://nobody:xxxxx@") || strings.Contains(errb.String(), "secret") {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		code int
		msg  string
	}{
		{nil, 0, ""},
		{errors.New("boom"), 1, "skiplock: boom\n"},
		{errors.New("skiplock: job not found"), 1, "skiplock: job not found\n"},
		{fmt.Errorf("wrapped: %w", &usageError{err: errors.New("bad flag")}), 2, "skiplock: wrapped: bad flag\n"},
		{&usageError{cmd: &cobra.Command{Use: "x"}, err: errors.New("bad")}, 2, "skiplock: bad\nRun 'x --help' for usage.\n"},
	} {
		var b bytes.Buffer
		if code := exitCode(tc.err, &b); code != tc.code || b.String() != tc.msg {
			t.Errorf("exitCode(%v) = %d, %q; want %d, %q", tc.err, code, b.String(), tc.code, tc.msg)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := execute(context.Background(), &out, &errb, "version"); code != 0 || !strings.HasPrefix(out.String(), "skiplock ") {
		t.Fatalf("version: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := execute(context.Background(), &out, &errb, "version", "-o", "json"); code != 0 {
		t.Fatalf("version -o json: exit %d\n%s", code, errb.String())
	}
	var v buildVersion
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Version == "" || !strings.HasPrefix(v.Go, "go") {
		t.Fatalf("version -o json: %v %+v\n%s", err, v, out.String())
	}
}
