package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

// panickyErr is an error whose Error method panics (a nil pointer inside).
type panickyErr struct{ msg *string }

func (e panickyErr) Error() string { return *e.msg }

// fixedPolicy is a retry policy that returns a fixed delay, however absurd.
type fixedPolicy time.Duration

func (p fixedPolicy) Delay(int) time.Duration { return time.Duration(p) }

// panicPolicy is a retry policy that panics.
type panicPolicy struct{}

func (panicPolicy) Delay(int) time.Duration { panic("retry policy bug") }

// Nothing one job does keeps other jobs' outcomes from being written: for each poison,
// 1,000 good jobs enqueued around it all succeed, and the poison job ends in the state
// docs/runtime.md documents. On the code before the hardening, the first poison (an
// error with a NUL and invalid UTF-8) stalled the completer: nothing succeeded.
func TestPoisonOutcomesDoNotStallOtherJobs(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("\xfe\x00binary", 200_000) // 1.4 MB, invalid UTF-8 and NULs
	poisons := []struct {
		name     string
		handler  skiplock.HandlerFunc
		opts     *skiplock.WorkerOpts
		state    skiplock.JobState
		checkErr func(string) bool
		maxDelay time.Duration // the job's run_at must be within now+maxDelay (pending only)
	}{
		{"nul_and_bad_utf8", func(context.Context, *skiplock.Job) error { return errors.New("gateway said \xff\x00") },
			&skiplock.WorkerOpts{MaxAttempts: 1}, skiplock.StateFailed,
			func(s string) bool { return s == "gateway said \uFFFD\uFFFD" }, 0},
		{"huge_binary", func(context.Context, *skiplock.Job) error { return errors.New(huge) },
			&skiplock.WorkerOpts{MaxAttempts: 1}, skiplock.StateFailed,
			func(s string) bool { return len(s) <= 16<<10 && strings.Contains(s, "truncated") }, 0},
		{"error_method_panics", func(context.Context, *skiplock.Job) error { return panickyErr{} },
			&skiplock.WorkerOpts{MaxAttempts: 1}, skiplock.StateFailed,
			func(s string) bool { return strings.Contains(s, "panicked") }, 0},
		{"panic_non_error", func(context.Context, *skiplock.Job) error { panic(struct{ A, B int }{1, 2}) },
			&skiplock.WorkerOpts{MaxAttempts: 1}, skiplock.StateFailed,
			func(s string) bool { return strings.HasPrefix(s, "panic: {1 2}") }, 0},
		{"panic_nul_text", func(context.Context, *skiplock.Job) error { panic("\x00\xff") },
			&skiplock.WorkerOpts{MaxAttempts: 1}, skiplock.StateFailed,
			func(s string) bool { return strings.HasPrefix(s, "panic: \uFFFD\uFFFD") }, 0},
		{"snooze_negative", func(context.Context, *skiplock.Job) error { return skiplock.Snooze(-time.Hour) },
			nil, skiplock.StatePending, nil, time.Second},
		{"snooze_overflow", func(context.Context, *skiplock.Job) error { return &skiplock.SnoozeError{Delay: math.MaxInt64} },
			nil, skiplock.StatePending, nil, skiplock.MaxSchedule + time.Hour},
		{"snooze_struct_negative", func(context.Context, *skiplock.Job) error { return &skiplock.SnoozeError{Delay: math.MinInt64} },
			nil, skiplock.StatePending, nil, time.Second},
		{"retry_policy_overflow", func(context.Context, *skiplock.Job) error { return errors.New("again") },
			&skiplock.WorkerOpts{MaxAttempts: 5, RetryPolicy: fixedPolicy(math.MaxInt64)}, skiplock.StatePending,
			func(s string) bool { return s == "again" }, skiplock.MaxSchedule + time.Hour},
		{"retry_policy_negative", func(context.Context, *skiplock.Job) error { return errors.New("again") },
			&skiplock.WorkerOpts{MaxAttempts: 5, RetryPolicy: fixedPolicy(-time.Hour)}, skiplock.StatePending,
			func(s string) bool { return s == "again" }, time.Second},
		{"retry_policy_panics", func(context.Context, *skiplock.Job) error { return errors.New("again") },
			&skiplock.WorkerOpts{MaxAttempts: 5, RetryPolicy: panicPolicy{}}, skiplock.StatePending,
			func(s string) bool { return s == "again" }, time.Hour}, // the panic is logged; the default policy's delay applies
	}
	for _, p := range poisons {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, skiplock.Config{})
			ws := skiplock.NewWorkers()
			e.must(ws.AddHandler("good", func(context.Context, *skiplock.Job) error { return nil }, nil))
			e.must(ws.AddHandler("poison", p.handler, p.opts))
			c := e.newClient(skiplock.Config{Workers: ws,
				Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 20}}})
			const good = 1000
			params := make([]skiplock.EnqueueParams, 0, good+1)
			for i := 0; i < good; i++ {
				if i == 20 {
					params = append(params, skiplock.EnqueueParams{Kind: "poison", Payload: []byte(`{}`)})
				}
				params = append(params, skiplock.EnqueueParams{Kind: "good", Payload: []byte(`{}`)})
			}
			_, err := c.EnqueueManyTx(e.ctx, e.pool, params) // the poison's neighbours share its claim and completion batches
			e.must(err)
			startClient(t, c)
			waitFor(t, 60*time.Second, "every good job to succeed", func() bool {
				return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE kind = 'good' AND status = 'succeeded'") == good
			})
			var (
				state   string
				lastErr *string
				delay   time.Duration
			)
			waitFor(t, 30*time.Second, "the poison job's outcome", func() bool {
				e.must(e.pool.QueryRow(e.ctx, "SELECT status, last_error, run_at - $1 FROM "+e.q("jobs")+" WHERE kind = 'poison'", t0).
					Scan(&state, &lastErr, &delay))
				return state != "running"
			})
			if state != string(p.state) {
				t.Fatalf("poison job ended %s, want %s", state, p.state)
			}
			if p.checkErr != nil {
				got := ""
				if lastErr != nil {
					got = *lastErr
				}
				if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || !p.checkErr(got) {
					t.Errorf("poison job's last_error = %.120q (%d bytes)", got, len(got))
				}
			}
			if p.state == skiplock.StatePending && (delay < 0 || delay > p.maxDelay) {
				t.Errorf("poison job is due in %s, want 0..%s", delay, p.maxDelay)
			}
		})
	}
}

// The manual lifecycle API applies the same text policy.
func TestManualOutcomeTextIsSanitised(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, err := e.client.EnqueueRawTx(e.ctx, e.pool, "manual", []byte(`{}`), &skiplock.EnqueueOpts{MaxAttempts: 1})
	e.must(err)
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 1)
	e.must(err)
	if len(jobs) != 1 {
		t.Fatalf("claimed %d jobs", len(jobs))
	}
	e.must(e.client.Manual().Fail(e.ctx, jobs[0], fmt.Errorf("bytes \x00\xff")))
	if got := scalar[string](e, "SELECT last_error FROM "+e.q("jobs")+" WHERE id = $1", jobs[0].ID); got != "bytes \uFFFD\uFFFD" {
		t.Errorf("last_error = %q", got)
	}
}

// Should the database refuse one outcome of a completion batch (here: text with a NUL,
// slipped past the text policy), the completer splits the batch: every other outcome
// is written, and the refused one is written again as a fallback that says why. On
// the code before the hardening, the batch was retried forever.
func TestCompleterIsolatesARefusedOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	const n = 9
	enqueueKind(e, e.client, "k", n)
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, n)
	e.must(err)
	errs := make([]string, n)
	for i := range errs {
		errs[i] = fmt.Sprintf("e%d", i)
	}
	errs[4] = "refused \x00 text"
	done := make(chan []skiplock.JobState, 1)
	go func() { done <- e.client.FlushRetriesForTest(jobs, errs) }()
	var states []skiplock.JobState
	select {
	case states = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the completer is still retrying a batch the database refuses")
	}
	for i, j := range jobs {
		if states[i] != skiplock.StatePending {
			t.Errorf("job %d left %s, want pending", i, states[i])
		}
		got := scalar[string](e, "SELECT last_error FROM "+e.q("jobs")+" WHERE id = $1", j.ID)
		switch {
		case i == 4 && !strings.Contains(got, "refused by the database"):
			t.Errorf("refused job's fallback last_error = %q", got)
		case i != 4 && got != errs[i]:
			t.Errorf("job %d last_error = %q, want %q", i, got, errs[i])
		}
	}
}

// When the database refuses every outcome (a trigger that rejects all updates), the
// completer's splitting is bounded: the batch is given up after a few dozen
// statements, its jobs stay leased for the reclaimer, and the completer moves on.
func TestCompleterGivesUpOnABatchRefusedEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	const n = 300
	enqueueKind(e, e.client, "k", n)
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, n)
	e.must(err)
	_, err = e.pool.Exec(e.ctx, `CREATE FUNCTION `+e.q("refuse")+`() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'no updates today'; END$$;
CREATE TRIGGER refuse BEFORE UPDATE ON `+e.q("jobs")+` FOR EACH ROW EXECUTE FUNCTION `+e.q("refuse")+`()`)
	e.must(err)
	errs := make([]string, n)
	for i := range errs {
		errs[i] = "boom"
	}
	began := time.Now()
	done := make(chan []skiplock.JobState, 1)
	go func() { done <- e.client.FlushRetriesForTest(jobs, errs) }()
	var states []skiplock.JobState
	select {
	case states = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the completer is still splitting a batch the database refuses everywhere")
	}
	for i, st := range states {
		if st != skiplock.StateRunning {
			t.Fatalf("job %d left %s, want it still leased (running) for the reclaimer", i, st)
		}
	}
	t.Logf("gave up on %d refused outcomes after %s", n, time.Since(began))
}
