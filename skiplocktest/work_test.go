package skiplocktest_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/skiplocktest"
)

func TestWorkBuildsTheJobAClientWould(t *testing.T) {
	t.Parallel()
	clock := skiplocktest.NewFakeClock(t0)
	var (
		seen     *skiplock.Job
		seenArgs Email
	)
	err := skiplocktest.Work(context.Background(), t, skiplock.WorkFunc[Email](func(ctx context.Context, job *skiplock.Job, args Email) error {
		seen, seenArgs = job, args
		if skiplock.JobFromContext(ctx) != job {
			t.Errorf("JobFromContext = %v, want the handler's job", skiplock.JobFromContext(ctx))
		}
		if got := skiplock.IdempotencyKey(ctx); got != job.IdempotencyKey() || got == "" {
			t.Errorf("IdempotencyKey(ctx) = %q, want %q", got, job.IdempotencyKey())
		}
		if _, ok := ctx.Deadline(); ok {
			t.Error("context has a deadline without WorkOpts.Timeout")
		}
		return nil
	}), Email{To: "ana", Subject: "hi"}, &skiplocktest.WorkOpts{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if seen == nil {
		t.Fatal("handler did not run")
	}
	if seenArgs != (Email{To: "ana", Subject: "hi"}) {
		t.Errorf("args = %+v", seenArgs)
	}
	if len(seen.ID) != 36 || seen.Kind != "email" || seen.Queue != skiplock.DefaultQueue || seen.State != skiplock.StateRunning ||
		seen.Attempt != 1 || seen.MaxAttempts != skiplock.DefaultMaxAttempts || seen.Priority != 0 ||
		!seen.RunAt.Equal(t0) || !seen.CreatedAt.Equal(t0) || seen.LeaseToken == "" || !seen.LeaseUntil.After(t0) {
		t.Errorf("job = %+v", seen)
	}
	if string(seen.Payload) != `{"to":"ana","subject":"hi"}` {
		t.Errorf("payload = %s", seen.Payload)
	}
}

// Lossy loses a field on the way through JSON, as it would through the database.
type Lossy struct {
	Name   string
	secret string
}

func (Lossy) Kind() string { return "lossy" }

func TestWorkRoundTripsArgsThroughJSON(t *testing.T) {
	t.Parallel()
	err := skiplocktest.Work(context.Background(), t, skiplock.WorkFunc[Lossy](func(_ context.Context, _ *skiplock.Job, a Lossy) error {
		if a.Name != "n" || a.secret != "" {
			t.Errorf("args = %+v, want the secret lost as enqueue loses it", a)
		}
		return nil
	}), Lossy{Name: "n", secret: "s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
}

func TestWorkReturnsWhatTheHandlerReturns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		ret   error
		check func(error) bool
	}{
		{"error", boom, func(err error) bool { return err == boom }},
		{"snooze", skiplock.Snooze(time.Minute), func(err error) bool {
			var s *skiplock.SnoozeError
			return errors.As(err, &s) && s.Delay == time.Minute
		}},
		{"cancel", skiplock.Cancel(boom), func(err error) bool { var c *skiplock.CancelError; return errors.As(err, &c) }},
		{"permanent", skiplock.Permanent(boom), func(err error) bool { var p *skiplock.PermanentError; return errors.As(err, &p) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := skiplocktest.Work(ctx, t, skiplock.WorkFunc[Email](func(context.Context, *skiplock.Job, Email) error { return tc.ret }), Email{}, nil)
			if !tc.check(err) {
				t.Errorf("Work = %v", err)
			}
		})
	}
	t.Run("panic", func(t *testing.T) {
		t.Parallel()
		err := skiplocktest.Work(ctx, t, skiplock.WorkFunc[Email](func(context.Context, *skiplock.Job, Email) error { panic("kaput") }), Email{}, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "panic: kaput\n") || !strings.Contains(err.Error(), "goroutine") {
			t.Errorf("Work = %v, want the panic with its stack", err)
		}
	})
}

func TestWorkOpts(t *testing.T) {
	t.Parallel()
	var order []string
	mw := func(name string) skiplock.Middleware {
		return func(next skiplock.HandlerFunc) skiplock.HandlerFunc {
			return func(ctx context.Context, job *skiplock.Job) error {
				order = append(order, name)
				if skiplock.JobFromContext(ctx) != job {
					t.Errorf("middleware %s: no job in the context", name)
				}
				return next(ctx, job)
			}
		}
	}
	err := skiplocktest.Work(context.Background(), t, skiplock.WorkFunc[Email](func(ctx context.Context, job *skiplock.Job, _ Email) error {
		order = append(order, "handler")
		if job.ID != "0190b1d4-0000-7000-8000-000000000001" || job.Queue != "mail" || job.Priority != 3 || job.Attempt != 4 ||
			job.MaxAttempts != 4 || job.DeduplicationKey != "k" {
			t.Errorf("job = %+v", job)
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Error("no deadline with WorkOpts.Timeout")
		}
		return nil
	}), Email{}, &skiplocktest.WorkOpts{ID: "0190b1d4-0000-7000-8000-000000000001", Queue: "mail", Priority: 3, Attempt: 4,
		MaxAttempts: 4, DeduplicationKey: "k", Timeout: time.Minute, Middleware: []skiplock.Middleware{mw("outer"), mw("inner")}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "outer,inner,handler" {
		t.Errorf("order = %v", order)
	}
}

type Unencodable struct {
	F func() `json:"f"`
}

func (Unencodable) Kind() string { return "unencodable" }

type Float struct {
	X float64 `json:"x"`
}

func (Float) Kind() string { return "float" }

func TestWorkFailsOnArgsThatCannotBeAJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ran := false
	f := capture(t, func(tb testing.TB) {
		skiplocktest.Work(ctx, tb, skiplock.WorkFunc[Unencodable](func(context.Context, *skiplock.Job, Unencodable) error { ran = true; return nil }), Unencodable{}, nil)
	})
	f.wantFatal(t, "Work: args skiplocktest_test.Unencodable do not encode to JSON: json: unsupported type: func()")
	f = capture(t, func(tb testing.TB) {
		skiplocktest.Work(ctx, tb, skiplock.WorkFunc[Float](func(context.Context, *skiplock.Job, Float) error { ran = true; return nil }), Float{X: math.Inf(1)}, nil)
	})
	f.wantFatal(t, "do not encode to JSON: json: unsupported value: +Inf")
	f = capture(t, func(tb testing.TB) {
		skiplocktest.Work(ctx, tb, skiplock.WorkFunc[Email](func(context.Context, *skiplock.Job, Email) error { ran = true; return nil }), Email{To: "a\x00b"}, nil)
	})
	f.wantFatal(t, "Work: enqueue would refuse args skiplocktest_test.Email: skiplock: invalid payload")
	f = capture(t, func(tb testing.TB) { skiplocktest.Work[Email](ctx, tb, nil, Email{}, nil) })
	f.wantFatal(t, "Work: skiplock: invalid worker: must not be nil")
	f = capture(t, func(tb testing.TB) {
		skiplocktest.Work(ctx, tb, skiplock.WorkFunc[*nilKind](func(context.Context, *skiplock.Job, *nilKind) error { ran = true; return nil }), &nilKind{kind: "x"}, nil)
	})
	f.wantFatal(t, "Kind() panicked on the zero value")
	if ran {
		t.Error("a handler ran")
	}
}

func TestWorkJobRunsAnEnqueuedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := newClient(t, skiplock.Config{})
	id := enqueue(t, c, c.Pool(), Email{To: "ana"}, &skiplock.EnqueueOpts{Queue: "mail", MaxAttempts: 2})
	found := skiplocktest.RequireEnqueued[Email](t, c, nil, nil)

	var seen *skiplock.Job
	err := skiplocktest.WorkJob(ctx, t, skiplock.WorkFunc[Email](func(ctx context.Context, job *skiplock.Job, a Email) error {
		seen = job
		if a.To != "ana" || skiplock.JobFromContext(ctx) != job {
			t.Errorf("args %+v, job in context %v", a, skiplock.JobFromContext(ctx))
		}
		return errors.New("smtp down")
	}), found.Job, nil)
	if err == nil || err.Error() != "smtp down" {
		t.Errorf("WorkJob = %v", err)
	}
	if seen.ID != id || seen.Queue != "mail" || seen.State != skiplock.StateRunning || seen.Attempt != 1 || seen.MaxAttempts != 2 {
		t.Errorf("job = %+v", seen)
	}
	if found.Job.State != skiplock.StatePending || found.Job.Attempt != 0 {
		t.Errorf("WorkJob changed the caller's job: %+v", found.Job)
	}
	// Nothing was written.
	skiplocktest.RequireEnqueued(t, c, nil, &skiplocktest.RequireOpts[Email]{States: []skiplock.JobState{skiplock.StatePending}})

	f := capture(t, func(tb testing.TB) {
		skiplocktest.WorkJob(ctx, tb, skiplock.WorkFunc[SMS](func(context.Context, *skiplock.Job, SMS) error { return nil }), found.Job, nil)
	})
	f.wantFatal(t, "WorkJob: job "+id+` is of kind "email"; the worker takes "sms"`)
	f = capture(t, func(tb testing.TB) {
		skiplocktest.WorkJob(ctx, tb, skiplock.WorkFunc[SMS](func(context.Context, *skiplock.Job, SMS) error { return nil }), nil, nil)
	})
	f.wantFatal(t, "WorkJob: job is nil")

	// A payload that does not decode fails the job permanently, as a client does.
	bad := *found.Job
	bad.Payload = []byte(`{"to": 1}`)
	err = skiplocktest.WorkJob(ctx, t, skiplock.WorkFunc[Email](func(context.Context, *skiplock.Job, Email) error {
		t.Error("handler ran on an undecodable payload")
		return nil
	}), &bad, nil)
	var perm *skiplock.PermanentError
	if !errors.As(err, &perm) || !strings.Contains(err.Error(), "decoding email payload") {
		t.Errorf("WorkJob = %v, want a permanent decoding error", err)
	}
}

// WorkOpts.Client is the client the handler finds in its context, as a client's own
// handlers find it; without it ClientFromContext reports none.
func TestWorkGivesTheHandlerWorkOptsClient(t *testing.T) {
	t.Parallel()
	client := skiplocktest.NewClient(t, skiplock.Config{})
	for _, want := range []*skiplock.Client{client, nil} {
		err := skiplocktest.Work(context.Background(), t, skiplock.WorkFunc[Email](func(ctx context.Context, job *skiplock.Job, _ Email) error {
			if got, ok := skiplock.ClientFromContext(ctx); got != want || ok != (want != nil) {
				t.Errorf("ClientFromContext = %p, %v; want %p", got, ok, want)
			}
			return nil
		}), Email{To: "ana"}, &skiplocktest.WorkOpts{Client: want})
		if err != nil {
			t.Fatal(err)
		}
	}
}
