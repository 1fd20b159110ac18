package skiplocktest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/hostclock"
)

// WorkOpts shape the Job that Work builds and the context the handler runs in.
type WorkOpts struct {
	// ID of the job. Default: a fresh random UUID.
	ID string
	// Queue of the job. Default skiplock.DefaultQueue.
	Queue string
	// Priority of the job. Default 0.
	Priority int
	// Attempt is the run being simulated: 1 for the first, MaxAttempts for the last.
	// Default 1.
	Attempt int
	// MaxAttempts of the job. Default skiplock.DefaultMaxAttempts.
	MaxAttempts int
	// DeduplicationKey of the job. Default none.
	DeduplicationKey string
	// Clock gives the job's RunAt, CreatedAt, UpdatedAt and lease. Default: the host
	// clock.
	Clock skiplock.Clock
	// Timeout bounds the handler's context, as WorkerOpts.Timeout does. Default none.
	Timeout time.Duration
	// Middleware wraps the handler, first = outermost, as Config.Middleware does.
	Middleware []skiplock.Middleware
	// Client is what skiplock.ClientFromContext returns in the handler, as a client
	// gives its handlers itself (a parent reading Children, say). Default none:
	// ClientFromContext reports false.
	Client *skiplock.Client
}

// Work runs worker once on args, synchronously, and returns what it returned. The
// handler gets what a client would give it on the job's first run: a running Job
// (fresh id, attempt 1, T's kind, the JSON of args as payload, under a lease) and
// args decoded from that JSON — so a field that does not survive the round trip (no
// json tag on an unexported field, a custom marshaller's bug) shows up here, not in
// production — and a context carrying the job, for skiplock.JobFromContext and
// skiplock.IdempotencyKey (and WorkOpts.Client, for skiplock.ClientFromContext). A panic is returned as an error, as a client records it.
//
// The job is not in the database: nothing is written, and a handler that finishes
// its own job (Client.CompleteTx) gets ErrLeaseLost. Use Drain to run jobs end to
// end. Work fails the test (t.Fatalf) only when args cannot be a job at all: they do
// not encode to a payload enqueue would accept, or T names no valid kind.
func Work[T skiplock.JobArgs](ctx context.Context, t testing.TB, worker skiplock.Worker[T], args T, opts *WorkOpts) error {
	t.Helper()
	if opts == nil {
		opts = &WorkOpts{}
	}
	checkWorker(t, "Work", worker)
	payload, err := json.Marshal(args)
	if err != nil {
		t.Fatalf("skiplocktest: Work: args %T do not encode to JSON: %v", args, err)
	}
	if err := skiplock.ValidatePayload(payload, skiplock.DefaultMaxPayload); err != nil {
		t.Fatalf("skiplocktest: Work: enqueue would refuse args %T: %v", args, err)
	}
	now := hostclock.Now()
	if opts.Clock != nil {
		now = opts.Clock.Now()
	}
	now = now.UTC().Truncate(time.Microsecond)
	job := &skiplock.Job{
		ID:               opts.ID,
		Queue:            opts.Queue,
		Kind:             kindOf[T](t, "Work"),
		Payload:          payload,
		State:            skiplock.StateRunning,
		Priority:         opts.Priority,
		RunAt:            now,
		Attempt:          max(opts.Attempt, 1),
		MaxAttempts:      opts.MaxAttempts,
		LeaseToken:       newUUID(),
		LeaseUntil:       now.Add(30 * time.Second),
		WorkerID:         "skiplocktest",
		DeduplicationKey: opts.DeduplicationKey,
		CreatedAt:        now,
		UpdatedAt:        now,
	}
	if job.ID == "" {
		job.ID = newUUID()
	}
	if job.Queue == "" {
		job.Queue = skiplock.DefaultQueue
	}
	if job.MaxAttempts == 0 {
		job.MaxAttempts = skiplock.DefaultMaxAttempts
	}
	return run(ctx, worker, job, opts)
}

// WorkJob runs worker once on a job read from the database (RequireEnqueued's
// EnqueuedJob.Job, Client.JobGet) and returns what it returned. The handler gets a
// copy of the job as a client's claim would present it — a job that is not running
// is shown running, with its attempt counted — the args decoded from its payload
// (a payload that does not decode is returned as a permanent error, as a client
// fails such a job), and a context carrying the job. Nothing is written: the job
// stays as it is in the database. WorkJob fails the test when job is nil or of
// another kind than T's.
func WorkJob[T skiplock.JobArgs](ctx context.Context, t testing.TB, worker skiplock.Worker[T], job *skiplock.Job, opts *WorkOpts) error {
	t.Helper()
	if opts == nil {
		opts = &WorkOpts{}
	}
	checkWorker(t, "WorkJob", worker)
	if job == nil {
		t.Fatalf("skiplocktest: WorkJob: job is nil")
	}
	if kind := kindOf[T](t, "WorkJob"); job.Kind != kind {
		t.Fatalf("skiplocktest: WorkJob: job %s is of kind %q; the worker takes %q", job.ID, job.Kind, kind)
	}
	cp := *job
	if cp.State != skiplock.StateRunning {
		cp.State = skiplock.StateRunning
		cp.Attempt++
	}
	return run(ctx, worker, &cp, opts)
}

// checkWorker fails the test on a worker AddWorker would refuse.
func checkWorker[T skiplock.JobArgs](t testing.TB, fn string, worker skiplock.Worker[T]) {
	t.Helper()
	if err := skiplock.AddWorker(skiplock.NewWorkers(), worker, nil); err != nil {
		t.Fatalf("skiplocktest: %s: %v", fn, err)
	}
}

// run runs the handler the way a client's executor does: payload decoded into T,
// middleware around it, the job in the context, the timeout on it, a panic turned
// into an error.
func run[T skiplock.JobArgs](ctx context.Context, worker skiplock.Worker[T], job *skiplock.Job, opts *WorkOpts) (err error) {
	h := func(ctx context.Context, job *skiplock.Job) error {
		var args T
		if err := json.Unmarshal(job.Payload, &args); err != nil {
			return skiplock.Permanent(fmt.Errorf("decoding %s payload into %T: %w", job.Kind, args, err))
		}
		return worker.Work(ctx, job, args)
	}
	for i := len(opts.Middleware) - 1; i >= 0; i-- {
		h = opts.Middleware[i](h)
	}
	ctx = skiplock.ContextWithJob(ctx, job)
	if opts.Client != nil {
		ctx = skiplock.ContextWithClient(ctx, opts.Client)
	}
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, job)
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
