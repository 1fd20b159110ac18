// Package maint holds skiplock's maintenance services — the reclaimer, retention and
// the partition manager today; the periodic scheduler and limit sweepers next — and
// the one runner they all share.
//
// A service is a name, an interval and RunOnce. The runner calls RunOnce inside a
// transaction that first takes a transaction-level advisory lock named after the
// service and the schema, and skips the run when another client holds it: however
// many clients run, each service runs in one of them at a time, and a client that
// dies mid-run releases the lock with its connection. Runs repeat at the service's
// interval, jittered ±10% so clients started together do not run in lockstep; a
// failed run is reported and the next one comes at the usual time.
//
// Adding a service is one file here (a type with Name, Interval and RunOnce) and one
// line where the root package lists its services (maintenance.go).
package maint

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// Service is one periodic maintenance task.
type Service interface {
	// Name names the service in logs, metrics and its advisory lock.
	Name() string
	// Interval is the pause between runs (jittered by the runner); zero or
	// negative disables the service.
	Interval() time.Duration
	// RunOnce does one run. tx holds the service's advisory lock for the run's
	// length; a service whose work is long should do it in short transactions of
	// its own on the pool (as retention does) and use tx only as the guard.
	RunOnce(ctx context.Context, tx pgx.Tx) (Result, error)
}

// Result is what one run did, as slog attributes for the run's log line.
type Result interface {
	LogAttrs() []any
}

// Runner runs services under their advisory locks.
type Runner struct {
	Store *store.Store
	Pool  *pgxpool.Pool
	Log   *slog.Logger
	// Failed and Succeeded, when set, hear about every run that failed or ran
	// (or was skipped because another client held the lock), by operation name
	// "maintenance:<service>".
	Failed    func(op string, err error)
	Succeeded func(op string)
}

// RunOnce runs svc once under its advisory lock; ran is false (and res nil) when
// another client held the lock.
func (r *Runner) RunOnce(ctx context.Context, svc Service) (ran bool, res Result, err error) {
	err = pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		if ran, err = r.Store.TryServiceLock(ctx, tx, svc.Name()); err != nil || !ran {
			return err
		}
		res, err = svc.RunOnce(ctx, tx)
		return err
	})
	return ran, res, err
}

// Backlogged is implemented by a Result whose run stopped at its cap with work left
// (retention behind a high completion rate): the runner then starts the next run
// at once instead of after the interval. Each run stays bounded, so no transaction
// lasts long; between runs the service's connections go back to the pool.
type Backlogged interface {
	Backlogged() bool
}

// Loop runs svc at its interval until ctx ends, and again at once after a run
// whose result is Backlogged.
func (r *Runner) Loop(ctx context.Context, svc Service) {
	op := "maintenance:" + svc.Name()
	wait := hostclock.Jitter(svc.Interval())
	for hostclock.Sleep(ctx, wait) {
		ran, res, err := r.RunOnce(ctx, svc)
		wait = hostclock.Jitter(svc.Interval())
		if b, ok := res.(Backlogged); ok && ran && err == nil && b.Backlogged() {
			wait = 0
			r.Log.Warn("skiplock: maintenance is behind: the run stopped at its cap with work left, the next starts at once "+
				"(retention: raise RetentionConfig.BatchSize or MaxBatches if this repeats)",
				append([]any{"service", svc.Name()}, res.LogAttrs()...)...)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			if r.Failed != nil {
				r.Failed(op, err)
			}
		case err == nil:
			if r.Succeeded != nil {
				r.Succeeded(op)
			}
			if ran && res != nil {
				r.Log.Debug("skiplock: maintenance run", append([]any{"service", svc.Name()}, res.LogAttrs()...)...)
			}
		}
	}
}
