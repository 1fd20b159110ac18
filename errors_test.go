package skiplock_test

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// A handler's control errors are told apart with errors.Is, however they were
// wrapped, and each matches its own sentinel only; errors.As still reaches the cause.
func TestControlErrorsMatchTheirSentinelsThroughWrapping(t *testing.T) {
	t.Parallel()
	sentinels := []error{skiplock.ErrPermanent, skiplock.ErrSnooze, skiplock.ErrCancel}
	for _, tc := range []struct {
		err  error
		want error
	}{
		{skiplock.Permanent(io.ErrUnexpectedEOF), skiplock.ErrPermanent},
		{skiplock.Snooze(time.Minute), skiplock.ErrSnooze},
		{skiplock.Cancel(io.ErrUnexpectedEOF), skiplock.ErrCancel},
		{skiplock.Cancel(nil), skiplock.ErrCancel},
		{&skiplock.PermanentError{}, skiplock.ErrPermanent},
	} {
		wrapped := fmt.Errorf("charging card: %w", tc.err)
		for _, s := range sentinels {
			if got := errors.Is(wrapped, s); got != (s == tc.want) {
				t.Errorf("errors.Is(%q, %v) = %v", wrapped, s, got)
			}
		}
		if tc.err.Error() == "" {
			t.Errorf("%T has an empty message", tc.err)
		}
	}
	if !errors.Is(skiplock.Permanent(io.ErrUnexpectedEOF), io.ErrUnexpectedEOF) {
		t.Error("Permanent hides its cause from errors.Is")
	}
	if errors.Is(io.ErrUnexpectedEOF, skiplock.ErrPermanent) || errors.Is(nil, skiplock.ErrPermanent) {
		t.Error("a plain error matches ErrPermanent")
	}
}
