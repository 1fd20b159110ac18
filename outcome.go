package skiplock

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/engine"
	"github.com/skiplock/skiplock/internal/safetext"
	"github.com/skiplock/skiplock/internal/store"
)

// This file turns a job into an outcome: the handler run through the middleware
// (runJob), a panic made an error (runHandler), and the handler's result classified
// (classify). The engine (internal/engine) calls runJob for each job it claims.

// runJob runs job's handler under ctx (the engine's, cancelled on a lost lease or a
// stop) and says what to write for it.
func (c *Client) runJob(ctx context.Context, job *Job) engine.Result {
	job.State = StateRunning // it may have been claimed to wait (StateClaimed): it runs now
	ctx = ContextWithJob(ctx, job)
	var err error
	reg, known := c.workers.lookup(job.Kind)
	if !known {
		err = Permanent(fmt.Errorf("no worker registered for kind %q", job.Kind))
	} else {
		h := reg.handler
		for i := len(c.cfg.Middleware) - 1; i >= 0; i-- {
			h = c.cfg.Middleware[i](h)
		}
		err = runHandler(ctx, h, job)
	}
	return engine.Result{Outcome: c.classify(job, err, ctx), Err: err, InTx: job.completedInTx}
}

// jobTimeout is the handler timeout of job: its worker's, else Config.JobTimeout.
func (c *Client) jobTimeout(job *Job) time.Duration {
	if reg, known := c.workers.lookup(job.Kind); known && reg.opts.Timeout > 0 {
		return reg.opts.Timeout
	}
	return c.cfg.JobTimeout
}

// runHandler calls h, turning a panic into an error that carries the stack.
func runHandler(ctx context.Context, h HandlerFunc, job *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, job)
}

// classify maps a handler's result to the outcome written for the job. Nothing a
// handler returns can make the outcome unwritable: error text goes through the text
// policy (safetext), delays are clamped to 0..MaxSchedule, and an error whose methods
// panic, or a retry policy that panics, still yields an outcome.
func (c *Client) classify(job *Job, err error, ctx context.Context) (o store.Outcome) {
	o = store.Outcome{Lease: job.lease()}
	defer func() {
		if p := recover(); p != nil {
			o = store.Outcome{Lease: job.lease(), Action: store.ActionRetry,
				Error: safetext.Clean(fmt.Sprintf("skiplock: classifying the handler's error panicked: %v", p)),
				Delay: clampDelay(DefaultRetryPolicy.Delay(job.Attempt))}
		}
	}()
	var (
		snooze *SnoozeError
		cancel *CancelError
		perm   *PermanentError
	)
	switch {
	case err == nil:
		o.Action, o.Output = store.ActionComplete, job.output
	case errors.Is(context.Cause(ctx), engine.ErrShutdown):
		// Cut off by shutdown: back to pending at once with the attempt given back, as
		// if it had never been claimed.
		o.Action = store.ActionSnooze
	case errors.As(err, &snooze):
		o.Action, o.Delay = store.ActionSnooze, clampDelay(snooze.Delay)
	case errors.As(err, &cancel):
		o.Action, o.Error = store.ActionCancel, safetext.Error(unmarked{err, cancel, cancel.Err})
	case errors.As(err, &perm):
		o.Action, o.Error = store.ActionFail, safetext.Error(unmarked{err, perm, perm.Err})
	default:
		o.Action, o.Error = store.ActionRetry, safetext.Error(err)
		if ctx.Err() == context.DeadlineExceeded {
			o.Error = "timed out: " + o.Error
		}
		o.Delay = c.retryDelay(job.Kind, job.Attempt)
	}
	return o
}

// unmarked is the text a Permanent or Cancel error records as the job's last_error:
// err's message with the marker's own words ("permanent: ", "cancelled: ") taken out,
// so fmt.Errorf("charging: %w", Permanent(e)) records "charging: " + e's message. The
// status already says failed or cancelled; every worker records the bare text its
// handler gave (docs/sql_workers.md, "Error texts"). A Cancel(nil) records none.
type unmarked struct {
	err, marker, inner error
}

func (u unmarked) Error() string {
	full, mark := u.err.Error(), u.marker.Error()
	var inner string
	if u.inner != nil {
		inner = u.inner.Error()
	}
	i := strings.LastIndex(full, mark)
	if i < 0 { // a wrapper that rewrote the text: keep it whole
		return full
	}
	head, tail := full[:i], full[i+len(mark):]
	if inner == "" {
		head = strings.TrimSuffix(head, ": ")
	}
	return head + inner + tail
}

// clampDelay bounds a delay from a handler or a retry policy to 0..MaxSchedule, so a
// negative or overflowing value can neither fail the statement nor park a job for
// centuries.
func clampDelay(d time.Duration) time.Duration {
	return min(max(d, 0), MaxSchedule)
}
