// Package natspub publishes outbox events to NATS JetStream.
//
// Each message is published to the subject Message.Destination
// (Config.DefaultSubject when Destination is empty), which a JetStream stream must
// capture. The body is Message.Payload and the headers are:
//
//	Nats-Msg-Id              Message.ID, for the stream's deduplication
//	skiplock-event-type      Message.EventType
//	skiplock-aggregate-type  Message.AggregateType
//	skiplock-aggregate-id    Message.AggregateID
//
// plus Message.Headers, except user headers whose names start with "Nats-": those
// are instructions to the server (expected stream, TTL, rollup...) and are dropped
// so an event's data cannot change how it is stored.
//
// # Guarantees
//
// A message counts as published when the stream has acknowledged it (PubAck): it is
// stored, and on a replicated stream written to a majority of replicas. A batch is
// published asynchronously and Publish then waits for every acknowledgement, so the
// round trip is paid once per batch.
//
// The stream deduplicates on Nats-Msg-Id within its duplicate window (the stream's
// Duplicates setting, two minutes by default): when the relay republishes an event
// whose acknowledgement was lost, the stream acknowledges it again (as a
// duplicate) without storing a second copy. Republishes later than the window are
// stored again, so consumers should still be idempotent.
//
// # A production stream
//
// Create the stream ahead of time with file storage, Replicas: 3 on a cluster of at
// least three servers, and a Duplicates window longer than the relay's longest
// retry backoff plus its publish timeout, so a retried event still falls inside it.
// Discard policy and limits are the stream's business: a stream that refuses a
// message (limits with DiscardNew) makes Publish return a retryable error.
//
// The NATS client reconnects by itself; while it is disconnected, Publish waits for
// acknowledgements until its timeout and then reports retryable errors. Credentials
// in Config.URL (a user and password, or a token) never appear in errors.
package natspub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/failures"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/redact"
	"github.com/skiplock/skiplock/outbox"
)

// Header names set on every message, besides jetstream.MsgIDHeader (Nats-Msg-Id).
const (
	HeaderEventType     = "skiplock-event-type"
	HeaderAggregateType = "skiplock-aggregate-type"
	HeaderAggregateID   = "skiplock-aggregate-id"
)

// Config configures a Publisher. Set either URL or Conn.
type Config struct {
	// URL is the NATS server URL (several may be given comma-separated), e.g.
	// "nats://127.0.0.1:4222". Required unless Conn is set; there is no default.
	URL string

	// Options are extra nats.Connect options (credentials, TLS, name...), applied
	// after this package's defaults (retry the first connect, reconnect forever,
	// connection name "skiplock-outbox"). Default: none. Ignored when Conn is set.
	Options []nats.Option

	// Conn is an existing connection to use instead of dialling URL. The
	// Publisher does not close it. Default: nil (dial URL).
	Conn *nats.Conn

	// DefaultSubject receives messages whose Destination is empty. Default: ""
	// (such messages fail permanently).
	DefaultSubject string

	// Timeout bounds one Publish call when the caller's context has no earlier
	// deadline, and how long an unacknowledged message is waited for. Default: 30s.
	Timeout time.Duration

	// MaxPending bounds the messages awaiting acknowledgement at once, across all
	// Publish calls; publishing more waits for room (up to the publish deadline).
	// Default: 4000.
	MaxPending int

	// Logger receives failed publishes at debug level. Default: slog.Default() at level Warn
	// and above, as skiplock.Config.Logger and outbox.RelayConfig.Logger, so the
	// debug lines stay quiet until you pass a logger of your own.
	Logger *slog.Logger
}

// Publisher publishes outbox messages to JetStream. It is safe for concurrent use.
// Create it with New.
type Publisher struct {
	cfg     Config
	nc      *nats.Conn
	ownConn bool
	js      jetstream.JetStream
	log     *slog.Logger
	closed  atomic.Bool
}

var _ outbox.Publisher = (*Publisher)(nil)

// New validates cfg and connects (unless Conn is given). With the default options a
// server that is down at start does not make New fail: the client keeps trying. An
// unusable cfg returns a *skiplock.ValidationError (errors.Is(err,
// skiplock.ErrInvalid)).
func New(cfg Config) (*Publisher, error) {
	if cfg.Conn == nil && cfg.URL == "" {
		return nil, &skiplock.ValidationError{Field: "natspub.Config.URL", Reason: "set Config.URL (e.g. nats://127.0.0.1:4222) or Config.Conn"}
	}
	if cfg.Timeout < 0 || cfg.MaxPending < 0 {
		return nil, &skiplock.ValidationError{Field: "natspub.Config.Timeout", Reason: "Config.Timeout and Config.MaxPending must not be negative; use 0 for the default"}
	}
	for i, o := range cfg.Options {
		if o == nil {
			return nil, &skiplock.ValidationError{Field: "natspub.Config.Options", Reason: fmt.Sprintf("entry %d is nil; remove it", i)}
		}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 4000
	}
	p := &Publisher{cfg: cfg, nc: cfg.Conn, log: failures.Logger(cfg.Logger)}
	if p.nc == nil {
		opts := append([]nats.Option{
			nats.Name("skiplock-outbox"),
			nats.RetryOnFailedConnect(true),
			nats.MaxReconnects(-1),
		}, cfg.Options...)
		nc, err := nats.Connect(cfg.URL, opts...)
		if err != nil {
			return nil, fmt.Errorf("natspub: connecting to %s: %w", redact.URL(cfg.URL), redact.Error(err, cfg.URL))
		}
		p.nc, p.ownConn = nc, true
	}
	js, err := jetstream.New(p.nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(cfg.Timeout),
	)
	if err != nil {
		if p.ownConn {
			p.nc.Close()
		}
		return nil, fmt.Errorf("natspub: creating JetStream context: %w", err)
	}
	p.js = js
	return p, nil
}

// Publish publishes msgs asynchronously, waits for every acknowledgement and returns
// one error per message, in order. A duplicate acknowledgement (the stream already
// held the event) counts as published. A nil context or a Publisher not made by New
// fails every message with an error wrapping skiplock.ErrInvalid.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	if p == nil || p.js == nil || ctx == nil {
		return outbox.FailAll(errs, &skiplock.ValidationError{Field: "natspub.Publisher", Reason: "nil context, or a Publisher not made by natspub.New"})
	}
	if p.closed.Load() {
		return outbox.FailAll(errs, fmt.Errorf("natspub: %w", outbox.ErrClosed))
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("natspub: publishing %s: %w", m.ID, err)
			continue
		}
		subject := m.Destination
		if subject == "" {
			subject = p.cfg.DefaultSubject
		}
		if subject == "" {
			errs[i] = skiplock.Permanent(errors.New("natspub: message has no destination and Config.DefaultSubject is not set"))
			continue
		}
		stall := deadline(ctx).Sub(hostclock.Now())
		if stall <= 0 {
			stall = time.Millisecond
		}
		f, err := p.js.PublishMsgAsync(message(m, subject), jetstream.WithStallWait(stall))
		if err != nil {
			errs[i] = classify(m.ID, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = classify(msgs[i].ID, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("natspub: waiting for ack of %s: %w", msgs[i].ID, ctx.Err())
		}
	}
	for i, err := range errs {
		if err != nil {
			p.log.Debug("natspub: publish failed", "id", msgs[i].ID, "err", err)
		}
	}
	return errs
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline() // always set: Publish adds Config.Timeout
	return d
}

func message(m *outbox.Message, subject string) *nats.Msg {
	h := make(nats.Header, len(m.Headers)+4)
	for k, v := range m.Headers {
		if len(k) >= 5 && strings.EqualFold(k[:5], "nats-") {
			continue
		}
		// Assign directly: Header.Set would canonicalise the name.
		h[k] = []string{v}
	}
	h[jetstream.MsgIDHeader] = []string{m.ID}
	h[HeaderEventType] = []string{m.EventType}
	h[HeaderAggregateType] = []string{m.AggregateType}
	h[HeaderAggregateID] = []string{m.AggregateID}
	return &nats.Msg{Subject: subject, Header: h, Data: m.Payload}
}

// classify wraps a publish error, marking as permanent the ones that retrying the
// same message cannot fix.
func classify(id string, err error) error {
	wrapped := fmt.Errorf("natspub: publishing %s: %w", id, err)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject):
		return skiplock.Permanent(wrapped)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return skiplock.Permanent(wrapped)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w (is there a stream whose subjects include this message's subject?)", wrapped)
	case errors.Is(err, nats.ErrConnectionClosed):
		return fmt.Errorf("%w (%w)", wrapped, outbox.ErrClosed)
	}
	return wrapped
}

// Close closes the connection if New opened it (a Conn from Config stays open).
// Publish after Close fails with outbox.ErrClosed. Close is idempotent. Close of a
// Publisher not made by New returns a *skiplock.ValidationError.
func (p *Publisher) Close() error {
	if p == nil || p.js == nil {
		return &skiplock.ValidationError{Field: "natspub.Publisher", Reason: "not made by natspub.New"}
	}
	if p.closed.Swap(true) {
		return nil
	}
	if p.ownConn {
		p.nc.Close()
	}
	return nil
}
