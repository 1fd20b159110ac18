package outbox

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/validate"
)

// Limits on event input. Values outside them are refused with a
// *skiplock.ValidationError and nothing is written.
const (
	// MaxNameLen bounds AggregateType, AggregateID, EventType, Destination and
	// header names, in bytes.
	MaxNameLen = 255
	// MaxHeaderValueLen bounds one header value, in bytes.
	MaxHeaderValueLen = 4096
	// MaxHeaders bounds the number of headers of one event.
	MaxHeaders = 64
	// MaxMaxAttempts bounds Event.MaxAttempts.
	MaxMaxAttempts = 1000
	// DefaultMaxAttempts is the attempt budget of an event that sets none (the
	// column's default).
	DefaultMaxAttempts = 25
	// DefaultMaxPayload is the payload limit of a client that sets none
	// (skiplock.Config.MaxPayloadBytes): 1 MiB.
	DefaultMaxPayload = skiplock.DefaultMaxPayload
)

// Event is one message to publish, written in the caller's transaction.
type Event struct {
	// AggregateType and AggregateID name the entity the event is about ("order",
	// "42"). Both are required. With ordered relaying, events of one aggregate are
	// published in write order; Kafka uses AggregateID as the record key.
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	// EventType names what happened ("order.paid"). Required.
	EventType string `json:"event_type"`
	// Destination is where the event goes: a Kafka topic, an AMQP routing key, a
	// NATS subject, a webhook endpoint name. Empty means the publisher's configured
	// default.
	Destination string `json:"destination,omitempty"`
	// Payload is the event body: valid JSON, at most the client's payload limit
	// (skiplock.Config.MaxPayloadBytes, default 1 MiB),
	// without \u0000 (which PostgreSQL's jsonb cannot store). Required.
	Payload []byte `json:"payload"`
	// Headers travel as broker headers (HTTP headers for webhooks): at most
	// MaxHeaders, names non-empty without control characters, values valid UTF-8
	// without NUL or other control characters except tab. Optional.
	Headers map[string]string `json:"headers,omitempty"`
	// MaxAttempts is how many publish attempts the event gets before it is parked as
	// dead, 1..MaxMaxAttempts. Default DefaultMaxAttempts (25).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// ConcurrencyKey is the tenant (account, aggregate) the event belongs to, as
	// skiplock.EnqueueOpts.ConcurrencyKey is a job's: the same value, one name. On the
	// Citus layout (docs/citus.md) it places the event in the shard of that key, beside
	// the tenant's jobs and business rows, so a write in the tenant's transaction stays
	// on one node; without it every event goes to the shard of the key "". On one
	// PostgreSQL node there is nothing to place: it is validated and not stored (the
	// single-node outbox has no such column), and records read back leave it empty.
	// At most skiplock.MaxConcurrencyKeyLen bytes, no control characters, not
	// skiplock.EachKey. Optional.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

// Record is an outbox event as stored, with its relay state, for inspection and
// operator tools.
type Record struct {
	ID string `json:"id"`
	Event
	// Attempts counts claims by a relay (each claim is one publish attempt).
	Attempts int `json:"attempts"`
	// AvailableAt is when the event is next due (later than now while in backoff).
	AvailableAt time.Time `json:"available_at"`
	// RelayUntil is the current relay lease's end, nil when no relay holds it.
	RelayUntil *time.Time `json:"relay_until,omitempty"`
	// PublishedAt is set once a publisher confirmed the event.
	PublishedAt *time.Time `json:"published_at,omitempty"`
	// DeadAt is set when the event was parked (attempts exhausted or a permanent
	// error); Requeue clears it.
	DeadAt *time.Time `json:"dead_at,omitempty"`
	// LastError is the last publish failure, if any.
	LastError string `json:"last_error,omitempty"`
	// CreatedAt is the writing transaction's time.
	CreatedAt time.Time `json:"created_at"`
	// TxID is the id of the transaction that wrote the event (0 for events written
	// before skiplock recorded it): Admin.EventsByTx and the root's Client.JobsByTx
	// list everything one business transaction wrote.
	TxID int64 `json:"txid,omitempty"`
}

// checkName applies the shared name rule (internal/validate) to an event field.
func checkName(field, v string, optional bool) error {
	if reason := validate.Name(v, MaxNameLen, optional); reason != "" {
		return &skiplock.ValidationError{Field: field, Reason: reason}
	}
	return nil
}

// validate checks ev and returns its headers encoded as a JSON object.
func (ev *Event) validate(maxPayload int) (headers []byte, err error) {
	for _, f := range []struct {
		field, v string
		optional bool
	}{
		{"aggregate_type", ev.AggregateType, false},
		{"aggregate_id", ev.AggregateID, false},
		{"event_type", ev.EventType, false},
		{"destination", ev.Destination, true},
	} {
		if err := checkName(f.field, f.v, f.optional); err != nil {
			return nil, err
		}
	}
	if ev.ConcurrencyKey == skiplock.EachKey {
		return nil, &skiplock.ValidationError{Field: "concurrency_key", Reason: fmt.Sprintf("%q is reserved for skiplock.Limit.Key (every key)", skiplock.EachKey)}
	}
	if reason := validate.Name(ev.ConcurrencyKey, skiplock.MaxConcurrencyKeyLen, true); reason != "" {
		return nil, &skiplock.ValidationError{Field: "concurrency_key", Reason: reason}
	}
	if err := skiplock.ValidatePayload(ev.Payload, maxPayload); err != nil {
		return nil, err
	}
	if ev.MaxAttempts < 0 || ev.MaxAttempts > MaxMaxAttempts {
		return nil, &skiplock.ValidationError{Field: "max_attempts", Reason: fmt.Sprintf("%d is outside 1..%d (0 means %d)", ev.MaxAttempts, MaxMaxAttempts, DefaultMaxAttempts)}
	}
	if len(ev.Headers) > MaxHeaders {
		return nil, &skiplock.ValidationError{Field: "headers", Reason: fmt.Sprintf("%d headers exceed the limit of %d", len(ev.Headers), MaxHeaders)}
	}
	for k, v := range ev.Headers {
		if reason := validate.Name(k, MaxNameLen, false); reason != "" {
			return nil, &skiplock.ValidationError{Field: "headers", Reason: fmt.Sprintf("name %q: %s", k, reason)}
		}
		if reason := headerValue(v); reason != "" {
			return nil, &skiplock.ValidationError{Field: "headers", Reason: fmt.Sprintf("value of %q %s", k, reason)}
		}
	}
	if len(ev.Headers) == 0 {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(ev.Headers)
	if err != nil { // cannot happen for map[string]string
		return nil, &skiplock.ValidationError{Field: "headers", Reason: fmt.Sprintf("encoding as JSON: %v", err)}
	}
	return b, nil
}

// headerValue returns why v cannot be a header value, or "". Header values reach
// HTTP, AMQP, Kafka and NATS headers, where line breaks and other control characters
// would split or corrupt the header block; a tab is allowed.
func headerValue(v string) string {
	switch {
	case len(v) > MaxHeaderValueLen:
		return fmt.Sprintf("is longer than %d bytes", MaxHeaderValueLen)
	case !utf8.ValidString(v):
		return "is not valid UTF-8"
	case strings.IndexByte(v, 0) >= 0:
		return "contains a NUL byte"
	}
	for _, r := range v {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return "contains a control character"
		}
	}
	return ""
}
