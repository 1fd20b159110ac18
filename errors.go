package skiplock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/validate"
)

// ErrLeaseLost is returned when a fenced write changed nothing: the job is no longer
// running under the caller's lease token (the lease expired and was reclaimed, an
// operator cancelled the job, or another worker holds it now). The caller must write
// nothing more for that job.
var ErrLeaseLost = errors.New("skiplock: lease lost")

// ErrNotFound is returned when a job id matches no job (or none in the state an
// operation needs).
var ErrNotFound = errors.New("skiplock: job not found")

// ErrInvalid is matched (errors.Is) by every *ValidationError.
var ErrInvalid = errors.New("skiplock: invalid input")

// ValidationError reports bad input. Nothing was written.
type ValidationError struct {
	Field  string // "payload", "kind", "queue", "priority", ...
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("skiplock: invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// ErrJobState is matched by errors from admin verbs (JobRetry, JobCancel, JobDelete)
// on a job that exists but is in a state the verb does not apply to; the message says
// which state it is in and which states the verb needs.
var ErrJobState = errors.New("skiplock: job is in the wrong state")

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// words lists the valid values of a string enum for an error message: "a, b, c".
func words[T ~string](values []T) string {
	var b strings.Builder
	for i, v := range values {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(v))
	}
	return b.String()
}

// ErrPermanent is matched (errors.Is) by every error Permanent returns, however it
// was wrapped since: errors.Is(err, skiplock.ErrPermanent) tells a handler's
// permanent failure without errors.As.
var ErrPermanent = errors.New("skiplock: permanent error")

// ErrSnooze is matched (errors.Is) by every error Snooze returns.
var ErrSnooze = errors.New("skiplock: snooze")

// ErrCancel is matched (errors.Is) by every error Cancel returns.
var ErrCancel = errors.New("skiplock: cancel")

// PermanentError marks a handler error that retrying cannot fix: the job fails at once.
// It matches ErrPermanent; errors.As gives the error it wraps.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent"
	}
	return "permanent: " + e.Err.Error()
}
func (e *PermanentError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPermanent) true.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// Permanent wraps err so the job is failed immediately instead of retried (for
// example an invalid payload). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// SnoozeError asks for the job to run again after Delay; it matches ErrSnooze. A
// snooze is not a failure: the job goes back to pending at now+Delay and the attempt
// the claim counted is given back, so a job may snooze any number of times without
// exhausting max_attempts.
type SnoozeError struct{ Delay time.Duration }

func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.Delay) }

// Is makes errors.Is(err, ErrSnooze) true.
func (e *SnoozeError) Is(target error) bool { return target == ErrSnooze }

// Snooze returns an error that reschedules the job after d without spending an attempt.
func Snooze(d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &SnoozeError{Delay: d}
}

// CancelError asks for the job to be cancelled: it ends in the 'cancelled' state and
// is not retried. It matches ErrCancel.
type CancelError struct{ Err error }

func (e *CancelError) Error() string {
	if e.Err == nil {
		return "cancelled"
	}
	return "cancelled: " + e.Err.Error()
}
func (e *CancelError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCancel) true.
func (e *CancelError) Is(target error) bool { return target == ErrCancel }

// Cancel returns an error that moves the job to 'cancelled' with err as its last_error.
func Cancel(err error) error { return &CancelError{Err: err} }

// checkDB refuses a nil context and a nil or typed-nil DB (including FromSQL of a
// nil handle) with a *ValidationError instead of a panic deep inside pgx.
func checkDB(ctx context.Context, db DB) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	if s, ok := db.(sqlDB); ok {
		return s.errNilSQL()
	}
	if validate.IsNil(db) {
		return invalid("db", "must not be nil: pass the pgx.Tx, *pgx.Conn or *pgxpool.Pool to write through (or FromSQL(tx))")
	}
	return nil
}

// notFoundError is a not-found error that names what is missing (a schedule, a
// batch, a queue) and matches ErrNotFound.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string        { return e.msg }
func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }
