// Package kafkapub publishes outbox events to Apache Kafka (or a Kafka-compatible
// broker) with franz-go.
//
// Each message becomes one record: the topic is Message.Destination
// (Config.DefaultTopic when Destination is empty), the key is Message.AggregateID,
// so one aggregate's events share a partition and keep their order, and the value
// is Message.Payload. Headers carry the event:
//
//	skiplock-event-id        Message.ID (consumers deduplicate on it)
//	skiplock-event-type      Message.EventType
//	skiplock-aggregate-type  Message.AggregateType
//
// followed by Message.Headers (a user header with one of the names above is
// dropped). The record timestamp is the produce time.
//
// # Guarantees
//
// A record counts as published when the partition leader acknowledges it with
// acks=all: every in-sync replica has it. The producer is idempotent (franz-go's
// default), so retries inside the client never write a record twice, and records
// to one partition stay in order. A whole batch is handed to the client at once
// and Publish waits for every record's acknowledgement, so records travel in as few
// produce requests as the partitioning allows.
//
// # A production cluster
//
// acks=all is only as strong as the topic's replication:
//
//   - replication.factor=3 and min.insync.replicas=2 on the topic (or broker
//     default), so an acknowledged record is on at least two brokers and a write
//     is refused, not silently under-replicated, when only one replica is in sync;
//   - unclean.leader.election.enable=false (the default), so an out-of-date replica
//     never becomes leader and drops acknowledged records;
//   - idempotence stays on (do not pass kgo.DisableIdempotentWrite); with it,
//     franz-go keeps at most 5 produce requests in flight per broker, the most
//     Kafka allows while preserving order (the Java producer's equivalent is
//     enable.idempotence=true with max.in.flight.requests.per.connection<=5);
//   - create topics ahead of time (auto-creation picks broker defaults, often a
//     replication factor of 1).
//
// Events are delivered at least once: a message whose acknowledgement was lost is
// republished by the relay, so consumers should skip skiplock-event-id values they
// have already processed.
package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/failures"
	"github.com/skiplock/skiplock/outbox"
)

// Header names set on every record.
const (
	HeaderEventID       = "skiplock-event-id"
	HeaderEventType     = "skiplock-event-type"
	HeaderAggregateType = "skiplock-aggregate-type"
)

// Config configures a Publisher.
type Config struct {
	// SeedBrokers are host:port addresses of brokers to bootstrap from. Required;
	// there is no default.
	SeedBrokers []string

	// DefaultTopic receives messages whose Destination is empty. Default: "" (such
	// messages fail permanently).
	DefaultTopic string

	// Timeout bounds one Publish call when the caller's context has no earlier
	// deadline. Default: 30s.
	Timeout time.Duration

	// Options are extra franz-go client options (TLS, SASL, client id, linger,
	// partitioner...), applied after this package's own, so they can override
	// them. Default: none. This package sets kgo.RequiredAcks(kgo.AllISRAcks()) and
	// kgo.ProducerLinger(0); do not pass kgo.DisableIdempotentWrite or weaker acks
	// unless you accept losing or duplicating records.
	Options []kgo.Opt

	// Logger receives failed publishes at debug level. Default: slog.Default() at level Warn
	// and above, as skiplock.Config.Logger and outbox.RelayConfig.Logger, so the
	// debug lines stay quiet until you pass a logger of your own.
	// To see the client's own logs, pass kgo.WithLogger in Options.
	Logger *slog.Logger
}

// Publisher produces outbox messages to Kafka. It is safe for concurrent use.
// Create it with New.
type Publisher struct {
	cfg    Config
	client *kgo.Client
	log    *slog.Logger
	closed atomic.Bool
}

var _ outbox.Publisher = (*Publisher)(nil)

// New validates cfg and creates the client. The client connects lazily, so New
// succeeds while the brokers are down; Publish then reports retryable errors. An
// unusable cfg returns a *skiplock.ValidationError (errors.Is(err,
// skiplock.ErrInvalid)).
func New(cfg Config) (*Publisher, error) {
	if len(cfg.SeedBrokers) == 0 {
		return nil, &skiplock.ValidationError{Field: "kafkapub.Config.SeedBrokers", Reason: "empty; set it to at least one broker host:port"}
	}
	for _, b := range cfg.SeedBrokers {
		if b == "" {
			return nil, &skiplock.ValidationError{Field: "kafkapub.Config.SeedBrokers", Reason: "an entry is empty; remove it"}
		}
	}
	if cfg.Timeout < 0 {
		return nil, &skiplock.ValidationError{Field: "kafkapub.Config.Timeout", Reason: "negative; use 0 for the default"}
	}
	for i, o := range cfg.Options {
		if o == nil {
			return nil, &skiplock.ValidationError{Field: "kafkapub.Config.Options", Reason: fmt.Sprintf("entry %d is nil; remove it", i)}
		}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.SeedBrokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Publish hands over a whole batch and waits for it, so waiting for more
		// records to arrive only adds latency.
		kgo.ProducerLinger(0),
	}
	opts = append(opts, cfg.Options...)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, &skiplock.ValidationError{Field: "kafkapub.Config.Options", Reason: fmt.Sprintf("creating the client: %v", err)}
	}
	p := &Publisher{cfg: cfg, client: client, log: failures.Logger(cfg.Logger)}
	return p, nil
}

// Client returns the underlying franz-go client, for admin requests or metrics
// (nil for a Publisher not made by New). Do not close it; call Close.
func (p *Publisher) Client() *kgo.Client {
	if p == nil {
		return nil
	}
	return p.client
}

// Publish produces msgs and waits until each is acknowledged or fails, then returns
// one error per message, in order. A nil context or a Publisher not made by New
// fails every message with an error wrapping skiplock.ErrInvalid.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	if p == nil || p.client == nil || ctx == nil {
		return outbox.FailAll(errs, &skiplock.ValidationError{Field: "kafkapub.Publisher", Reason: "nil context, or a Publisher not made by kafkapub.New"})
	}
	if p.closed.Load() {
		return outbox.FailAll(errs, fmt.Errorf("kafkapub: %w", outbox.ErrClosed))
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return outbox.FailAll(errs, fmt.Errorf("kafkapub: publishing: %w", err))
	}

	var (
		mu       sync.Mutex // guards results and finished
		results  = make([]error, len(msgs))
		pending  = make([]bool, len(msgs))
		finished bool
		wg       sync.WaitGroup
	)
	for i := range msgs {
		m := &msgs[i]
		topic := m.Destination
		if topic == "" {
			topic = p.cfg.DefaultTopic
		}
		if topic == "" {
			results[i] = skiplock.Permanent(errors.New("kafkapub: message has no destination and Config.DefaultTopic is not set"))
			continue
		}
		pending[i] = true
		wg.Add(1)
		p.client.Produce(ctx, record(m, topic), func(_ *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if finished {
				return
			}
			pending[i] = false
			if err != nil {
				results[i] = classify(m.ID, err)
			}
		})
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	finished = true
	for i := range results {
		errs[i] = results[i]
		if pending[i] {
			errs[i] = fmt.Errorf("kafkapub: waiting for ack of %s: %w", msgs[i].ID, ctx.Err())
		}
		if errs[i] != nil {
			p.log.Debug("kafkapub: publish failed", "id", msgs[i].ID, "err", errs[i])
		}
	}
	mu.Unlock()
	return errs
}

func record(m *outbox.Message, topic string) *kgo.Record {
	r := &kgo.Record{
		Topic: topic,
		Value: m.Payload,
		Headers: append(make([]kgo.RecordHeader, 0, 3+len(m.Headers)),
			kgo.RecordHeader{Key: HeaderEventID, Value: []byte(m.ID)},
			kgo.RecordHeader{Key: HeaderEventType, Value: []byte(m.EventType)},
			kgo.RecordHeader{Key: HeaderAggregateType, Value: []byte(m.AggregateType)},
		),
	}
	if m.AggregateID != "" {
		r.Key = []byte(m.AggregateID)
	}
	for k, v := range m.Headers {
		switch k {
		case HeaderEventID, HeaderEventType, HeaderAggregateType:
			continue
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

// classify wraps a produce error, marking as permanent the ones that retrying the
// same record cannot fix.
func classify(id string, err error) error {
	wrapped := fmt.Errorf("kafkapub: publishing %s: %w", id, err)
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.InvalidRecord), errors.Is(err, kerr.InvalidTopicException):
		return skiplock.Permanent(wrapped)
	case errors.Is(err, kgo.ErrClientClosed):
		return fmt.Errorf("%w (%w)", wrapped, outbox.ErrClosed)
	}
	return wrapped
}

// Close closes the client. Records still waiting to be acknowledged fail, so
// Publish calls in progress return errors for them. Publish after Close fails with
// outbox.ErrClosed. Close is idempotent. Close of a Publisher not made by New
// returns a *skiplock.ValidationError.
func (p *Publisher) Close() error {
	if p == nil || p.client == nil {
		return &skiplock.ValidationError{Field: "kafkapub.Publisher", Reason: "not made by kafkapub.New"}
	}
	if p.closed.Swap(true) {
		return nil
	}
	p.client.Close()
	return nil
}
