package maint

// Test hooks for the external test package (which imports skiplocktest, whose package
// imports the root package, which imports this one).

const (
	ReclaimFloorMargin = reclaimFloorMargin
	ReclaimFullEvery   = reclaimFullEvery
	RetentionFullEvery = retentionFullEvery
)

// StartAt exposes startAt: where a pass at now would start its scan (nil: the head).
var StartAt = (*Reclaimer).startAt
