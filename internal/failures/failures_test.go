package failures_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/skiplock/skiplock/internal/failures"
)

// newReporter returns a reporter logging into a buffer; the reporter logs on the
// caller's goroutine, so the tests' single goroutine needs no lock.
func newReporter() (*failures.Reporter, *bytes.Buffer) {
	buf := &bytes.Buffer{}
	return failures.New(slog.New(slog.NewTextHandler(buf, nil))), buf
}

// A failure is logged once, its repeats within LogEvery are counted but not logged,
// the recovery is logged, and a failure after the recovery (beyond RelapseWindow) is
// logged again. In a bubble: the reporter's clock is the fake one.
func TestWarnRateLimitsAndOKRecovers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testWarnRateLimitsAndOKRecovers)
}

func testWarnRateLimitsAndOKRecovers(t *testing.T) {
	r, buf := newReporter()
	for i := range 5 {
		r.Warn("claim", errors.New("connection refused "+string(rune('a'+i))), "queue", "mail")
	}
	if n := strings.Count(buf.String(), "skiplock: claim failed"); n != 1 {
		t.Fatalf("%d 'claim failed' lines for 5 failures, want 1:\n%s", n, buf)
	}
	if !strings.Contains(buf.String(), "queue=mail") {
		t.Errorf("the attrs are missing:\n%s", buf)
	}
	ops := r.Snapshot()
	if len(ops) != 1 || ops[0].Operation != "claim" || ops[0].Failures != 5 || !ops[0].Failing ||
		ops[0].FailingSince.IsZero() || ops[0].LastError != "connection refused e" {
		t.Fatalf("snapshot after 5 failures: %+v", ops)
	}
	r.OK("claim")
	r.OK("claim") // a second success logs nothing more
	if n := strings.Count(buf.String(), "skiplock: claim recovered"); n != 1 {
		t.Fatalf("%d 'claim recovered' lines, want 1:\n%s", n, buf)
	}
	ops = r.Snapshot()
	if len(ops) != 1 || ops[0].Failing || !ops[0].FailingSince.IsZero() || ops[0].Failures != 5 {
		t.Fatalf("snapshot after the recovery: %+v", ops)
	}
	<-time.After(failures.RelapseWindow)
	r.Warn("claim", errors.New("again"))
	if n := strings.Count(buf.String(), "skiplock: claim failed"); n != 2 {
		t.Fatalf("a failure after a recovery was not logged (%d lines):\n%s", n, buf)
	}
}

// A failure within RelapseWindow of a recovery is the same outage relapsing (a
// failover's flap): no new failure line, failing again since the outage's first
// failure, and the next recovery line says so. Fake clock (synctest).
func TestRelapseIsTheSameOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, buf := newReporter()
		began := time.Now()
		r.Warn("claim", errors.New("connection refused"))
		<-time.After(2 * time.Second)
		r.OK("claim") // a statement reached a dying server's last backend
		<-time.After(time.Second)
		r.Warn("claim", errors.New("read only connection"))
		r.Warn("claim", errors.New("read only connection"))
		ops := r.Snapshot()
		if len(ops) != 1 || !ops[0].Failing || !ops[0].FailingSince.Equal(began) {
			t.Fatalf("snapshot in the relapse: %+v (want failing since %s)", ops, began)
		}
		<-time.After(7 * time.Second)
		r.OK("claim")
		out := buf.String()
		if n := strings.Count(out, "skiplock: claim failed"); n != 1 {
			t.Errorf("%d 'claim failed' lines for one outage that relapsed, want 1:\n%s", n, out)
		}
		if n := strings.Count(out, "skiplock: claim recovered"); n != 2 {
			t.Errorf("%d 'claim recovered' lines, want 2:\n%s", n, out)
		}
		if !strings.Contains(out, "failing_for=10s relapses=1") {
			t.Errorf("the last recovery does not count the outage from its first failure with its relapse:\n%s", out)
		}
		// Beyond the window, a failure is a new outage again.
		<-time.After(failures.RelapseWindow)
		r.Warn("claim", errors.New("connection refused"))
		if n := strings.Count(buf.String(), "skiplock: claim failed"); n != 2 {
			t.Errorf("a failure beyond RelapseWindow was not logged as a new outage:\n%s", buf)
		}
	})
}

// OK of an operation that never failed records nothing; operations are sorted.
func TestSnapshotListsOnlyFailedOperationsSorted(t *testing.T) {
	t.Parallel()
	r, buf := newReporter()
	r.OK("heartbeat")
	r.Warn("relay:mark", errors.New("x"))
	r.Warn("completion", errors.New("y"))
	ops := r.Snapshot()
	if len(ops) != 2 || ops[0].Operation != "completion" || ops[1].Operation != "relay:mark" {
		t.Fatalf("snapshot: %+v", ops)
	}
	if strings.Contains(buf.String(), "heartbeat") {
		t.Errorf("an operation that never failed was logged:\n%s", buf)
	}
}

// Notices are rate-limited per key and are not operations.
func TestNoticeRateLimitedPerKey(t *testing.T) {
	t.Parallel()
	r, buf := newReporter()
	for range 3 {
		r.Notice("lease_lost", "lease lost", "job_id", "1")
	}
	r.Notice("other", "other notice")
	out := buf.String()
	if n := strings.Count(out, "lease lost"); n != 1 {
		t.Errorf("%d 'lease lost' lines for 3 notices, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "other notice") {
		t.Errorf("a notice with another key was held back:\n%s", out)
	}
	if ops := r.Snapshot(); len(ops) != 0 {
		t.Errorf("notices listed as operations: %+v", ops)
	}
}

// With no logger, the reporter writes to slog.Default() at Warn and above, read when
// the reporter is made. Not parallel: it swaps the process-wide default logger.
func TestDefaultLoggerIsSlogDefaultAtWarn(t *testing.T) {
	buf := &bytes.Buffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)

	failures.New(nil).Warn("publish", errors.New("broker down"))
	log := failures.Logger(nil)
	log.Info("routine line")
	log.Debug("debug line")
	log.Warn("a warning")
	explicit := slog.New(slog.DiscardHandler)
	if failures.Logger(explicit) != explicit {
		t.Error("Logger replaced a logger it was given")
	}
	out := buf.String()
	for _, want := range []string{"skiplock: publish failed", "a warning"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q did not reach slog.Default():\n%s", want, out)
		}
	}
	for _, quiet := range []string{"routine line", "debug line"} {
		if strings.Contains(out, quiet) {
			t.Errorf("%q reached slog.Default() below Warn:\n%s", quiet, out)
		}
	}
}
