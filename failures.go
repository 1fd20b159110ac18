package skiplock

import (
	"log/slog"
	"time"

	ifailures "github.com/skiplock/skiplock/internal/failures"
)

// OperationStatus reports one of a started client's repeating operations: "claim",
// "heartbeat", "completion", "listen", or "maintenance:<service>". An outbox relay
// reports its own with the same type (outbox.Relay.Operations).
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

// failures is the client's view of the one failure reporter (internal/failures): it
// logs a failure at once, then at most once per failures.LogEvery while it repeats,
// logs the recovery, and keeps per-operation counts for Counters, metrics and
// readiness checks. The runtime's files call warn, ok and notice.
type failures struct{ r *ifailures.Reporter }

func newFailures(log *slog.Logger) *failures { return &failures{r: ifailures.New(log)} }

// warn records a failure of op and logs it unless it was logged recently.
func (f *failures) warn(op string, err error, attrs ...any) { f.r.Warn(op, err, attrs...) }

// ok records a success of op, logging the recovery if it had been failing.
func (f *failures) ok(op string) { f.r.OK(op) }

// notice logs msg at Warn unless a notice with the same key was logged recently; the
// next line that is logged says how many were held back.
func (f *failures) notice(key, msg string, attrs ...any) { f.r.Notice(key, msg, attrs...) }

func (f *failures) snapshot() []OperationStatus {
	ops := f.r.Snapshot()
	out := make([]OperationStatus, len(ops))
	for i, op := range ops {
		out[i] = OperationStatus(op)
	}
	return out
}

// Operations reports the repeating operations that have failed at least once since
// the client was created, sorted by name. An operation with Failing set has not
// succeeded since its last failure: the health package turns that into a /readyz
// reason.
func (c *Client) Operations() []OperationStatus { return c.failures.snapshot() }
