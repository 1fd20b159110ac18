package main

import "time"

// The harness's one reading of the host clock, as internal/hostclock is the library's
// (this is a module of its own, so it cannot import that package). The harness is a
// stopwatch around a third-party system: wall time is what it measures, and nothing
// here decides a job's state.

// now is the host's current time, with its monotonic reading.
func now() time.Time { return time.Now() }

// since is the time elapsed since t on the host's monotonic clock.
func since(t time.Time) time.Duration { return time.Since(t) }
