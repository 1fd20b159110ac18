package skiplock

import (
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/safetext"
)

// failureLogEvery is how often a failure that keeps repeating is logged again; the
// repeats in between are counted, and the next line says how many there were. A
// database outage then costs a few log lines a minute, not one per poll.
const failureLogEvery = 30 * time.Second

// OperationStatus reports one of a started client's repeating operations: "claim",
// "heartbeat", "completion", "listen", or "maintenance:<service>".
type OperationStatus struct {
	// Operation names the operation.
	Operation string `json:"operation"`
	// Failures counts its failed attempts since the client was created.
	Failures int64 `json:"failures"`
	// Failing is true while its latest attempt failed.
	Failing bool `json:"failing"`
	// FailingSince is when the current run of failures began (zero when not failing).
	FailingSince time.Time `json:"failing_since,omitzero"`
	// LastError is the latest failure's message.
	LastError string `json:"last_error,omitempty"`
}

// failures tracks the runtime's repeating operations: it logs a failure at once,
// then at most once per failureLogEvery while it repeats, logs the recovery, and
// keeps per-operation counts for Counters, metrics and readiness checks.
type failures struct {
	log     *slog.Logger
	mu      sync.Mutex
	ops     map[string]*opState
	notices map[string]*opState // rate-limited warnings that are not operation failures
}

type opState struct {
	status     OperationStatus
	lastLogged time.Time
	suppressed int
}

func newFailures(log *slog.Logger) *failures {
	return &failures{log: log, ops: map[string]*opState{}, notices: map[string]*opState{}}
}

// warn records a failure of op and logs it unless it was logged recently.
func (f *failures) warn(op string, err error, attrs ...any) {
	now := hostclock.Now()
	f.mu.Lock()
	st := f.ops[op]
	if st == nil {
		st = &opState{status: OperationStatus{Operation: op}}
		f.ops[op] = st
	}
	st.status.Failures++
	st.status.LastError = safetext.Error(err)
	if !st.status.Failing {
		st.status.Failing, st.status.FailingSince = true, now
	}
	logIt := st.lastLogged.IsZero() || now.Sub(st.lastLogged) >= failureLogEvery
	suppressed := st.suppressed
	if logIt {
		st.lastLogged, st.suppressed = now, 0
	} else {
		st.suppressed++
	}
	f.mu.Unlock()
	if logIt {
		args := append([]any{"operation", op, "error", err}, attrs...)
		if suppressed > 0 {
			args = append(args, "repeated", suppressed)
		}
		f.log.Warn("skiplock: "+op+" failed", args...)
	}
}

// ok records a success of op, logging the recovery if it had been failing.
func (f *failures) ok(op string) {
	f.mu.Lock()
	st := f.ops[op]
	if st == nil || !st.status.Failing {
		f.mu.Unlock()
		return
	}
	since := st.status.FailingSince
	st.status.Failing, st.status.FailingSince = false, time.Time{}
	st.lastLogged, st.suppressed = time.Time{}, 0
	f.mu.Unlock()
	f.log.Warn("skiplock: "+op+" recovered", "operation", op, "failing_for", hostclock.Since(since).Round(time.Millisecond))
}

// notice logs msg at Warn unless a notice with the same key was logged within
// failureLogEvery; the next line that is logged says how many were held back. For
// per-job warnings (a lost lease) that a bad minute could otherwise repeat thousands
// of times.
func (f *failures) notice(key, msg string, attrs ...any) {
	now := hostclock.Now()
	f.mu.Lock()
	st := f.notices[key]
	if st == nil {
		st = &opState{}
		f.notices[key] = st
	}
	logIt := st.lastLogged.IsZero() || now.Sub(st.lastLogged) >= failureLogEvery
	suppressed := st.suppressed
	if logIt {
		st.lastLogged, st.suppressed = now, 0
	} else {
		st.suppressed++
	}
	f.mu.Unlock()
	if logIt {
		if suppressed > 0 {
			attrs = append(attrs, "similar_since_last_logged", suppressed)
		}
		f.log.Warn(msg, attrs...)
	}
}

func (f *failures) snapshot() []OperationStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]OperationStatus, 0, len(f.ops))
	for _, st := range f.ops {
		out = append(out, st.status)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Operation < out[j].Operation })
	return out
}

// Operations reports the repeating operations that have failed at least once since
// the client was created, sorted by name. An operation with Failing set has not
// succeeded since its last failure: the health package turns that into a /readyz
// reason.
func (c *Client) Operations() []OperationStatus { return c.failures.snapshot() }
