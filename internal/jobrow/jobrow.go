// Package jobrow hands the root package's one mapping of a jobs row (a *store.Job
// to a *skiplock.Job) to the module's other packages, which cannot call the root's
// unexported fromRow and must not keep a copy of it: skiplocktest's copy drifted and
// lost six columns. The root package sets ToJobs when it is initialised, so any
// package that imports the root finds it set.
package jobrow

import "github.com/skiplock/skiplock/internal/store"

// ToJobs maps rows to the root's []*skiplock.Job, returned as any because this
// package cannot import the root.
var ToJobs func(rows []*store.Job) any
