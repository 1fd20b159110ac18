package amqppub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest"
)

// The tests need a RabbitMQ broker: scripts/rabbitmq.sh start runs one locally.
// SKIPLOCK_TEST_AMQP_URL points them elsewhere; without a broker they skip, unless
// SKIPLOCK_REQUIRE_BROKERS=1, when they fail.

const defaultTestURL = "amqp://guest:guest@127.0.0.1:5672/"

var (
	probeOnce sync.Once
	probeErr  error
)

func brokerURL(tb testing.TB) string {
	tb.Helper()
	url := os.Getenv("SKIPLOCK_TEST_AMQP_URL")
	if url == "" {
		url = defaultTestURL
	}
	probeOnce.Do(func() {
		conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			probeErr = err
			return
		}
		_ = conn.Close()
	})
	if probeErr != nil {
		msg := fmt.Sprintf("RabbitMQ not reachable at %s (%v); run scripts/rabbitmq.sh start or set SKIPLOCK_TEST_AMQP_URL", url, probeErr)
		if os.Getenv("SKIPLOCK_REQUIRE_BROKERS") == "1" {
			tb.Fatal(msg + " (SKIPLOCK_REQUIRE_BROKERS=1, so this is a failure)")
		}
		tb.Skip(msg)
	}
	return url
}

// admin is a separate connection the tests use to declare, read and delete queues.
type admin struct {
	conn *amqp.Connection
}

func newAdmin(tb testing.TB) *admin {
	tb.Helper()
	conn, err := amqp.Dial(brokerURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return &admin{conn: conn}
}

var queueSeq atomic.Int64

// queue declares a uniquely named queue and deletes it when the test ends.
func (a *admin) queue(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("skiplock-test-%s-%d-%d", strings.ReplaceAll(tb.Name(), "/", "."), os.Getpid(), queueSeq.Add(1))
	ch, err := a.conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ch, err := a.conn.Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		_, _ = ch.QueueDelete(name, false, false, false)
	})
	return name
}

// receive consumes from queue until done or the deadline.
func (a *admin) receive(tb testing.TB, queue string, deadline time.Time, done func([]amqp.Delivery) bool) []amqp.Delivery {
	tb.Helper()
	ch, err := a.conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	defer ch.Close()
	deliveries, err := ch.Consume(queue, "", true, true, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var got []amqp.Delivery
	for !done(got) {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return got
			}
			got = append(got, d)
		case <-timer.C:
			return got
		}
	}
	return got
}

func toReceived(d amqp.Delivery) outboxtest.Received {
	h := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			h[k] = s
		}
	}
	return outboxtest.Received{ID: d.MessageId, Destination: d.RoutingKey, Payload: d.Body, Headers: h}
}

func newPub(tb testing.TB, cfg Config) *Publisher {
	tb.Helper()
	if cfg.URL == "" {
		cfg.URL = brokerURL(tb)
	}
	p, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	a := newAdmin(t)
	outboxtest.RunConformance(t, outboxtest.Harness{
		NewPublisher: func(t *testing.T) outbox.Publisher {
			p, err := New(Config{URL: brokerURL(t)})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewDestination: func(t *testing.T) string { return a.queue(t) },
		Receive: func(t *testing.T, dest string, deadline time.Time, done func([]outboxtest.Received) bool) []outboxtest.Received {
			var out []outboxtest.Received
			a.receive(t, dest, deadline, func(ds []amqp.Delivery) bool {
				for _, d := range ds[len(out):] {
					out = append(out, toReceived(d))
				}
				return done(out)
			})
			return out
		},
	})
}

func TestProperties(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := a.queue(t)
	p := newPub(t, Config{})
	m := outboxtest.NewMessage(q, 3)
	if err := p.Publish(ctxFor(t), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	ds := a.receive(t, q, time.Now().Add(20*time.Second), func(ds []amqp.Delivery) bool { return len(ds) == 1 })
	if len(ds) != 1 {
		t.Fatalf("received %d messages", len(ds))
	}
	d := ds[0]
	if d.DeliveryMode != amqp.Persistent {
		t.Errorf("delivery mode %d, want persistent", d.DeliveryMode)
	}
	if d.ContentType != "application/json" || d.Type != m.EventType || d.MessageId != m.ID {
		t.Errorf("properties: content-type %q type %q message-id %q", d.ContentType, d.Type, d.MessageId)
	}
	if !d.Timestamp.Equal(m.CreatedAt) {
		t.Errorf("timestamp %v, want %v", d.Timestamp, m.CreatedAt)
	}
	if d.Headers["skiplock-aggregate-type"] != m.AggregateType || d.Headers["skiplock-aggregate-id"] != m.AggregateID {
		t.Errorf("aggregate headers: %v", d.Headers)
	}
}

func TestUnroutableIsRetryableError(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := a.queue(t)
	p := newPub(t, Config{})
	msgs := []outbox.Message{
		outboxtest.NewMessage(q, 1),
		outboxtest.NewMessage(fmt.Sprintf("no-such-queue-%d-%d", os.Getpid(), queueSeq.Add(1)), 2),
		outboxtest.NewMessage(q, 3),
	}
	errs := p.Publish(ctxFor(t), msgs)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("routable messages failed: %v, %v", errs[0], errs[2])
	}
	if errs[1] == nil {
		t.Fatal("unroutable mandatory message reported as published")
	}
	if errors.As(errs[1], new(*skiplock.PermanentError)) || !strings.Contains(errs[1].Error(), "NO_ROUTE") {
		t.Fatalf("got %v, want a retryable error naming NO_ROUTE", errs[1])
	}
	// The channel is still usable.
	if err := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage(q, 4)})[0]; err != nil {
		t.Fatal(err)
	}
}

func TestExchangeAndDefaultRoutingKey(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := a.queue(t)
	exchange := q + ".x"
	ch, err := a.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := a.conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(exchange, false, false)
			_ = ch.Close()
		}
	})
	if err := ch.QueueBind(q, "orders", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	p := newPub(t, Config{Exchange: exchange, DefaultRoutingKey: "orders"})
	explicit, implicit := outboxtest.NewMessage("orders", 1), outboxtest.NewMessage("", 2)
	for i, err := range p.Publish(ctxFor(t), []outbox.Message{explicit, implicit}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	ds := a.receive(t, q, time.Now().Add(20*time.Second), func(ds []amqp.Delivery) bool { return len(ds) == 2 })
	if len(ds) != 2 || ds[0].Exchange != exchange || ds[1].RoutingKey != "orders" {
		t.Fatalf("got %d deliveries: %+v", len(ds), ds)
	}
}

func TestNoDestination(t *testing.T) {
	t.Parallel()
	p := newPub(t, Config{})
	err := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("", 1)})[0]
	if !errors.As(err, new(*skiplock.PermanentError)) || !strings.Contains(err.Error(), "DefaultRoutingKey") {
		t.Fatalf("got %v, want a permanent error naming DefaultRoutingKey", err)
	}
}

// TestChannelErrorRecovers publishes to an exchange that does not exist yet: the
// broker closes the channel, Publish fails, and once the exchange exists the next
// Publish opens a new channel and succeeds.
func TestChannelErrorRecovers(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := a.queue(t)
	exchange := q + ".late"
	p := newPub(t, Config{Exchange: exchange})
	m := outboxtest.NewMessage(q, 1)
	for i, err := range p.Publish(ctxFor(t), []outbox.Message{m, outboxtest.NewMessage(q, 2)}) {
		if err == nil {
			t.Fatalf("message %d published to a missing exchange", i)
		}
	}
	ch, err := a.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := a.conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(exchange, false, false)
			_ = ch.Close()
		}
	})
	if err := ch.QueueBind(q, q, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctxFor(t), []outbox.Message{m})[0]; err != nil {
		t.Fatalf("after the exchange exists: %v", err)
	}
	p.mu.Lock()
	dials := p.dials
	p.mu.Unlock()
	if dials != 1 {
		t.Errorf("dialled %d times; a channel error should not need a new connection", dials)
	}
}

// proxy forwards TCP connections to the broker and can cut them all, which the
// client sees as a lost connection.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.cut() })
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func proxiedURL(t *testing.T) (string, *proxy) {
	uri, err := amqp.ParseURI(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port)))
	host, port, _ := net.SplitHostPort(px.ln.Addr().String())
	uri.Host = host
	fmt.Sscan(port, &uri.Port)
	return uri.String(), px
}

func TestReconnectAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := a.queue(t)
	url, px := proxiedURL(t)
	p := newPub(t, Config{URL: url})
	first := outboxtest.NewMessage(q, 1)
	if err := p.Publish(ctxFor(t), []outbox.Message{first})[0]; err != nil {
		t.Fatal(err)
	}

	px.cut()
	// Wait until the client has noticed, then the next Publish must redial.
	lost := outboxtest.WaitFor(20*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.conn.IsClosed()
	})
	if !lost {
		t.Fatal("client did not notice the cut connection")
	}
	second := outboxtest.NewMessage(q, 2)
	if err := p.Publish(ctxFor(t), []outbox.Message{second})[0]; err != nil {
		t.Fatalf("publish after connection loss: %v", err)
	}
	p.mu.Lock()
	dials := p.dials
	p.mu.Unlock()
	if dials != 2 {
		t.Errorf("dialled %d times, want 2", dials)
	}
	ds := a.receive(t, q, time.Now().Add(20*time.Second), func(ds []amqp.Delivery) bool { return len(ds) == 2 })
	if len(ds) != 2 || ds[0].MessageId != first.ID || ds[1].MessageId != second.ID {
		t.Fatalf("queue holds %d messages, want %s then %s", len(ds), first.ID, second.ID)
	}
}

// TestPublishRightAfterCut publishes without waiting for the client to notice the
// cut: attempts may fail, but each returns, and a later one succeeds.
func TestPublishRightAfterCut(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := a.queue(t)
	url, px := proxiedURL(t)
	p := newPub(t, Config{URL: url, Timeout: 3 * time.Second})
	if err := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage(q, 1)})[0]; err != nil {
		t.Fatal(err)
	}
	px.cut()
	var attempts int
	ok := outboxtest.WaitFor(30*time.Second, func() bool {
		attempts++
		err := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage(q, 2)})[0]
		if err != nil && errors.As(err, new(*skiplock.PermanentError)) {
			t.Fatalf("connection loss gave a permanent error: %v", err)
		}
		return err == nil
	})
	if !ok {
		t.Fatalf("no publish succeeded after %d attempts", attempts)
	}
}

func TestBrokerDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	p := newPub(t, Config{URL: "amqp://guest:guest@" + addr + "/", Timeout: 2 * time.Second})
	errs := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("q", 1), outboxtest.NewMessage("q", 2)})
	for i, err := range errs {
		if err == nil || errors.As(err, new(*skiplock.PermanentError)) || !strings.Contains(err.Error(), "connecting") {
			t.Errorf("message %d: got %v, want a retryable connecting error", i, err)
		}
	}
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.URL: empty"},
		{Config{URL: "http://localhost"}, "not a valid AMQP URI"},
		{Config{URL: defaultTestURL, Timeout: -1}, "negative"},
	} {
		if _, err := New(c.cfg); !errors.Is(err, skiplock.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error mentioning %q", c.cfg, err, c.want)
		}
	}
	if _, err := New(Config{URL: defaultTestURL}); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

func TestCloseWithoutPublish(t *testing.T) {
	t.Parallel()
	p, err := New(Config{URL: defaultTestURL})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(context.Background(), []outbox.Message{outboxtest.NewMessage("q", 1)})[0]; !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

func BenchmarkPublish(b *testing.B) {
	a := newAdmin(b)
	q := a.queue(b)
	p := newPub(b, Config{})
	const batch = 100
	msgs := make([]outbox.Message, batch)
	for i := range msgs {
		msgs[i] = outboxtest.NewMessage(q, i)
	}
	ctx := context.Background()
	purge, err := a.conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer purge.Close()
	n := 0
	for b.Loop() {
		for i, err := range p.Publish(ctx, msgs) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
		if n++; n%100 == 0 {
			b.StopTimer()
			_, _ = purge.QueuePurge(q, false)
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
}

// With no Logger, the publisher logs to slog.Default() at Warn and above (a lost
// channel), not to a discard handler.
func TestNilLoggerIsSlogDefault(t *testing.T) {
	t.Parallel()
	p, err := New(Config{URL: defaultTestURL})
	if err != nil {
		t.Fatal(err)
	}
	if !p.log.Enabled(context.Background(), slog.LevelWarn) || p.log.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("the default logger is not slog.Default() at Warn")
	}
}
