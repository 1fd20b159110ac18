package skiplock

import (
	"encoding/json"
	"time"

	"github.com/skiplock/skiplock/internal/jobrow"
	"github.com/skiplock/skiplock/internal/store"
)

// JobState is a job's place in the state machine (docs/state_machine.md).
type JobState string

// The job states.
const (
	StatePending JobState = "pending" // waiting for run_at, then claimable
	StateRunning JobState = "running" // leased, its handler runs
	// StateClaimed: leased by a worker whose handler has not started it yet (in the
	// worker's prefetch, or a limit slot's successor waiting for its predecessor).
	// It is running as far as the lease, limits and uniqueness go; a view of what runs
	// leaves it out. Stored as running (docs/state_machine.md).
	StateClaimed   JobState = "claimed"
	StateSucceeded JobState = "succeeded" // handler returned nil
	StateFailed    JobState = "failed"    // permanent error or attempts exhausted
	StateCancelled JobState = "cancelled" // Cancel(err) or an operator
	// StateWaiting: a flow's parent until its children have finished, or a batch's
	// callback until the batch fires it; then pending (docs/flows.md).
	StateWaiting JobState = "waiting"
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
	LeaseToken string    `json:"lease_token,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// WorkerID is the client holding the lease while the job runs, and the one that
	// ran it once it succeeded.
	WorkerID         string `json:"worker_id,omitempty"`
	DeduplicationKey string `json:"deduplication_key,omitempty"`
	LastError        string `json:"last_error,omitempty"`
	// Metadata is what EnqueueOpts.Metadata (and Config.EnqueueHooks) attached.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Tags are EnqueueOpts.Tags.
	Tags []string `json:"tags,omitempty"`
	// ConcurrencyKey is EnqueueOpts.ConcurrencyKey.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// Output is what the handler recorded with SetOutput, stored with its success.
	Output json.RawMessage `json:"output,omitempty"`
	// History lists the job's finished attempts, oldest first (the newest MaxHistory).
	History []AttemptRecord `json:"history,omitempty"`
	// TxID is the id of the transaction that enqueued the job (0 for jobs enqueued
	// before skiplock recorded it): JobsByTx lists everything that transaction wrote,
	// but for a job Enqueue, EnqueueRaw or EnqueueMany wrote alone (its transaction is just it).
	TxID      int64     `json:"txid,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`

	completedInTx bool      // CompleteTx wrote this claim's completion in the handler's transaction
	output        []byte    // SetOutput's JSON, written with the success
	claimedAt     time.Time // the claim's attempted_at: tells this claim from a later one of the same attempt
	client        *Client   // the client that claimed the job, for ClientFromContext (nil for jobs read otherwise)
	keyUnknown    bool      // a Manual.Handle: its ConcurrencyKey is looked up on the Citus layout before a write
}

// IdempotencyKey is stable across every attempt of this job: pass it to external APIs
// (an Idempotency-Key header, a conditional write) so a retried handler does not
// repeat an effect a previous attempt already had.
func (j *Job) IdempotencyKey() string { return "skiplock-job-" + j.ID }

// stateOf is a row's state as people read it: StateClaimed for a running job whose
// handler has not started.
func stateOf(r *store.Job) JobState {
	if r.Status == store.StatusRunning && !r.Started {
		return StateClaimed
	}
	return JobState(r.Status)
}

func fromRow(r *store.Job) *Job {
	j := &Job{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Payload: r.Payload, State: stateOf(r),
		Priority: r.Priority, RunAt: r.RunAt, Attempt: r.Attempts, MaxAttempts: r.MaxAttempts,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	if r.LeaseToken != nil {
		j.LeaseToken = *r.LeaseToken
	}
	j.Tags, j.Output, j.History = r.Tags, r.Output, history(r.History)
	j.ConcurrencyKey = r.ConcurrencyKey
	if r.AttemptedAt != nil {
		j.claimedAt = *r.AttemptedAt
	}
	if r.Status == store.StatusSucceeded && r.AttemptedAt != nil {
		// A success is not appended to the stored history (that would cost every
		// completion a JSON rewrite): its record is the row itself.
		last := AttemptRecord{Attempt: r.Attempts, StartedAt: *r.AttemptedAt, FinishedAt: r.UpdatedAt, Outcome: "succeeded"}
		if r.WorkerID != nil {
			last.WorkerID = *r.WorkerID
		}
		j.History = append(j.History, last)
		if len(j.History) > MaxHistory {
			j.History = j.History[len(j.History)-MaxHistory:]
		}
	}
	if r.TxID != nil {
		j.TxID = *r.TxID
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

// claimed maps a row this client claimed: the job knows its client, so the handler's
// context carries both in one value (ClientFromContext).
func (c *Client) claimed(r *store.Job) *Job {
	j := fromRow(r)
	j.client = c
	return j
}

// skiplocktest reads jobs with SQL of its own and maps them here too (internal/jobrow).
func init() { jobrow.ToJobs = func(rs []*store.Job) any { return fromRows(rs) } }

func fromRows(rs []*store.Job) []*Job {
	out := make([]*Job, len(rs))
	for i, r := range rs {
		out[i] = fromRow(r)
	}
	return out
}

func (j *Job) lease() store.Lease {
	return store.Lease{ID: j.ID, Token: j.LeaseToken, Key: j.ConcurrencyKey}
}

// JobStates lists every job state: the lifecycle order, then StateWaiting (which
// precedes pending in a flow's or a batch's lifecycle, but was added later).
var JobStates = []JobState{StatePending, StateClaimed, StateRunning, StateSucceeded, StateFailed, StateCancelled, StateWaiting}

// ParseJobState returns the state named s, or an ErrInvalid error that lists the
// valid names.
func ParseJobState(s string) (JobState, error) {
	for _, st := range JobStates {
		if string(st) == s {
			return st, nil
		}
	}
	return "", invalid("state", "unknown state %q (valid: %s)", s, words(JobStates))
}
