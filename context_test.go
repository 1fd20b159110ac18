package skiplock_test

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

type whoRunsMe struct{}

func (whoRunsMe) Kind() string { return "who_runs_me" }

// A handler finds the client running it in its context — the one of two clients on
// the schema that claimed the job — and reaches the client's API through it.
func TestHandlerFindsItsClientInItsContext(t *testing.T) {
	t.Parallel()
	type seen struct {
		client *skiplock.Client
		ok     bool
		job    *skiplock.Job
	}
	got := make(chan seen, 1)
	workers := skiplock.NewWorkers()
	e := newEnv(t, skiplock.Config{})
	if err := skiplock.AddWorker(workers, skiplock.WorkFunc[whoRunsMe](func(ctx context.Context, job *skiplock.Job, _ whoRunsMe) error {
		c, ok := skiplock.ClientFromContext(ctx)
		var read *skiplock.Job
		if ok {
			read, _ = c.JobGet(ctx, job.ID) // the client is usable, not just present
		}
		got <- seen{c, ok, read}
		return nil
	}), nil); err != nil {
		t.Fatal(err)
	}
	runner := e.newClient(skiplock.Config{Workers: workers, PollInterval: 20 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}})
	res, err := e.client.Enqueue(e.ctx, whoRunsMe{}, nil)
	e.must(err)
	startClient(t, runner)
	select {
	case s := <-got:
		if !s.ok || s.client != runner {
			t.Errorf("ClientFromContext = %p, %v; want the running client %p (the enqueuing one is %p)", s.client, s.ok, runner, e.client)
		}
		if s.job == nil || s.job.ID != res.ID || s.job.State != skiplock.StateRunning {
			t.Errorf("JobGet through the context's client = %+v, want job %s running", s.job, res.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not run")
	}
}

// A loop built on Manual gets the same: a claimed job brings its client into the
// context ContextWithJob makes. A job read by JobGet does not (no client claimed it),
// and ContextWithClient supplies one.
func TestClientFromContextOutsideAClientsLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	res, err := e.client.Enqueue(e.ctx, whoRunsMe{}, nil)
	e.must(err)
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 1)
	e.must(err)
	if len(jobs) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(jobs))
	}
	if c, ok := skiplock.ClientFromContext(skiplock.ContextWithJob(e.ctx, jobs[0])); !ok || c != e.client {
		t.Errorf("ClientFromContext of a claimed job's context = %p, %v; want %p", c, ok, e.client)
	}
	other := e.newClient(skiplock.Config{})
	if c, _ := skiplock.ClientFromContext(skiplock.ContextWithClient(skiplock.ContextWithJob(e.ctx, jobs[0]), other)); c != other {
		t.Errorf("ContextWithClient does not take precedence over the job's client: got %p, want %p", c, other)
	}
	read, err := e.client.JobGet(e.ctx, res.ID)
	e.must(err)
	ctx := skiplock.ContextWithJob(e.ctx, read)
	if c, ok := skiplock.ClientFromContext(ctx); ok || c != nil {
		t.Errorf("ClientFromContext of a job nobody claimed = %p, %v; want nil, false", c, ok)
	}
	if c, ok := skiplock.ClientFromContext(skiplock.ContextWithClient(ctx, e.client)); !ok || c != e.client {
		t.Errorf("ClientFromContext after ContextWithClient = %p, %v; want %p", c, ok, e.client)
	}
	var nilCtx context.Context
	for name, ctx := range map[string]context.Context{"nil": nilCtx, "background": context.Background(),
		"a nil client": skiplock.ContextWithClient(nilCtx, nil)} {
		if c, ok := skiplock.ClientFromContext(ctx); ok || c != nil {
			t.Errorf("ClientFromContext(%s) = %p, %v; want nil, false", name, c, ok)
		}
	}
}
