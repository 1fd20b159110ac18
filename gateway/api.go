package gateway

import (
	"encoding/json"
	"time"

	"github.com/skiplock/skiplock"
)

// The request and response bodies of the routes, as JSON. The OpenAPI document
// (openapi.json, served at OpenAPIPath) describes each of them under
// components.schemas by the type's name, and a test holds the two together: every
// JSON field of these types is a property of its schema with the same type, and
// the schema's required list is exactly the fields without omitempty.

// ClaimRequest is the body of POST /v1/claim.
type ClaimRequest struct {
	// Queue to claim from. Required.
	Queue string `json:"queue"`
	// Limit is the most jobs to return, 1 to Options.MaxClaim. Default 1.
	Limit int `json:"limit,omitempty"`
	// WaitMS is how long to wait for a job when none is due, in milliseconds, at most
	// Options.MaxWait: the request returns as soon as one is claimed (a long poll).
	// Default 0: answer at once, with no jobs if none is due.
	WaitMS int64 `json:"wait_ms,omitempty"`
}

// ClaimResponse is the answer of POST /v1/claim: the claimed jobs, possibly none.
type ClaimResponse struct {
	Jobs []ClaimedJob `json:"jobs"`
	// LeaseMS is how long each lease lasts from the claim (and from each heartbeat),
	// in milliseconds; HeartbeatMS the interval a worker should renew it at (a third).
	LeaseMS     int64 `json:"lease_ms"`
	HeartbeatMS int64 `json:"heartbeat_ms"`
}

// ClaimedJob is one claimed job: what a worker needs to run it, and the lease token
// every later call for it must present.
type ClaimedJob struct {
	ID    string `json:"id"`
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
	// Args are the job's arguments, as enqueued (JSON).
	Args json.RawMessage `json:"args"`
	// Attempt counts claims: 1 during the first run.
	Attempt     int `json:"attempt"`
	MaxAttempts int `json:"max_attempts"`
	Priority    int `json:"priority"`
	// LeaseToken fences every call for this claim: a call under a stale token
	// changes nothing and answers 409 lease_lost.
	LeaseToken string    `json:"lease_token"`
	LeaseUntil time.Time `json:"lease_until"`
	// IdempotencyKey is stable across every attempt of the job: pass it to external
	// systems so a repeated attempt does not repeat an effect.
	IdempotencyKey string            `json:"idempotency_key"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Tags           []string          `json:"tags,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
}

// LeaseRequest is the body of POST /v1/jobs/{id}/heartbeat.
type LeaseRequest struct {
	LeaseToken string `json:"lease_token"`
}

// HeartbeatResponse is the answer of a renewed lease.
type HeartbeatResponse struct {
	ID      string `json:"id"`
	LeaseMS int64  `json:"lease_ms"`
}

// JobLease names one claim: a job and its lease token.
type JobLease struct {
	ID         string `json:"id"`
	LeaseToken string `json:"lease_token"`
}

// HeartbeatManyRequest is the body of POST /v1/heartbeat: renew many leases at once.
type HeartbeatManyRequest struct {
	Jobs []JobLease `json:"jobs"`
}

// HeartbeatManyResponse lists the renewed and the lost leases by job id. A lost
// lease (the job finished, was reclaimed or cancelled) must not be worked further.
type HeartbeatManyResponse struct {
	Renewed []string `json:"renewed"`
	Lost    []string `json:"lost"`
	LeaseMS int64    `json:"lease_ms"`
}

// CompleteRequest is the body of POST /v1/jobs/{id}/complete.
type CompleteRequest struct {
	LeaseToken string `json:"lease_token"`
	// Output is stored with the success (any JSON, at most skiplock.MaxOutputBytes),
	// as a Go handler's SetOutput.
	Output json.RawMessage `json:"output,omitempty"`
}

// CompleteManyRequest is the body of POST /v1/complete: many jobs' successes in one
// request, as a worker that batches its completions sends them (Go's completer does).
type CompleteManyRequest struct {
	Jobs []JobCompletion `json:"jobs"`
}

// JobCompletion is one success of a CompleteManyRequest: the claim and its output.
type JobCompletion struct {
	ID         string `json:"id"`
	LeaseToken string `json:"lease_token"`
	// Output is stored with the success, as CompleteRequest's.
	Output json.RawMessage `json:"output,omitempty"`
}

// CompleteManyResponse lists the jobs that succeeded and those whose lease was lost
// (nothing written for them), by job id.
type CompleteManyResponse struct {
	Succeeded []string `json:"succeeded"`
	Lost      []string `json:"lost"`
}

// FailRequest is the body of POST /v1/jobs/{id}/fail.
type FailRequest struct {
	LeaseToken string `json:"lease_token"`
	// Error is the attempt's error text (valid UTF-8, no NUL; longer than 16 KiB is
	// cut). Required.
	Error string `json:"error"`
	// Permanent fails the job now, whatever attempts remain. Default false: the job
	// is retried after RetryInMS, or after its retry policy's delay, until its
	// attempts are exhausted.
	Permanent bool `json:"permanent,omitempty"`
	// RetryInMS overrides the retry policy's delay, in milliseconds (0 or more).
	RetryInMS *int64 `json:"retry_in_ms,omitempty"`
}

// SnoozeRequest is the body of POST /v1/jobs/{id}/snooze: the job is pending again
// after DelayMS, and the attempt its claim counted is given back.
type SnoozeRequest struct {
	LeaseToken string `json:"lease_token"`
	DelayMS    int64  `json:"delay_ms"`
}

// CancelRequest is the body of POST /v1/jobs/{id}/cancel.
type CancelRequest struct {
	LeaseToken string `json:"lease_token"`
	// Reason is recorded as the job's last error.
	Reason string `json:"reason,omitempty"`
}

// FinishResponse is the answer of a finishing call that was written: the state the
// job is now in (succeeded, pending, failed or cancelled).
type FinishResponse struct {
	ID    string            `json:"id"`
	State skiplock.JobState `json:"state"`
}

// ErrorResponse is the body of every 4xx and 5xx answer.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what went wrong: Code is one of the Code constants, stable for
// programs to branch on; Message is for people; Field names the request field at
// fault, when one is.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// PushRequest is the body the gateway POSTs to a push target (Options.Push): one
// claimed job, signed with Standard Webhooks headers.
type PushRequest struct {
	Job ClaimedJob `json:"job"`
	// CallbackURL is the gateway's base URL (Options.PublicURL) for a receiver that
	// answers 202 and reports the outcome later (…/v1/jobs/{id}/complete and the
	// rest), when set.
	CallbackURL string `json:"callback_url,omitempty"`
}

// PushReply is what a push target may answer with a 2xx status and a JSON body: the
// job's outcome. A 2xx answer with an empty body completes the job; 202 Accepted
// means the outcome comes later, through the routes; any other status, or no
// answer within PushTarget.Timeout, fails the attempt (retried per the job's policy).
type PushReply struct {
	// Outcome is "complete", "fail", "snooze" or "cancel".
	Outcome string `json:"outcome"`
	// Output is complete's output.
	Output json.RawMessage `json:"output,omitempty"`
	// Error, Permanent and RetryInMS are fail's, as in FailRequest.
	Error     string `json:"error,omitempty"`
	Permanent bool   `json:"permanent,omitempty"`
	RetryInMS *int64 `json:"retry_in_ms,omitempty"`
	// DelayMS is snooze's delay.
	DelayMS int64 `json:"delay_ms,omitempty"`
	// Reason is cancel's reason.
	Reason string `json:"reason,omitempty"`
}

// The error codes of ErrorBody.Code.
const (
	CodeInvalidRequest   = "invalid_request"        // 400: the body or a parameter is wrong (Field names it)
	CodeUnauthenticated  = "unauthenticated"        // 401: no or an unknown bearer token
	CodeForbidden        = "forbidden"              // 403: authenticated, but not allowed this
	CodeNotFound         = "not_found"              // 404: no such route
	CodeMethodNotAllowed = "method_not_allowed"     // 405
	CodeLeaseLost        = "lease_lost"             // 409: the job is not running under this lease token: nothing was written
	CodeBodyTooLarge     = "body_too_large"         // 413: more than Options.MaxBodyBytes
	CodeUnsupportedType  = "unsupported_media_type" // 415: a body that is not application/json
	CodeUnavailable      = "unavailable"            // 503: the database did not answer, or the gateway is stopped; retry
	CodeInternal         = "internal"               // 500
)

func claimedJob(j *skiplock.Job) ClaimedJob {
	args := j.Payload
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	return ClaimedJob{ID: j.ID, Queue: j.Queue, Kind: j.Kind, Args: args, Attempt: j.Attempt,
		MaxAttempts: j.MaxAttempts, Priority: j.Priority, LeaseToken: j.LeaseToken, LeaseUntil: j.LeaseUntil,
		IdempotencyKey: j.IdempotencyKey(), Metadata: j.Metadata, Tags: j.Tags, CreatedAt: j.CreatedAt}
}
