// Package failures is the one reporter of the library's repeating operations (a
// client's claims, heartbeats, completions and maintenance runs; a relay's claims,
// publishes and marks): a failure is logged at once and then at most once per
// LogEvery while it repeats, the recovery is logged, and each operation's counts and
// state are kept for Client.Operations, Relay.Operations, metrics and /readyz.
//
// It also holds the library's default logger (DefaultLogger), so every component
// that logs — the client, the relay, the publishers — is quiet or loud the same way.
package failures

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/safetext"
)

// LogEvery is how often a failure that keeps repeating is logged again; the repeats
// in between are counted, and the next line says how many there were. A database
// outage then costs a few log lines a minute, not one per poll.
const LogEvery = 30 * time.Second

// RelapseWindow is how soon after a recovery a failure counts as the same outage
// relapsing, not a new one: it is not logged at once (the 30 s repeat still applies),
// the operation is failing again since the outage's first failure, and the next
// recovery line carries failing_for from that first failure and the relapses. A
// failover flaps so: a statement that happens to reach a dying server's last backends,
// or a node between demotion and promotion, succeeds once in a run of failures.
const RelapseWindow = 5 * time.Second

// Status reports one repeating operation. skiplock.OperationStatus has the same
// fields and converts to and from it.
type Status struct {
	// Operation names the operation.
	Operation string `json:"operation"`
	// Failures counts its failed attempts since the reporter was created.
	Failures int64 `json:"failures"`
	// Failing is true while its latest attempt failed.
	Failing bool `json:"failing"`
	// FailingSince is when the current run of failures began (zero when not failing).
	FailingSince time.Time `json:"failing_since,omitzero"`
	// LastError is the latest failure's message.
	LastError string `json:"last_error,omitempty"`
}

// Reporter tracks repeating operations and rate-limits their log lines. The zero
// value is not usable; create one with New. It is safe for concurrent use.
type Reporter struct {
	log     *slog.Logger
	mu      sync.Mutex
	ops     map[string]*state
	notices map[string]*state // rate-limited warnings that are not operation failures
}

type state struct {
	status     Status
	lastLogged time.Time
	suppressed int
	// The last recovery (when, and when its outage began), and the relapses of the
	// current outage (RelapseWindow).
	recoveredAt, outageSince time.Time
	relapses                 int
}

// New returns a Reporter that logs to log (DefaultLogger() when nil). Its lines
// read "skiplock: <op> failed" and "skiplock: <op> recovered".
func New(log *slog.Logger) *Reporter {
	return &Reporter{log: Logger(log), ops: map[string]*state{}, notices: map[string]*state{}}
}

// due reports whether st is due a log line at now, and how many were held back
// since the last one; it must be called with r.mu held.
func (st *state) due(now time.Time) (logIt bool, suppressed int) {
	logIt = st.lastLogged.IsZero() || now.Sub(st.lastLogged) >= LogEvery
	suppressed = st.suppressed
	if logIt {
		st.lastLogged, st.suppressed = now, 0
	} else {
		st.suppressed++
	}
	return logIt, suppressed
}

// Warn records a failure of op and logs it at Warn unless it was logged within
// LogEvery; attrs are added to the line.
func (r *Reporter) Warn(op string, err error, attrs ...any) {
	now := hostclock.Now()
	r.mu.Lock()
	st := r.ops[op]
	if st == nil {
		st = &state{status: Status{Operation: op}}
		r.ops[op] = st
	}
	st.status.Failures++
	st.status.LastError = safetext.Error(err)
	relapse := false
	if !st.status.Failing {
		if !st.recoveredAt.IsZero() && now.Sub(st.recoveredAt) < RelapseWindow {
			relapse = true
			st.relapses++
			st.status.Failing, st.status.FailingSince = true, st.outageSince
		} else {
			st.status.Failing, st.status.FailingSince = true, now
			st.lastLogged, st.suppressed, st.relapses = time.Time{}, 0, 0 // a new outage: logged at once
		}
	}
	var logIt bool
	var suppressed int
	if relapse {
		st.lastLogged, st.suppressed = now, st.suppressed+1 // the same outage: its repeat is due in LogEvery
	} else {
		logIt, suppressed = st.due(now)
	}
	r.mu.Unlock()
	if logIt {
		args := append([]any{"operation", op, "error", err}, attrs...)
		if suppressed > 0 {
			args = append(args, "repeated", suppressed)
		}
		r.log.Warn("skiplock: "+op+" failed", args...)
	}
}

// OK records a success of op, logging the recovery if it had been failing (with the
// relapses, when the outage relapsed: RelapseWindow).
func (r *Reporter) OK(op string) {
	now := hostclock.Now()
	r.mu.Lock()
	st := r.ops[op]
	if st == nil || !st.status.Failing {
		r.mu.Unlock()
		return
	}
	since, relapses := st.status.FailingSince, st.relapses
	st.status.Failing, st.status.FailingSince = false, time.Time{}
	st.recoveredAt, st.outageSince = now, since
	r.mu.Unlock()
	args := []any{"operation", op, "failing_for", now.Sub(since).Round(time.Millisecond)}
	if relapses > 0 {
		args = append(args, "relapses", relapses)
	}
	r.log.Warn("skiplock: "+op+" recovered", args...)
}

// Notice logs msg at Warn unless a notice with the same key was logged within
// LogEvery; the next line that is logged says how many were held back. For per-item
// warnings (a lost lease, a parked event) that a bad minute could otherwise repeat
// thousands of times. Notices are not operations: Snapshot does not list them.
func (r *Reporter) Notice(key, msg string, attrs ...any) {
	now := hostclock.Now()
	r.mu.Lock()
	st := r.notices[key]
	if st == nil {
		st = &state{}
		r.notices[key] = st
	}
	logIt, suppressed := st.due(now)
	r.mu.Unlock()
	if logIt {
		if suppressed > 0 {
			attrs = append(attrs, "similar_since_last_logged", suppressed)
		}
		r.log.Warn(msg, attrs...)
	}
}

// Snapshot returns the operations that have failed at least once, sorted by name.
func (r *Reporter) Snapshot() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.ops))
	for _, st := range r.ops {
		out = append(out, st.status)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Operation < out[j].Operation })
	return out
}

// Logger returns log, or DefaultLogger() when log is nil: what every component
// does with a nil Logger option.
func Logger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return DefaultLogger()
	}
	return log
}

// DefaultLogger is slog.Default() at level Warn and above, read when called: failures
// are never silent, while routine lines (started, stopped, connected, one failed
// message at Debug) stay quiet.
func DefaultLogger() *slog.Logger {
	return slog.New(minLevel{slog.Default().Handler(), slog.LevelWarn})
}

// minLevel passes on only records at or above its level.
type minLevel struct {
	slog.Handler
	level slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.level}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.level}
}
