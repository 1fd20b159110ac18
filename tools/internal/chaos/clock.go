package chaos

import "time"

// wallNow is this package's one reading of the host's wall clock. It is used only
// where the host's time is what is meant — pacing, deadlines, and timestamps that a
// protocol defines as the sender's time — never for job or event state, which takes
// its time from the injected skiplock.Clock or the database.
func wallNow() time.Time { return time.Now() }
