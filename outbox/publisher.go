package outbox

import (
	"context"
	"errors"
	"time"
)

// Message is one outbox event as a Publisher sends it. Every field is copied from
// the outbox row; ID is stable across republishes of the same event, so a consumer
// can deduplicate on it.
type Message struct {
	// ID is the event's id (a UUID string). Adapters put it where the broker's own
	// deduplication looks: Nats-Msg-Id, the AMQP message-id, the Kafka header
	// "skiplock-event-id", the webhook-id header.
	ID string
	// AggregateType and AggregateID name the entity the event is about. Kafka uses
	// AggregateID as the record key, so one aggregate's events share a partition.
	AggregateType string
	AggregateID   string
	// EventType is the event's name, e.g. "order.paid".
	EventType string
	// Destination is where the event goes; each adapter documents how it reads it
	// (Kafka topic, AMQP routing key, NATS subject, webhook endpoint name). Empty means
	// the adapter's configured default.
	Destination string
	// Payload is the event body, valid JSON.
	Payload []byte
	// Headers are user headers carried as broker headers.
	Headers map[string]string
	// CreatedAt is when the event was written (the writing transaction's clock).
	CreatedAt time.Time
	// Attempt is 1 on the first publish of this event and grows with each retry.
	Attempt int
}

// Publisher sends messages to an external system.
//
// Publish returns one error per message, in order (len(result) == len(msgs)); a nil
// entry means the broker durably accepted that message (confirmed, acked, 2xx). A
// Publisher must be safe for use by several goroutines. An error wrapped with
// skiplock.Permanent (the same wrapper job handlers use) tells the relay not to try
// that message again: it is parked as dead at once. Any other error is retried with
// backoff.
//
// The relay defends itself against a Publisher that breaks this contract: a panic,
// or a result of the wrong length (nil included), fails the whole batch with a
// retryable error; an error value whose Error method panics or whose text is not
// storable is recorded with a safe description; and the relay keeps its own copy of
// each message's id, so a Publisher that modifies msgs changes nothing it records.
// A Publisher that ignores ctx and never returns holds up its relay (not the
// outbox: once the lease expires, other relays take the events over).
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) []error
	// Close releases the publisher's connections. Publish after Close fails.
	Close() error
}

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("outbox: publisher closed")

// FailAll sets every entry of errs to err and returns errs: for a Publisher whose
// whole batch failed the same way (closed, cancelled).
func FailAll(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}
