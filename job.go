package skiplock

import (
	"encoding/json"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// JobState is a job's place in the state machine (docs/state_machine.md).
type JobState string

// The job states.
const (
	StatePending   JobState = store.StatusPending   // waiting for run_at, then claimable
	StateRunning   JobState = store.StatusRunning   // claimed under a lease
	StateSucceeded JobState = store.StatusSucceeded // handler returned nil
	StateFailed    JobState = store.StatusFailed    // permanent error or attempts exhausted
	StateCancelled JobState = store.StatusCancelled // Cancel(err) or an operator
)

// Job is a job row as a worker or an operator sees it.
type Job struct {
	ID       string
	Queue    string
	Kind     string
	Payload  json.RawMessage
	State    JobState
	Priority int
	RunAt    time.Time
	// Attempt counts claims: 1 during the first run.
	Attempt     int
	MaxAttempts int
	// LeaseToken is the fencing token of the current claim; every write that finishes
	// the job must present it. Empty unless running.
	LeaseToken       string
	LeaseUntil       time.Time
	WorkerID         string
	DeduplicationKey string
	LastError        string
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// IdempotencyKey is stable across every attempt of this job: pass it to external APIs
// (an Idempotency-Key header, a conditional write) so a retried handler does not
// repeat an effect a previous attempt already had.
func (j *Job) IdempotencyKey() string { return "skiplock-job-" + j.ID }

func fromRow(r *store.Job) *Job {
	j := &Job{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Payload: r.Payload, State: JobState(r.Status),
		Priority: r.Priority, RunAt: r.RunAt, Attempt: r.Attempts, MaxAttempts: r.MaxAttempts,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	if r.LeaseToken != nil {
		j.LeaseToken = *r.LeaseToken
	}
	if r.LeaseUntil != nil {
		j.LeaseUntil = *r.LeaseUntil
	}
	if r.WorkerID != nil {
		j.WorkerID = *r.WorkerID
	}
	if r.DeduplicationKey != nil {
		j.DeduplicationKey = *r.DeduplicationKey
	}
	if r.LastError != nil {
		j.LastError = *r.LastError
	}
	return j
}

func fromRows(rs []*store.Job) []*Job {
	out := make([]*Job, len(rs))
	for i, r := range rs {
		out[i] = fromRow(r)
	}
	return out
}

func (j *Job) lease() store.Lease { return store.Lease{ID: j.ID, Token: j.LeaseToken} }
