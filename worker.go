package skiplock

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/validate"
)

// WorkerOpts are per-kind defaults.
type WorkerOpts struct {
	// Timeout bounds one run through the handler's context. Default Config.JobTimeout.
	Timeout time.Duration
	// MaxAttempts for jobs of this kind enqueued without one. Default 8.
	MaxAttempts int
	// RetryPolicy for this kind. Default Config.RetryPolicy.
	RetryPolicy RetryPolicy
}

// DefaultMaxAttempts applies to kinds that set none.
const DefaultMaxAttempts = 8

// HandlerFunc runs one job with a raw payload.
type HandlerFunc func(ctx context.Context, job *Job) error

// Worker runs jobs whose payload decodes into T; T's Kind names the jobs it takes.
type Worker[T JobArgs] interface {
	Work(ctx context.Context, job *Job, args T) error
}

// WorkFunc adapts a function to Worker[T].
type WorkFunc[T JobArgs] func(ctx context.Context, job *Job, args T) error

// Work implements Worker.
func (f WorkFunc[T]) Work(ctx context.Context, job *Job, args T) error { return f(ctx, job, args) }

type registration struct {
	handler HandlerFunc
	opts    WorkerOpts
}

// Workers maps kinds to handlers. Register every kind before starting a client.
type Workers struct {
	mu    sync.RWMutex
	kinds map[string]registration
}

// NewWorkers returns an empty registry.
func NewWorkers() *Workers { return &Workers{kinds: map[string]registration{}} }

// AddWorker registers w for the kind named by T. A payload that does not decode into
// T fails the job permanently (retrying cannot fix it).
func AddWorker[T JobArgs](ws *Workers, w Worker[T], opts *WorkerOpts) error {
	if validate.IsNil(w) {
		return invalid("worker", "must not be nil")
	}
	kind, err := kindOf[T]()
	if err != nil {
		return err
	}
	return ws.add(kind, func(ctx context.Context, job *Job) error {
		var args T
		if err := json.Unmarshal(job.Payload, &args); err != nil {
			return Permanent(fmt.Errorf("decoding %s payload into %T: %w", kind, args, err))
		}
		return w.Work(ctx, job, args)
	}, opts)
}

// kindOf returns the kind T's zero value names. Kind must not depend on the value: a
// Kind method that panics on a zero (or nil pointer) T is reported, not propagated.
func kindOf[T JobArgs]() (kind string, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero T
			err = invalid("kind", "%T.Kind() panicked on the zero value (%v); Kind must return a constant", zero, p)
		}
	}()
	var zero T
	return zero.Kind(), nil
}

// AddHandler registers an untyped handler for kind.
func (ws *Workers) AddHandler(kind string, h HandlerFunc, opts *WorkerOpts) error {
	if h == nil {
		return invalid("handler", "must not be nil")
	}
	return ws.add(kind, h, opts)
}

func (ws *Workers) add(kind string, h HandlerFunc, opts *WorkerOpts) error {
	if ws == nil {
		return invalid("workers", "must not be nil: create them with NewWorkers")
	}
	if err := validateKind(kind); err != nil {
		return err
	}
	o := WorkerOpts{}
	if opts != nil {
		o = *opts
	}
	if o.MaxAttempts < 0 || o.MaxAttempts > MaxMaxAttempts || o.Timeout < 0 {
		return invalid("worker_opts", "kind %q: MaxAttempts must be 0..%d and Timeout not negative", kind, MaxMaxAttempts)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if _, dup := ws.kinds[kind]; dup {
		return invalid("kind", "%q is already registered", kind)
	}
	ws.kinds[kind] = registration{handler: h, opts: o}
	return nil
}

func (ws *Workers) lookup(kind string) (registration, bool) {
	ws.mu.RLock()
	defer ws.mu.RUnlock()
	r, ok := ws.kinds[kind]
	return r, ok
}

func (ws *Workers) maxAttempts(kind string) int {
	if r, ok := ws.lookup(kind); ok && r.opts.MaxAttempts > 0 {
		return r.opts.MaxAttempts
	}
	return DefaultMaxAttempts
}

func (c *Client) retryPolicy(kind string) RetryPolicy {
	if r, ok := c.workers.lookup(kind); ok && r.opts.RetryPolicy != nil {
		return r.opts.RetryPolicy
	}
	return c.cfg.RetryPolicy
}
