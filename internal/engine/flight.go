package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// A job in flight — from its claim until its outcome is durable or dropped — is a
// flight. Where it stands is one state, changed only by the transitions below, each
// one compare-and-swap: the executor, the heartbeater, a later claim of the same job
// and Stop may race on a job, and exactly one of them wins each step.
//
//	          start                 finish
//	queued ─────────► running ─────────────► returned ──► (outcome durable)
//	  │  │               │
//	  │  │ lose          │ lose
//	  │  ▼               ▼
//	  │ stranded        lost  ──► (handler cancelled; its outcome dropped at its return)
//	  │  │
//	  ▼  ▼ handBack
//	released ──► (a snooze with the attempt given back, durable)
//
// queued: claimed, waiting for an executor (or, a successor, for its predecessor's
// handler); running: its handler runs; returned: its handler returned and its
// outcome is on its way to the completer; released: it never started and goes back
// to pending (Stop, or a successor given back); stranded: its lease was lost before
// it started, so it never runs; lost: its lease was lost while it ran.
type state int32

const (
	queued state = iota
	running
	returned
	released
	stranded
	lost
)

var stateNames = [...]string{"queued", "running", "returned", "released", "stranded", "lost"}

func (s state) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "invalid"
}

// handoff is where a running job stands as a predecessor in a limit slot's handoff
// (handoff.go): whether a successor may be attached to it, and what became of one.
// It is guarded by Engine.mu.
type handoff uint8

const (
	slotOpen     handoff = iota // a successor may be attached
	slotTaken                   // a successor waits for this job's handler (flight.next)
	slotRefused                 // its successor was given back: it takes no other
	slotClosed                  // its executor moved on with no successor: its slots return to the limit
	slotHandedOn                // its executor moved on to its successor, which holds its slots now
)

type flight struct {
	row      *store.Job
	job      any // Hooks.Adopt's value
	p        *producer
	unblocks bool // its outcome can make a job ready behind a claim cursor (cursor.go)
	slotOf   store.Lease
	// startBy, for a job whose start a rate limit counted at its claim, is the latest
	// its handler may start (zero: no bound): store.RateStartSlack after the claim's
	// time (attempted_at: the injected clock's, else the database's, which the host's
	// must agree with; docs/limits.md).
	startBy time.Time

	st atomic.Int32 // a state

	// Set by the executor before start, read by others only once they saw the job
	// running (the state's atomic orders them).
	ctx      context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time // zero: none
	started  time.Time

	warned atomic.Bool // the heartbeater warned that its handler ignores its timeout

	// waits: the claim wrote the job claimed, not started (store.ClaimParams.Waiting,
	// or a successor); beganWritten: the heartbeater has since written its start.
	waits        bool
	beganWritten atomic.Bool
	// weight: a fair claim's job that waits for an executor, by key, in turns of this
	// many jobs (localQueue); 0 for the others.
	weight int

	// The limit slot's handoff, guarded by Engine.mu.
	slot     handoff
	next     *flight     // the successor attached to it (slotTaken)
	giveBack *time.Timer // hands this successor back if its predecessor runs too long

	// Set by the executor (or handBack) before the flight goes to the completer.
	outcome store.Outcome
	err     error
	inTx    bool
	runDur  time.Duration
	// ambiguous: a failed attempt to write the outcome may have committed (owned by
	// the completer).
	ambiguous bool
	wait      time.Duration
}

// newFlight is the flight of a job claimed as row.
func newFlight(row *store.Job, job any, p *producer) *flight {
	f := &flight{row: row, job: job, p: p, unblocks: row.Unblocks, waits: !row.Started}
	if row.Rated && row.AttemptedAt != nil {
		f.startBy = row.AttemptedAt.Add(store.RateStartSlack)
	}
	if row.SlotOf != nil && row.SlotToken != nil {
		f.slotOf = store.Lease{ID: *row.SlotOf, Token: *row.SlotToken}
	}
	return f
}

// lease is the job's lease under this claim.
func (f *flight) lease() store.Lease {
	l := store.Lease{ID: f.row.ID, Key: f.row.ConcurrencyKey}
	if f.row.LeaseToken != nil {
		l.Token = *f.row.LeaseToken
	}
	return l
}

func (f *flight) state() state { return state(f.st.Load()) }

func (f *flight) move(from, to state) bool { return f.st.CompareAndSwap(int32(from), int32(to)) }

// start: queued → running. False when the job may not run (its lease was lost
// while it waited).
func (f *flight) start() bool { return f.move(queued, running) }

// finishRun: running → returned, at the handler's return. False when the lease was
// lost while it ran: its outcome is dropped.
func (f *flight) finishRun() bool { return f.move(running, returned) }

// lose records that the job's lease is lost: queued → stranded, running → lost.
// wasRunning says its handler runs and must be cancelled. A job whose handler
// returned, or that was handed back, keeps its state: its outcome's fenced write
// decides.
func (f *flight) lose() (wasRunning bool) {
	for {
		switch s := f.state(); s {
		case queued:
			if f.move(queued, stranded) {
				return false
			}
		case running:
			if f.move(running, lost) {
				return true
			}
		default:
			return false
		}
	}
}

// handBack: queued or stranded → released, for a job that never started. False when
// it started already.
func (f *flight) handBack() bool {
	return f.move(queued, released) || f.move(stranded, released)
}

// beganUnwritten reports whether the job's handler runs while the database still
// says it waits (claimed, not started): the heartbeater writes its start.
func (f *flight) beganUnwritten() bool {
	return f.waits && !f.beganWritten.Load() && f.state() == running
}

// renewable reports whether the heartbeater renews the job's lease: not once its
// handler returned (the outcome's write ends the lease), nor once the lease is lost.
func (f *flight) renewable() bool {
	switch f.state() {
	case returned, stranded, lost:
		return false
	}
	return true
}
