package skiplock

import (
	"encoding/json"
	"time"

	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/validate"
)

// This file holds the job record an operator reads (the dashboard, the CLI): tags,
// the handler's output and the history of attempts.

// Limits of the job record.
const (
	MaxTags        = 16
	MaxTagLen      = 64
	MaxOutputBytes = 64 << 10
	// MaxHistory is how many attempts Job.History keeps (the newest).
	MaxHistory = store.MaxHistory
)

// AttemptRecord is one finished attempt of a job.
type AttemptRecord struct {
	Attempt int `json:"attempt"`
	// StartedAt is when the attempt's claim started it; FinishedAt when its outcome
	// was written (or its lease was found expired).
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	WorkerID   string    `json:"worker_id,omitempty"`
	// Outcome is "succeeded", "retried", "failed", "cancelled", "snoozed" or
	// "lease_expired".
	Outcome string `json:"outcome"`
	// Error is the attempt's error text, if any.
	Error string `json:"error,omitempty"`
}

// SetOutput records v, encoded as JSON, as the job's output: it is stored with the
// job when the job succeeds (a later SetOutput replaces an earlier one) and shown by
// the dashboard and `skiplock jobs show`. At most MaxOutputBytes. Call it from the
// job's handler.
func (j *Job) SetOutput(v any) error {
	if j == nil {
		return invalid("job", "must not be nil")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return invalid("output", "encoding %T as JSON: %v", v, err)
	}
	if err := ValidatePayload(b, MaxOutputBytes); err != nil {
		return invalid("output", "%v", err)
	}
	j.output = b
	return nil
}

// validateTags checks the tags of an enqueue.
func validateTags(tags []string) ([]string, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	if len(tags) > MaxTags {
		return nil, invalid("tags", "%d tags exceed the limit of %d", len(tags), MaxTags)
	}
	for _, t := range tags {
		if reason := validate.Name(t, MaxTagLen, false); reason != "" {
			return nil, invalid("tags", "tag %q: %s", t, reason)
		}
	}
	return append([]string(nil), tags...), nil
}

// history decodes a job row's attempt history.
func history(raw []byte) []AttemptRecord {
	if len(raw) == 0 {
		return nil
	}
	var h []AttemptRecord
	_ = json.Unmarshal(raw, &h) // written by the store's statements
	return h
}
