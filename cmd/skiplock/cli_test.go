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
	"time"

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
		{[]string{"jobs", "list", "--state", "done"}, `"done" is not one of: pending, claimed, running, succeeded, failed, cancelled, waiting`},
		{[]string{"jobs", "list", "--state", "failed,done"}, `"done" is not one of: pending, claimed, running, succeeded, failed, cancelled, waiting`},
		{[]string{"jobs", "list", "--limit", "0"}, `invalid argument "0" for "--limit" flag: want 1..10000`},
		{[]string{"jobs", "list", "--limit", "many"}, `invalid argument "many" for "--limit"`},
		{[]string{"jobs", "list", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"jobs", "show"}, "want one job id, got 0 arguments"},
		{[]string{"jobs", "show", "a", "b"}, "want one job id, got 2 arguments"},
		{[]string{"jobs", "retry"}, "give job ids, or --state failed|cancelled"},
		{[]string{"jobs", "retry", "--state", "running"}, `"running" is not one of: failed, cancelled`},
		{[]string{"jobs", "retry", "x", "--state", "failed"}, "not both"},
		{[]string{"jobs", "cancel", "--state", "failed"}, `"failed" is not one of: pending, claimed, running, waiting`},
		{[]string{"jobs", "delete", "--state", "running"}, `"running" is not one of: pending, succeeded, failed, cancelled`},
		{[]string{"outbox", "list", "--state", "sent"}, `"sent" is not one of: dead, pending, published`},
		{[]string{"outbox", "requeue"}, "give event ids or --all-dead"},
		{[]string{"outbox", "requeue", "x", "--all-dead"}, "give event ids or --all-dead"},
		{[]string{"stats", "--watch", "soon"}, `invalid argument "soon" for "--watch"`},
		{[]string{"metrics", "--listen", "not an addr"}, `metrics: --listen "not an addr": want host:port`},
		{[]string{"metrics", "--addr", "not an addr"}, `metrics: --addr "not an addr": want host:port`},
		{[]string{"metrics", "--listen", ":99999"}, `port "99999" is not a number from 0 to 65535`},
		{[]string{"dashboard", "--listen", "localhost"}, `dashboard: --listen "localhost": want host:port`},
		{[]string{"migrate", "down"}, `unknown command "down" for "skiplock migrate"; valid: sql, status, up`},
		{[]string{"partitions", "enable", "--period", "month"}, `"month" is not one of: day, week`},
		{[]string{"retention"}, "valid: run"},
		{[]string{"roles", "grant"}, "valid: sql"},
		{[]string{"relay", "--to", "ftp://u:hunter2@broker"}, "the scheme must be one of: amqp, amqps, kafka, nats, http, https"},
		{[]string{"relay", "--to", "amqp://user:hunter2@broker", "--batch", "0"}, `invalid argument "0" for "--batch" flag: want 1..10000`},
		{[]string{"relay", "--to", "amqp://user:hunter2@broker", "--concurrency", "0"}, `invalid argument "0" for "--concurrency" flag: want 1 or more`},
		{[]string{"relay", "--to", "https://hooks.example", "--webhook-secret", "s", "--webhook-endpoint", "x"}, "want name=URL"},
		{[]string{"bench", "--workload", "W99"}, "bench: --workload"},
		{[]string{"bench", "--runs", "0"}, "bench: --runs 0: want 1 or more"},
		{[]string{"bench", "--runs", "many"}, `invalid argument "many" for "--runs"`},
		{[]string{"bench", "--citus-keys", "0"}, "bench: --citus-keys 0: want 1 or more"},
		{[]string{"bench", "--workload", "C1"}, "--citus-url"},
		{[]string{"bench", "--citus", "--workload", "CH", "--citus-url", "postgres://127.0.0.1:1/x"}, "bench: --workload: CH does not run on the Citus layout (W3, W5, W6, CN and CQ do; C1 and CH compare a plain node with a cluster named by --citus-url)"},
		{[]string{"bench", "--citus", "--workload", "W3,W7"}, "bench: --workload: W7 does not run on the Citus layout"},
		{[]string{"version", "now"}, `unexpected arguments ["now"]`},
		{[]string{"help", "jobs", "lst"}, `help: unknown command "jobs lst"; valid: cancel, delete, list, retry, show`},
		{[]string{"help", "nosuch"}, `help: unknown command "nosuch"; valid: batches, `},
		{[]string{"metrics", "--min-interval", "often"}, `invalid argument "often" for "--min-interval"`},
		{[]string{"limits"}, "skiplock: limits: missing command; valid: delete, list, set, usage"},
		{[]string{"limits", "set", "--max-running", "5"}, "limits set: give exactly one of --queue and --kind"},
		{[]string{"limits", "set", "--queue", "q", "--kind", "k", "--max-running", "5"}, "give exactly one of --queue and --kind"},
		{[]string{"limits", "set", "--queue", "q"}, "give --max-running, --rate with --per, or both"},
		{[]string{"limits", "set", "--queue", "q", "--per", "1s"}, "--rate and --per go together"},
		{[]string{"limits", "set", "--queue", "q", "--rate", "5"}, "--rate and --per go together"},
		{[]string{"limits", "set", "--queue", "q", "--rate", "5", "--per", "1us"}, "limits set: invalid per: 1µs is outside 1ms..24h"},
		// The figures' range is the one --help gives (the library's 0 means "not
		// limited", which here is leaving the flag out), and the flags are named.
		{[]string{"limits", "set", "--queue", "q", "--max-running", "-5"}, `invalid argument "-5" for "--max-running" flag: want 1..1000000`},
		{[]string{"limits", "set", "--queue", "q", "--max-running", "0"}, `invalid argument "0" for "--max-running" flag: want 1..1000000`},
		{[]string{"limits", "set", "--queue", "q", "--rate", "0", "--per", "1s"}, `invalid argument "0" for "--rate" flag: want 1..1000000`},
		{[]string{"limits", "set", "--queue", "q", "--max-running", "lots"}, `invalid argument "lots" for "--max-running"`},
		{[]string{"limits", "set", "--queue", "a b", "--max-running", "1"}, "limits set: invalid queue"},
		{[]string{"limits", "delete"}, "limits delete: give exactly one of --queue and --kind"},
		{[]string{"limits", "delete", "--queue", "q", "--key", "a\x01"}, "limits delete: invalid key"},
		{[]string{"limits", "usage", "now"}, `unexpected arguments ["now"]`},

		// Bad values of flags and arguments, refused before connecting.
		{[]string{"jobs", "list", "--schema", "bad-name"}, `--schema: invalid schema name "bad-name": character '-' not allowed`},
		{[]string{"migrate", "sql", "--schema", "bad-name"}, `--schema: invalid schema name "bad-name"`},
		{[]string{"roles", "sql", "--worker", "a b"}, `roles sql: invalid roles: invalid worker role name "a b"`},
		{[]string{"partitions", "enable", "--premake", "-1"}, `invalid argument "-1" for "--premake" flag: want 1..60`},
		{[]string{"partitions", "enable", "--premake", "61"}, `invalid argument "61" for "--premake" flag: want 1..60`},
		{[]string{"retention", "run", "--batch", "-5"}, `invalid argument "-5" for "--batch" flag: want 1 or more`},
		{[]string{"retention", "run", "--batch", "0"}, `invalid argument "0" for "--batch" flag: want 1 or more`},
		{[]string{"relay", "--to", "nats://127.0.0.1:4222", "--poll", "-1s"}, `invalid argument "-1s" for "--poll" flag: want 0 or more`},
		{[]string{"relay", "--to", "kafka://"}, `relay: --to "kafka://" names no broker: want kafka://host:9092`},
		{[]string{"relay", "--to", "kafka://,/topic"}, "names no broker"},
		{[]string{"completion"}, "completion: missing command; valid: bash, fish, powershell, zsh"},
		{[]string{"completion", "tcsh"}, `unknown command "tcsh" for "skiplock completion"; valid: bash, fish, powershell, zsh`},
		{[]string{"completion", "bash", "extra"}, `completion bash: unexpected arguments ["extra"]`},
		{[]string{"jobs", "show", "notauuid"}, `jobs show: "notauuid" is not a job id (a UUID)`},
		{[]string{"jobs", "retry", "notauuid"}, `jobs retry: "notauuid" is not a job id (a UUID)`},
		{[]string{"jobs", "cancel", "0190a1b2-0000-7000-8000-000000000000", "notauuid"}, `jobs cancel: "notauuid" is not a job id (a UUID)`},
		{[]string{"jobs", "delete", "notauuid"}, `jobs delete: "notauuid" is not a job id (a UUID)`},
		{[]string{"jobs", "list", "--after", "notauuid"}, `jobs list: --after "notauuid" is not a job id (a UUID)`},
		{[]string{"flows", "show", "notauuid"}, `flows show: "notauuid" is not a job id (a UUID)`},
		{[]string{"batches", "show", "notauuid"}, `batches show: "notauuid" is not a batch id (a UUID)`},
		{[]string{"outbox", "show", "notauuid"}, `outbox show: "notauuid" is not an event id (a UUID)`},
		{[]string{"outbox", "requeue", "notauuid"}, `outbox requeue: "notauuid" is not an event id (a UUID)`},

		// Negative durations are refused; what 0 means is in each flag's help.
		{[]string{"partitions", "enable", "--lock-timeout", "-1s"}, `invalid argument "-1s" for "--lock-timeout" flag: want 0 or more`},
		{[]string{"metrics", "--min-interval", "-1s"}, `invalid argument "-1s" for "--min-interval" flag: want 0 or more`},
		{[]string{"metrics", "--max-oldest-due", "-1s"}, `invalid argument "-1s" for "--max-oldest-due" flag: want 0 or more`},
		{[]string{"metrics", "--max-outbox-lag", "-1s"}, `invalid argument "-1s" for "--max-outbox-lag" flag: want 0 or more`},
		{[]string{"stats", "--watch", "-1s"}, `invalid argument "-1s" for "--watch" flag: want 0 or more`},
		{[]string{"relay", "--to", "nats://127.0.0.1:4222", "--lease", "-1s"}, `invalid argument "-1s" for "--lease" flag: want 0 or more`},
		{[]string{"relay", "--to", "nats://127.0.0.1:4222", "--stats-every", "-1s"}, `invalid argument "-1s" for "--stats-every" flag: want 0 or more`},
		{[]string{"retention", "run", "--outbox-published", "-1s"}, `invalid argument "-1s" for "--outbox-published" flag: want 0 or more`},

		// Multi-name commands check every name before acting on any.
		{[]string{"queues", "pause", "mail", "bad q", "other"}, `queues pause: invalid queue name "bad q": character ' ' not allowed`},
		{[]string{"queues", "resume", "mail", "bad q", "x y"}, `invalid queue name "x y"`},
		{[]string{"queues", "pause", "mail", "bad q"}, "; nothing was paused"},
		{[]string{"queues", "depth", "bad q"}, `queues depth: invalid queue name "bad q"`},
		{[]string{"relay", "--to", "http://127.0.0.1:1/", "--webhook-secret", "s", "--health-addr", "8081"}, `relay: --health-addr "8081": want host:port`},
		{[]string{"queues", "depth", "a", "b"}, "queues depth: want at most one queue, got 2 arguments"},
		{[]string{"metrics", "--depth-queues", "mail,x y"}, `--depth-queues: invalid queue name "x y"`},

		// schedules update without a field to change.
		{[]string{"schedules", "update", "nightly"}, "schedules update: nothing to update: give at least one of --spec, --timezone, --kind, --payload, --queue"},
		{[]string{"schedules", "update", "nightly", "-o", "json"}, "nothing to update"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			// A command that accepted its line would fail to connect, or serve
			// (metrics, which starts without the database) until the deadline.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			code := execute(ctx, &out, &errb, append(tc.args, "--database-url", db)...)
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
		// The library's prefix inside a wrapped error is not repeated.
		{fmt.Errorf("listing jobs: %w", errors.New("skiplock: invalid after_id")), 1, "skiplock: listing jobs: invalid after_id\n"},
		{fmt.Errorf("relay: %w", fmt.Errorf("partitioning: %w", errors.New("skiplock: boom"))), 1, "skiplock: relay: partitioning: boom\n"},
		{&usageError{err: fmt.Errorf("schedules add: %w", errors.New("skiplock: invalid spec"))}, 2, "skiplock: schedules add: invalid spec\n"},
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
	// --version, as most CLIs take it, prints the same line.
	var line bytes.Buffer
	execute(context.Background(), &line, &errb, "version")
	out.Reset()
	if code := execute(context.Background(), &out, &errb, "--version"); code != 0 || out.String() != line.String() {
		t.Fatalf("--version: exit %d, %q; want %q", code, out.String(), line.String())
	}
}

// schedules update changes only the flags given, so its --help shows no defaults;
// schedules add, where an unset flag is its default, shows them.
func TestSchedulesUpdateHelpShowsNoDefaults(t *testing.T) {
	t.Parallel()
	defaults := []string{`(default "UTC")`, `(default "{}")`, `(default "default")`, "(default run_once)", "(default 100)"}
	for _, tc := range []struct {
		cmd  string
		want bool
	}{{"update", false}, {"add", true}} {
		var out, errb bytes.Buffer
		if code := execute(context.Background(), &out, &errb, "schedules", tc.cmd, "--help"); code != 0 {
			t.Fatalf("schedules %s --help: exit %d\n%s", tc.cmd, code, errb.String())
		}
		for _, d := range defaults {
			if strings.Contains(out.String(), d) != tc.want {
				t.Errorf("schedules %s --help: %s shown: %v, want %v\n%s", tc.cmd, d, !tc.want, tc.want, out.String())
			}
		}
	}
}

// completion writes the script for a known shell on the command's stdout.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		for _, extra := range [][]string{nil, {"--no-descriptions"}} {
			var out, errb bytes.Buffer
			code := execute(context.Background(), &out, &errb, append([]string{"completion", shell}, extra...)...)
			if code != 0 || !strings.Contains(out.String(), "skiplock") || errb.Len() != 0 {
				t.Fatalf("completion %s %v: exit %d, %d bytes\n%s", shell, extra, code, out.Len(), errb.String())
			}
		}
	}
}

// A relay whose --to needs a default destination for events without one (nats'
// subject, amqp's routing key, kafka's topic) warns at startup, naming the flag.
// The database is closed here: the warning comes first, then exit 1.
func TestRelayWarnsWithoutDefaultDestination(t *testing.T) {
	t.Parallel()
	db := closedURL(t)
	broker := strings.TrimPrefix(closedURL(t), "postgres://nobody:secret@")
	broker, _, _ = strings.Cut(broker, "/")
	for _, tc := range []struct {
		args []string
		warn string // "" for none
	}{
		{[]string{"--to", "nats://" + broker}, "give --subject"},
		{[]string{"--to", "nats://" + broker, "--subject", "events"}, ""},
		{[]string{"--to", "amqp://guest:guest@" + broker + "/"}, "give --routing-key"},
		{[]string{"--to", "amqp://guest:guest@" + broker + "/", "--routing-key", "events"}, ""},
		{[]string{"--to", "kafka://" + broker}, "give --topic"},
		{[]string{"--to", "kafka://" + broker + "/events"}, ""},
		{[]string{"--to", "kafka://" + broker, "--topic", "events"}, ""},
	} {
		var out, errb bytes.Buffer
		code := execute(context.Background(), &out, &errb, append([]string{"relay", "--database-url", db}, tc.args...)...)
		warned := strings.Contains(errb.String(), "events without a Destination will be dead-lettered")
		if code != 1 || warned != (tc.warn != "") || (tc.warn != "" && !strings.Contains(errb.String(), tc.warn)) {
			t.Errorf("relay %v: exit %d, want 1 and warning %q\n%s", tc.args, code, tc.warn, errb.String())
		}
	}
}

// TestVersionStamp: a release build's -ldflags -X stamp (scripts/release.sh) is what
// `skiplock version` reports, in place of the build information.
func TestVersionStamp(t *testing.T) {
	// Not parallel: it sets the package's stamp variables.
	version, commit, date = "v1.2.3", "0123456789abcdef0123456789abcdef01234567", "2026-12-04T10:00:00Z"
	t.Cleanup(func() { version, commit, date = "", "", "" })
	v := readBuildVersion()
	if v.Version != "v1.2.3" || v.Revision != commit || v.Time != date || v.Modified {
		t.Fatalf("stamped version: %+v", v)
	}
	want := "skiplock v1.2.3 (github.com/skiplock/skiplock, revision 0123456789abcdef0123456789abcdef01234567, committed 2026-12-04T10:00:00Z, "
	if line := v.line(); !strings.HasPrefix(line, want) {
		t.Fatalf("line: %q\nwant prefix %q", line, want)
	}
}
