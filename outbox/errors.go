package outbox

import "github.com/skiplock/skiplock"

// The outbox's sentinels each match their twin in the root package with errors.Is,
// so one check serves jobs and events alike: errors.Is(err, skiplock.ErrNotFound) is
// true for an event that is not found too. Bad input is a *skiplock.ValidationError
// (errors.Is(err, skiplock.ErrInvalid)) in both.

// ErrNotFound is returned when an event id matches no event (or none in the state an
// operation needs, such as Requeue of an event that is not dead). It also matches
// skiplock.ErrNotFound.
var ErrNotFound error = &twin{msg: "outbox: event not found", root: skiplock.ErrNotFound}

// ErrRelayStarted is returned by Relay.Start on a relay that is already running. It
// also matches skiplock.ErrClientStarted.
var ErrRelayStarted error = &twin{msg: "outbox: relay already started", root: skiplock.ErrClientStarted}

// twin is an outbox sentinel with its own message that also matches the root
// package's sentinel for the same condition.
type twin struct {
	msg  string
	root error
}

func (e *twin) Error() string { return e.msg }

// Is makes errors.Is(err, root) true as well as errors.Is(err, e).
func (e *twin) Is(target error) bool { return target == e.root }
