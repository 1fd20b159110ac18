// Package badinput holds what the outbox's bad-input tests share: a call that turns a
// panic into a test failure, and the check that each case is refused as invalid
// input. Its own tests cover the outbox's adapters. They live here rather than among
// package outbox's tests so that those import no broker's client: go mod tidy, in a
// module that imports outbox, records the modules that outbox's tests import too.
package badinput

import (
	"errors"
	"testing"

	"github.com/skiplock/skiplock"
)

// Call runs fn, turning a panic into a failure of t, and returns fn's errors (none
// after a panic).
func Call(t testing.TB, name string, fn func() []error) []error {
	t.Helper()
	var errs []error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s panicked: %v", name, p)
				errs = nil
			}
		}()
		errs = fn()
	}()
	return errs
}

// One is err as a case's results.
func One(err error) []error { return []error{err} }

// Ignore is a call's error, its value dropped, as a case's results.
func Ignore[T any](_ T, err error) []error { return []error{err} }

// RequireInvalid runs every case and fails t for each that panics or returns an error
// that does not match skiplock.ErrInvalid.
func RequireInvalid(t testing.TB, cases map[string]func() []error) {
	t.Helper()
	for name, fn := range cases {
		for i, err := range Call(t, name, fn) {
			if !errors.Is(err, skiplock.ErrInvalid) {
				t.Errorf("%s: result %d is %v, want an error matching skiplock.ErrInvalid", name, i, err)
			}
		}
	}
}
