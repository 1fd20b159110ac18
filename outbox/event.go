package outbox

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
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
	// DefaultMaxPayload is WriterConfig.MaxPayloadBytes' default: 1 MiB.
	DefaultMaxPayload = skiplock.DefaultMaxPayload
)

// Event is one message to publish, written in the caller's transaction.
type Event struct {
	// AggregateType and AggregateID name the entity the event is about ("order",
	// "42"). Both are required. With ordered relaying, events of one aggregate are
	// published in write order; Kafka uses AggregateID as the record key.
	AggregateType string
	AggregateID   string
	// EventType names what happened ("order.paid"). Required.
	EventType string
	// Destination is where the event goes: a Kafka topic, an AMQP routing key, a
	// NATS subject, a webhook endpoint name. Empty means the publisher's configured
	// default.
	Destination string
	// Payload is the event body: valid JSON, at most WriterConfig.MaxPayloadBytes,
	// without \u0000 (which PostgreSQL's jsonb cannot store). Required.
	Payload []byte
	// Headers travel as broker headers (HTTP headers for webhooks): at most
	// MaxHeaders, names non-empty without control characters, values valid UTF-8
	// without control characters other than tab. Optional.
	Headers map[string]string
	// MaxAttempts is how many publish attempts the event gets before it is parked as
	// dead, 1..MaxMaxAttempts. Default DefaultMaxAttempts (25).
	MaxAttempts int
}

// Record is an outbox event as stored, with its relay state, for inspection and
// operator tools.
type Record struct {
	ID string
	Event
	// Attempts counts claims by a relay (each claim is one publish attempt).
	Attempts int
	// AvailableAt is when the event is next due (later than now while in backoff).
	AvailableAt time.Time
	// RelayUntil is the current relay lease's end, nil when no relay holds it.
	RelayUntil *time.Time
	// PublishedAt is set once a publisher confirmed the event.
	PublishedAt *time.Time
	// DeadAt is set when the event was parked (attempts exhausted or a permanent
	// error); Requeue clears it.
	DeadAt *time.Time
	// LastError is the last publish failure, if any.
	LastError string
	// CreatedAt is the writing transaction's time.
	CreatedAt time.Time
}

func invalid(field, format string, args ...any) error {
	return &skiplock.ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// validateName checks a required (or, with optional, possibly empty) name field.
func validateName(field, v string, optional bool) error {
	switch {
	case v == "" && !optional:
		return invalid(field, "must not be empty")
	case len(v) > MaxNameLen:
		return invalid(field, "longer than %d bytes", MaxNameLen)
	case !utf8.ValidString(v):
		return invalid(field, "not valid UTF-8")
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return invalid(field, "contains a control character")
		}
	}
	return nil
}

// validate checks ev and returns its headers encoded as a JSON object.
func (ev *Event) validate(maxPayload int) (headers []byte, err error) {
	if err := validateName("aggregate_type", ev.AggregateType, false); err != nil {
		return nil, err
	}
	if err := validateName("aggregate_id", ev.AggregateID, false); err != nil {
		return nil, err
	}
	if err := validateName("event_type", ev.EventType, false); err != nil {
		return nil, err
	}
	if err := validateName("destination", ev.Destination, true); err != nil {
		return nil, err
	}
	if err := validatePayload(ev.Payload, maxPayload); err != nil {
		return nil, err
	}
	if ev.MaxAttempts < 0 || ev.MaxAttempts > MaxMaxAttempts {
		return nil, invalid("max_attempts", "%d is outside 1..%d (0 means %d)", ev.MaxAttempts, MaxMaxAttempts, DefaultMaxAttempts)
	}
	if len(ev.Headers) > MaxHeaders {
		return nil, invalid("headers", "%d headers exceed the limit of %d", len(ev.Headers), MaxHeaders)
	}
	for k, v := range ev.Headers {
		if err := validateName("headers", k, false); err != nil {
			return nil, invalid("headers", "name %q: %s", k, err.(*skiplock.ValidationError).Reason)
		}
		if len(v) > MaxHeaderValueLen || !utf8.ValidString(v) {
			return nil, invalid("headers", "value of %q must be valid UTF-8 of at most %d bytes", k, MaxHeaderValueLen)
		}
		for _, r := range v {
			if (r < 0x20 && r != '\t') || r == 0x7f {
				return nil, invalid("headers", "value of %q contains a control character", k)
			}
		}
	}
	if len(ev.Headers) == 0 {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(ev.Headers)
	if err != nil { // cannot happen for map[string]string
		return nil, invalid("headers", "encoding as JSON: %v", err)
	}
	return b, nil
}

// validatePayload checks an event payload with the same rules as job payloads.
func validatePayload(p []byte, limit int) error { return skiplock.ValidatePayload(p, limit) }
