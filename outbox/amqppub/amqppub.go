// Package amqppub publishes outbox events to RabbitMQ (AMQP 0-9-1).
//
// Every message is published to Config.Exchange with Message.Destination as the
// routing key (Config.DefaultRoutingKey when Destination is empty). With the
// default exchange (Config.Exchange == ""), the routing key is the name of the
// queue the message goes to.
//
// A message counts as published only when the broker has confirmed it and has not
// returned it:
//
//   - the channel is in confirm mode, so the broker acks a message once it has taken
//     responsibility for it (for a durable queue: written it to disk or, for a
//     quorum queue, replicated it to a majority);
//   - messages are persistent (delivery mode 2), so a durable queue keeps them
//     across a broker restart;
//   - messages are mandatory, so one that no queue receives comes back as a
//     basic.return, which Publish reports as a retryable error naming the broker's
//     reply text (e.g. NO_ROUTE), instead of being silently dropped.
//
// A batch is published in full before the confirms are awaited, so the cost of the
// broker round trip is paid once per batch, not once per message.
//
// The AMQP properties carry the event: message-id is Message.ID (consumers
// deduplicate on it), type is Message.EventType, timestamp is Message.CreatedAt,
// content-type is application/json. The headers table holds Message.Headers plus
// skiplock-aggregate-type and skiplock-aggregate-id.
//
// The connection is opened on the first Publish, not by New, and reopened by the
// next Publish after it is lost, so a broker outage surfaces as retryable errors and
// heals by itself. Config.URL's user name and password never appear in errors or
// logs.
package amqppub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/failures"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/redact"
	"github.com/skiplock/skiplock/outbox"
)

// Config configures a Publisher.
type Config struct {
	// URL is the broker's AMQP URI, e.g. "amqp://user:pass@rabbit:5672/vhost"
	// (amqps:// for TLS). Required; there is no default.
	URL string

	// Exchange is the exchange every message is published to. It must already
	// exist (declare it durable). Default: "" (the default exchange, where the
	// routing key is a queue name).
	Exchange string

	// DefaultRoutingKey is the routing key for messages whose Destination is empty.
	// Default: "" (such messages fail permanently).
	DefaultRoutingKey string

	// Timeout bounds one Publish call (publishing the batch and waiting for its
	// confirms) when the caller's context has no earlier deadline, and each dial.
	// Default: 30s.
	Timeout time.Duration

	// AMQPConfig is passed to amqp.DialConfig, for TLS, SASL, heartbeats and client
	// properties. Default: nil (amqp091-go's defaults, a 10s heartbeat and the
	// connection name "skiplock-outbox").
	AMQPConfig *amqp.Config

	// Logger receives a lost channel at warn level, dials at info level and failed
	// publishes at debug level. Default: slog.Default() at level Warn
	// and above, as skiplock.Config.Logger and outbox.RelayConfig.Logger, so the
	// debug lines stay quiet until you pass a logger of your own.
	Logger *slog.Logger
}

// Publisher publishes outbox messages over one AMQP channel in confirm mode. It is
// safe for concurrent use; concurrent Publish calls take turns on the channel.
// Create it with New.
type Publisher struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex // guards everything below and serialises Publish
	closed   bool
	conn     *amqp.Connection
	ch       *amqp.Channel
	chClosed chan *amqp.Error // NotifyClose of ch
	returns  chan amqp.Return // NotifyReturn of ch
	dials    int
}

var _ outbox.Publisher = (*Publisher)(nil)

// New validates cfg and returns a Publisher. It does not connect: the first
// Publish does. An unusable cfg returns a *skiplock.ValidationError
// (errors.Is(err, skiplock.ErrInvalid)).
func New(cfg Config) (*Publisher, error) {
	if cfg.URL == "" {
		return nil, &skiplock.ValidationError{Field: "amqppub.Config.URL", Reason: "empty; set it to the broker's URI, e.g. amqp://guest:guest@localhost:5672/"}
	}
	if _, err := amqp.ParseURI(cfg.URL); err != nil {
		return nil, &skiplock.ValidationError{Field: "amqppub.Config.URL", Reason: fmt.Sprintf(
			"%q is not a valid AMQP URI (want amqp://user:pass@host:port/vhost): %v", redact.URL(cfg.URL), redact.Error(err, cfg.URL))}
	}
	if cfg.Timeout < 0 {
		return nil, &skiplock.ValidationError{Field: "amqppub.Config.Timeout", Reason: "negative; use 0 for the default"}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	p := &Publisher{cfg: cfg, log: failures.Logger(cfg.Logger)}
	return p, nil
}

// connect makes sure p has a live channel in confirm mode, dialling if needed.
// p.mu must be held.
func (p *Publisher) connect() error {
	if p.ch != nil {
		select {
		case err := <-p.chClosed:
			p.log.Warn("amqppub: channel closed; redialling", "err", err)
			p.dropLocked()
		default:
			if p.ch.IsClosed() || p.conn.IsClosed() {
				p.dropLocked()
			}
		}
	}
	if p.ch != nil {
		return nil
	}
	if p.conn == nil || p.conn.IsClosed() {
		cfg := amqp.Config{}
		if p.cfg.AMQPConfig != nil {
			cfg = *p.cfg.AMQPConfig
		}
		if cfg.Heartbeat == 0 {
			cfg.Heartbeat = 10 * time.Second
		}
		if cfg.Properties == nil {
			cfg.Properties = amqp.NewConnectionProperties()
			cfg.Properties.SetClientConnectionName("skiplock-outbox")
		}
		if cfg.Dial == nil {
			cfg.Dial = amqp.DefaultDial(p.cfg.Timeout)
		}
		conn, err := amqp.DialConfig(p.cfg.URL, cfg)
		if err != nil {
			return fmt.Errorf("amqppub: connecting to %s: %w", redact.URL(p.cfg.URL), redact.Error(err, p.cfg.URL))
		}
		p.conn = conn
		p.dials++
		p.log.Info("amqppub: connected", "dials", p.dials)
	}
	ch, err := p.conn.Channel()
	if err != nil {
		_ = p.conn.Close()
		p.conn = nil
		return fmt.Errorf("amqppub: opening channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return fmt.Errorf("amqppub: enabling publisher confirms: %w", err)
	}
	p.ch = ch
	p.chClosed = ch.NotifyClose(make(chan *amqp.Error, 1))
	// Returns are read while confirms are awaited; the buffer absorbs a burst
	// without stalling the connection's reader.
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 256))
	return nil
}

// dropLocked discards the channel (and the connection if it is dead) so the next
// Publish starts afresh. p.mu must be held.
func (p *Publisher) dropLocked() {
	if p.ch != nil {
		_ = p.ch.Close()
	}
	p.ch, p.chClosed, p.returns = nil, nil, nil
	if p.conn != nil && p.conn.IsClosed() {
		p.conn = nil
	}
}

// Publish publishes msgs, waits for the broker's confirms and returns one error per
// message, in order. A nacked or returned message gets a retryable error. A nil
// context or a Publisher not made by New fails every message with an error wrapping
// skiplock.ErrInvalid.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	if p == nil || p.log == nil || ctx == nil {
		return outbox.FailAll(errs, &skiplock.ValidationError{Field: "amqppub.Publisher", Reason: "nil context, or a Publisher not made by amqppub.New"})
	}
	fill := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fill(fmt.Errorf("amqppub: %w", outbox.ErrClosed))
	}
	if err := ctx.Err(); err != nil {
		return fill(fmt.Errorf("amqppub: publishing: %w", err))
	}
	if err := p.connect(); err != nil {
		p.log.Debug("amqppub: no channel", "err", err)
		return fill(err)
	}
	// Returns left over from an earlier, abandoned batch are stale.
	p.drainReturns(nil)

	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	byID := make(map[string][]int, len(msgs))
	returned := make(map[int]amqp.Return)
	now := hostclock.Now()
	for i := range msgs {
		m := &msgs[i]
		key := m.Destination
		if key == "" {
			key = p.cfg.DefaultRoutingKey
		}
		if key == "" && p.cfg.Exchange == "" {
			errs[i] = skiplock.Permanent(errors.New("amqppub: message has no destination and Config.DefaultRoutingKey is not set"))
			continue
		}
		pub := amqp.Publishing{
			Headers:      headers(m),
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			MessageId:    m.ID,
			Timestamp:    m.CreatedAt,
			Type:         m.EventType,
			Body:         m.Payload,
		}
		if pub.Timestamp.IsZero() {
			pub.Timestamp = now
		}
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, key, true, false, pub)
		if err != nil {
			errs[i] = fmt.Errorf("amqppub: publishing %s: %w", m.ID, err)
			if p.ch.IsClosed() || ctx.Err() != nil {
				// Nothing after this can succeed on this channel.
				p.dropLocked()
				return fill(errs[i])
			}
			continue
		}
		confirms[i] = dc
		byID[m.ID] = append(byID[m.ID], i)
		// Keep the return buffer from filling while a large batch goes out.
		p.drainReturns(func(r amqp.Return) { p.noteReturn(r, byID, returned) })
	}

	for i, dc := range confirms {
		if dc == nil {
			continue
		}
	wait:
		for {
			select {
			case <-dc.Done():
				break wait
			case r := <-p.returns:
				p.noteReturn(r, byID, returned)
			case <-ctx.Done():
				// The channel's state is now unknown; start the next batch afresh.
				p.log.Debug("amqppub: gave up waiting for confirms", "err", ctx.Err())
				p.dropLocked()
				err := fmt.Errorf("amqppub: waiting for confirm of %s: %w", msgs[i].ID, ctx.Err())
				for j := i; j < len(confirms); j++ {
					if confirms[j] != nil && !confirms[j].Acked() {
						errs[j] = err
					}
				}
				// Still report returns that arrived for messages acked earlier.
				for j, r := range returned {
					errs[j] = returnError(msgs[j].ID, r)
				}
				return errs
			}
		}
		if !dc.Acked() {
			if p.ch != nil && (p.ch.IsClosed() || p.conn.IsClosed()) {
				errs[i] = fmt.Errorf("amqppub: publishing %s: connection lost before confirm", msgs[i].ID)
			} else {
				errs[i] = fmt.Errorf("amqppub: publishing %s: broker nacked the message", msgs[i].ID)
			}
		}
	}
	// The broker sends basic.return before the ack of the same message, and the
	// client hands returns to p.returns before it processes later acks, so every
	// return for this batch is in the channel by now.
	p.drainReturns(func(r amqp.Return) { p.noteReturn(r, byID, returned) })
	for i, r := range returned {
		errs[i] = returnError(msgs[i].ID, r)
	}
	for i, err := range errs {
		if err != nil {
			p.log.Debug("amqppub: publish failed", "id", msgs[i].ID, "err", err)
		}
	}
	if p.ch != nil && p.ch.IsClosed() {
		p.dropLocked()
	}
	return errs
}

func (p *Publisher) noteReturn(r amqp.Return, byID map[string][]int, returned map[int]amqp.Return) {
	idx := byID[r.MessageId]
	if len(idx) == 0 {
		return
	}
	// A batch may carry one id twice; mark one occurrence per return.
	returned[idx[0]] = r
	byID[r.MessageId] = idx[1:]
}

func (p *Publisher) drainReturns(fn func(amqp.Return)) {
	for {
		select {
		case r, ok := <-p.returns:
			if !ok {
				return
			}
			if fn != nil {
				fn(r)
			}
		default:
			return
		}
	}
}

func returnError(id string, r amqp.Return) error {
	return fmt.Errorf("amqppub: publishing %s: broker returned it unrouted (%d %s) from exchange %q with routing key %q; bind a queue for that key",
		id, r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
}

func headers(m *outbox.Message) amqp.Table {
	t := make(amqp.Table, len(m.Headers)+2)
	for k, v := range m.Headers {
		t[k] = v
	}
	t["skiplock-aggregate-type"] = m.AggregateType
	t["skiplock-aggregate-id"] = m.AggregateID
	return t
}

// Close closes the channel and the connection. Publish after Close fails with
// outbox.ErrClosed. Close waits for a Publish in progress and is idempotent. Close
// of a Publisher not made by New returns a *skiplock.ValidationError.
func (p *Publisher) Close() error {
	if p == nil || p.log == nil {
		return &skiplock.ValidationError{Field: "amqppub.Publisher", Reason: "not made by amqppub.New"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var err error
	if p.ch != nil {
		_ = p.ch.Close()
	}
	if p.conn != nil && !p.conn.IsClosed() {
		if cerr := p.conn.Close(); cerr != nil && !errors.Is(cerr, amqp.ErrClosed) {
			err = fmt.Errorf("amqppub: closing connection: %w", cerr)
		}
	}
	p.ch, p.conn = nil, nil
	return err
}
