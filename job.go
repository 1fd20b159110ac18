package skiplock

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// JobState is a job's place in the state machine (docs/state_machine.md).
type JobState string

// The job states.
const (
	StatePending   JobState = "pending"   // waiting for run_at, then claimable
	StateRunning   JobState = "running"   // claimed under a lease
	StateSucceeded JobState = "succeeded" // handler returned nil
	StateFailed    JobState = "failed"    // permanent error or attempts exhausted
	StateCancelled JobState = "cancelled" // Cancel(err) or an operator
)

// Job is a job row as a worker or an operator sees it.
type Job struct {
	ID       string          `json:"id"`
	Queue    string          `json:"queue"`
	Kind     string          `json:"kind"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	State    JobState        `json:"state"`
	Priority int             `json:"priority"`
	RunAt    time.Time       `json:"run_at"`
	// Attempt counts claims: 1 during the first run.
	Attempt     int `json:"attempt"`
	MaxAttempts int `json:"max_attempts"`
	// LeaseToken is the fencing token of the current claim; every write that finishes
	// the job must present it. Empty unless running.
	LeaseToken       string    `json:"lease_token,omitempty"`
	LeaseUntil       time.Time `json:"lease_until,omitzero"`
	WorkerID         string    `json:"worker_id,omitempty"`
	DeduplicationKey string    `json:"deduplication_key,omitempty"`
	LastError        string    `json:"last_error,omitempty"`
	// Metadata is what EnqueueOpts.Metadata (and Config.EnqueueHooks) attached.
	Metadata  map[string]string `json:"metadata,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`

	completedInTx bool // CompleteTx wrote this claim's completion in the handler's transaction
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
	if len(r.Metadata) > 0 {
		_ = json.Unmarshal(r.Metadata, &j.Metadata) // written by insertParams as a JSON object of strings
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

// JobStates lists every job state, in lifecycle order.
var JobStates = []JobState{StatePending, StateRunning, StateSucceeded, StateFailed, StateCancelled}

// ParseJobState returns the state named s, or an ErrInvalid error that lists the
// valid names.
func ParseJobState(s string) (JobState, error) {
	for _, st := range JobStates {
		if string(st) == s {
			return st, nil
		}
	}
	names := make([]string, len(JobStates))
	for i, st := range JobStates {
		names[i] = string(st)
	}
	return "", invalid("state", "unknown state %q (valid: %s)", s, strings.Join(names, ", "))
}
