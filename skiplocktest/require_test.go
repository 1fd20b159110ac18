package skiplocktest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/skiplocktest"
)

type Email struct {
	To      string `json:"to"`
	Subject string `json:"subject,omitempty"`
}

func (Email) Kind() string { return "email" }

type SMS struct {
	Number string `json:"number"`
}

func (SMS) Kind() string { return "sms" }

// t0 is the fake clock's start.
var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// newClient returns a client in a schema of the test's own, on a fake clock.
func newClient(t *testing.T, cfg skiplock.Config) (*skiplock.Client, *skiplocktest.FakeClock) {
	t.Helper()
	clock := skiplocktest.NewFakeClock(t0)
	cfg.Clock = clock
	return skiplocktest.NewClient(t, cfg), clock
}

func enqueue(t *testing.T, c *skiplock.Client, db skiplock.DB, args skiplock.JobArgs, opts *skiplock.EnqueueOpts) string {
	t.Helper()
	res, err := c.EnqueueTx(context.Background(), db, args, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

func TestRequireEnqueuedSeesTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := newClient(t, skiplock.Config{})
	tx, err := c.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	id := enqueue(t, c, tx, Email{To: "ana@example.com"}, nil)

	got := skiplocktest.RequireEnqueued[Email](t, c, tx, nil)
	if got.Job.ID != id || got.Args.To != "ana@example.com" || got.Job.State != skiplock.StatePending ||
		got.Job.Queue != skiplock.DefaultQueue || got.Job.Kind != "email" || got.Job.MaxAttempts != skiplock.DefaultMaxAttempts {
		t.Errorf("RequireEnqueued = %+v, args %+v", got.Job, got.Args)
	}

	// The pool does not see the uncommitted job: the message says so.
	f := capture(t, func(tb testing.TB) { skiplocktest.RequireEnqueued[Email](tb, c, nil, nil) })
	f.wantFatal(t, `RequireEnqueued: want exactly 1 job(s) of kind "email"; found 0`,
		`No job of kind "email" is in schema "`+c.Schema()+`"`, "pass it as db")
	skiplocktest.RequireNotEnqueued[Email](t, c, nil, nil)
}

func TestRequireEnqueuedFilters(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, skiplock.Config{})
	db := c.Pool()
	mail := enqueue(t, c, db, Email{To: "ana"}, &skiplock.EnqueueOpts{Queue: "mail", Priority: 5,
		RunAt: t0.Add(time.Hour), MaxAttempts: 3, DeduplicationKey: "welcome-ana"})
	plain := enqueue(t, c, db, Email{To: "bob"}, nil)

	for _, tc := range []struct {
		name string
		opts *skiplocktest.RequireOpts[Email]
		want string
	}{
		{"queue", &skiplocktest.RequireOpts[Email]{Queue: "mail"}, mail},
		{"priority", &skiplocktest.RequireOpts[Email]{Priority: new(5)}, mail},
		{"priority 0", &skiplocktest.RequireOpts[Email]{Priority: new(0)}, plain},
		{"state", &skiplocktest.RequireOpts[Email]{States: []skiplock.JobState{skiplock.StatePending}, Queue: skiplock.DefaultQueue}, plain},
		{"scheduled after", &skiplocktest.RequireOpts[Email]{ScheduledAfter: t0.Add(time.Minute)}, mail},
		{"scheduled before", &skiplocktest.RequireOpts[Email]{ScheduledBefore: t0.Add(time.Minute)}, plain},
		{"scheduled window", &skiplocktest.RequireOpts[Email]{ScheduledAfter: t0.Add(time.Hour), ScheduledBefore: t0.Add(time.Hour)}, mail},
		{"max attempts", &skiplocktest.RequireOpts[Email]{MaxAttempts: 3}, mail},
		{"deduplication key", &skiplocktest.RequireOpts[Email]{DeduplicationKey: "welcome-ana"}, mail},
		{"where", &skiplocktest.RequireOpts[Email]{Where: func(e Email) bool { return e.To == "bob" }}, plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := skiplocktest.RequireEnqueued(t, c, db, tc.opts); got.Job.ID != tc.want {
				t.Errorf("matched %s (%+v), want %s", got.Job.ID, got.Args, tc.want)
			}
		})
	}

	t.Run("each job says why it does not match", func(t *testing.T) {
		t.Parallel()
		f := capture(t, func(tb testing.TB) {
			skiplocktest.RequireEnqueued(tb, c, db, &skiplocktest.RequireOpts[Email]{Queue: "mail", Priority: new(7),
				States: []skiplock.JobState{skiplock.StateSucceeded, skiplock.StateFailed}, ScheduledBefore: t0})
		})
		f.wantFatal(t,
			`want exactly 1 job(s) of kind "email" with queue "mail", priority 7, state succeeded or failed, run_at ≤ 2030-01-01T12:00:00Z; found 0`,
			`Jobs of kind "email" in schema "`+c.Schema()+`" (2):`,
			mail+` queue=mail priority=5 state=pending run_at=2030-01-01T13:00:00Z attempt=0/3 dedup="welcome-ana" payload={"to": "ana"}`,
			`does not match: priority is 5, want 7; state is pending, want succeeded or failed; run_at 2030-01-01T13:00:00Z is after 2030-01-01T12:00:00Z`,
			plain+` queue=default priority=0 state=pending`,
			`does not match: queue is "default", want "mail"; priority is 0, want 7; state is pending, want succeeded or failed`)
	})
	t.Run("window, attempts, key and Where", func(t *testing.T) {
		t.Parallel()
		f := capture(t, func(tb testing.TB) {
			skiplocktest.RequireEnqueued(tb, c, db, &skiplocktest.RequireOpts[Email]{ScheduledAfter: t0.Add(2 * time.Hour),
				MaxAttempts: 3, DeduplicationKey: "k"})
		})
		f.wantFatal(t, "with run_at ≥ 2030-01-01T14:00:00Z, max_attempts 3, deduplication key \"k\"; found 0",
			`run_at 2030-01-01T13:00:00Z is before 2030-01-01T14:00:00Z; deduplication key is "welcome-ana", want "k"`,
			`max_attempts is 8, want 3; deduplication key is "", want "k"`)
		f = capture(t, func(tb testing.TB) {
			skiplocktest.RequireEnqueued(tb, c, db, &skiplocktest.RequireOpts[Email]{Where: func(Email) bool { return false }})
		})
		f.wantFatal(t, "with Where(args) true; found 0", "does not match: Where returned false")
	})
	t.Run("more than one match", func(t *testing.T) {
		t.Parallel()
		f := capture(t, func(tb testing.TB) { skiplocktest.RequireEnqueued[Email](tb, c, db, nil) })
		f.wantFatal(t, `want exactly 1 job(s) of kind "email"; found 2`, mail+" queue=mail", plain+" queue=default", "matches")
		f = capture(t, func(tb testing.TB) {
			skiplocktest.RequireEnqueued(tb, c, db, &skiplocktest.RequireOpts[Email]{Count: 2})
		})
		f.wantFatal(t, "RequireEnqueued requires exactly one job; use RequireManyEnqueued for Count 2")
	})
}

func TestRequireManyEnqueued(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, skiplock.Config{})
	db := c.Pool()
	res, err := c.EnqueueMany(context.Background(), []skiplock.EnqueueParams{
		{Args: Email{To: "a"}}, {Args: Email{To: "b"}}, {Args: Email{To: "c"}, Opts: skiplock.EnqueueOpts{Queue: "bulk"}},
	})
	if err != nil {
		t.Fatal(err)
	}

	all := skiplocktest.RequireManyEnqueued(t, c, db, &skiplocktest.RequireOpts[Email]{Count: 3})
	for i, want := range []string{"a", "b", "c"} {
		if all[i].Args.To != want || all[i].Job.ID != res[i].ID {
			t.Errorf("job %d = %s %+v, want %s (enqueue order)", i, all[i].Job.ID, all[i].Args, want)
		}
	}
	if got := skiplocktest.RequireManyEnqueued(t, c, db, &skiplocktest.RequireOpts[Email]{Queue: skiplock.DefaultQueue}); len(got) != 2 {
		t.Errorf("at least one in default: got %d, want 2", len(got))
	}
	f := capture(t, func(tb testing.TB) {
		skiplocktest.RequireManyEnqueued(tb, c, db, &skiplocktest.RequireOpts[Email]{Count: 2})
	})
	f.wantFatal(t, `RequireManyEnqueued: want exactly 2 job(s) of kind "email"; found 3`)
	f = capture(t, func(tb testing.TB) {
		skiplocktest.RequireManyEnqueued(tb, c, db, &skiplocktest.RequireOpts[Email]{Queue: "nope"})
	})
	f.wantFatal(t, `want at least 1 job(s) of kind "email" with queue "nope"; found 0`, `queue is "bulk", want "nope"`)
	f = capture(t, func(tb testing.TB) {
		skiplocktest.RequireManyEnqueued(tb, c, db, &skiplocktest.RequireOpts[Email]{Count: -1})
	})
	f.wantFatal(t, "Count -1 is negative (use RequireNotEnqueued")
}

func TestRequireNotEnqueued(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, skiplock.Config{})
	db := c.Pool()
	id := enqueue(t, c, db, Email{To: "ana"}, &skiplock.EnqueueOpts{Queue: "mail"})

	skiplocktest.RequireNotEnqueued[SMS](t, c, db, nil)
	skiplocktest.RequireNotEnqueued(t, c, db, &skiplocktest.RequireOpts[Email]{Queue: skiplock.DefaultQueue})
	f := capture(t, func(tb testing.TB) {
		skiplocktest.RequireNotEnqueued(tb, c, db, &skiplocktest.RequireOpts[Email]{Queue: "mail"})
	})
	f.wantFatal(t, `RequireNotEnqueued: want no job(s) of kind "email" with queue "mail"; found 1`, id+" queue=mail", "matches")
}

func TestRequireListsOtherKinds(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, skiplock.Config{})
	db := c.Pool()
	enqueue(t, c, db, SMS{Number: "1"}, nil)
	enqueue(t, c, db, SMS{Number: "2"}, nil)
	f := capture(t, func(tb testing.TB) { skiplocktest.RequireEnqueued[Email](tb, c, db, nil) })
	f.wantFatal(t, `No job of kind "email" is in schema "`+c.Schema()+`"; it holds: sms (2).`)
}

func TestRequireReportsPayloadsThatDoNotDecode(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, skiplock.Config{})
	if _, err := c.EnqueueRaw(context.Background(), "email", []byte(`{"to": 42}`), nil); err != nil {
		t.Fatal(err)
	}
	f := capture(t, func(tb testing.TB) { skiplocktest.RequireEnqueued[Email](tb, c, nil, nil) })
	f.wantFatal(t, "found 0", `payload={"to": 42}`, "does not match: payload does not decode into skiplocktest_test.Email: json: cannot unmarshal number")
}

func TestRequireSchemaWithoutClient(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, skiplock.Config{})
	enqueue(t, c, c.Pool(), Email{To: "ana"}, nil)
	got := skiplocktest.RequireEnqueued(t, nil, c.Pool(), &skiplocktest.RequireOpts[Email]{Schema: c.Schema()})
	if got.Args.To != "ana" {
		t.Errorf("args = %+v", got.Args)
	}
	f := capture(t, func(tb testing.TB) { skiplocktest.RequireEnqueued[Email](tb, nil, nil, nil) })
	f.wantFatal(t, "RequireEnqueued: no db and no client to read through")
	f = capture(t, func(tb testing.TB) {
		skiplocktest.RequireEnqueued(tb, nil, c.Pool(), &skiplocktest.RequireOpts[Email]{Schema: "no_such_schema"})
	})
	f.wantFatal(t, `reading jobs of kind "email" in schema "no_such_schema"`, "does not exist")
}

type nilKind struct{ kind string }

func (n *nilKind) Kind() string { return n.kind }

func TestRequireKindPanics(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, skiplock.Config{})
	f := capture(t, func(tb testing.TB) { skiplocktest.RequireNotEnqueued[*nilKind](tb, c, nil, nil) })
	f.wantFatal(t, "*skiplocktest_test.nilKind names no kind")
	if len(f.errors) != 1 || !strings.Contains(f.errors[0], "Kind() panicked on the zero value") {
		t.Errorf("errors = %q", f.errors)
	}
}
