package maint

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// HorizonWatch warns when one transaction holds the database's vacuum horizon for
// longer than After: while it does, every job claimed or finished leaves a dead tuple
// vacuum cannot remove, the jobs table and its indexes only grow, and enqueues and
// claims slow down (W10 in docs/benchmarks.md). The queue keeps working through it —
// claims resume from their cursor — but only the operator can end the cause, so the
// warning names it: the session's pid, application and state, or the prepared
// transaction or replication slot.
//
// How long a holding has lasted is the longer of what PostgreSQL reports (the
// transaction's start, visible to a role with pg_read_all_stats) and how long this
// watcher has seen the same holding (the same holder and transaction id) as the
// oldest, by Clock: so the warning comes without that privilege too, at most one
// interval late. It comes once per holding; when a warned-about holding ends, a
// second line says so and how long it lasted.
type HorizonWatch struct {
	Store *store.Store
	Log   *slog.Logger
	// Every is the interval between looks; After, how long a holding may last before
	// it is reported.
	Every, After time.Duration
	// Clock measures how long a holding has been seen; nil means the host's clock.
	Clock interface{ Now() time.Time }

	seen   holding   // the holding seen last
	since  time.Time // when it was first seen
	warned bool      // whether it was reported
}

// holding identifies one holder's hold on the horizon.
type holding struct {
	kind, name string
	pid        int
	xid        int64
}

// HorizonResult reports one look.
type HorizonResult struct {
	Holder  string
	PID     int
	XIDAge  int64
	HeldFor time.Duration // the longer of the reported and the observed duration
}

// LogAttrs implements Result.
func (r HorizonResult) LogAttrs() []any {
	return []any{"holder", r.Holder, "pid", r.PID, "xid_age", r.XIDAge, "held_for", r.HeldFor}
}

// Name implements Service.
func (w *HorizonWatch) Name() string { return "horizon-watch" }

// Interval implements Service.
func (w *HorizonWatch) Interval() time.Duration { return w.Every }

func (w *HorizonWatch) now() time.Time {
	if w.Clock != nil {
		return w.Clock.Now()
	}
	return hostclock.Now()
}

// RunOnce implements Service.
func (w *HorizonWatch) RunOnce(ctx context.Context, tx pgx.Tx) (Result, error) {
	h, err := w.Store.Horizon(ctx, tx)
	if err != nil {
		return HorizonResult{}, fmt.Errorf("reading the vacuum horizon: %w", err)
	}
	now := w.now()
	cur := holding{kind: h.Kind, name: h.Name, pid: h.PID, xid: h.XID}
	if cur != w.seen {
		if w.warned {
			// At the warning's level, as the runtime logs a failing operation's
			// recovery: whoever saw the warning sees its end (the default logger
			// shows warnings only).
			w.Log.Warn("skiplock: the vacuum horizon moved on: the transaction that held it back ended or let go of its snapshot",
				"holder", w.seen.kind, "pid", w.seen.pid, "name", w.seen.name, "seen_for", now.Sub(w.since).Round(time.Second))
		}
		w.seen, w.since, w.warned = cur, now, false
	}
	held := now.Sub(w.since)
	if h.Known && h.HeldFor > held {
		held = h.HeldFor
	}
	if h.Kind != "" && !w.warned && held >= w.After {
		w.warned = true
		attrs := []any{"holder", h.Kind, "pid", h.PID, "name", h.Name, "state", h.State,
			"held_for", held.Round(time.Second), "xid_age", h.XIDAge, "dead_job_tuples", h.DeadJobTuples}
		w.Log.Warn("skiplock: a transaction holds back vacuum; dead jobs accumulate and enqueues and claims slow "+
			"down until it ends (end it, or set idle_in_transaction_session_timeout; docs/operations.md)", attrs...)
	}
	return HorizonResult{Holder: h.Kind, PID: h.PID, XIDAge: h.XIDAge, HeldFor: held}, nil
}
