package natspub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest"
)

// runServer starts an in-process nats-server with JetStream on a random port.
func runServer(tb testing.TB, tweak func(*server.Options)) *server.Server {
	tb.Helper()
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  tb.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	if tweak != nil {
		tweak(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		tb.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		tb.Fatal("nats-server did not start")
	}
	tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// env is a test's view of one server: an admin connection and stream helpers.
type env struct {
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newEnv(tb testing.TB, tweak func(*server.Options)) *env {
	tb.Helper()
	s := runServer(tb, tweak)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return &env{srv: s, nc: nc, js: js}
}

var streamSeq atomic.Int64

// subject creates a stream capturing one fresh subject and returns the subject.
func (e *env) subject(tb testing.TB) string {
	tb.Helper()
	n := streamSeq.Add(1)
	subject := fmt.Sprintf("skiplock.test.%d", n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       streamName(subject),
		Subjects:   []string{subject},
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	}); err != nil {
		tb.Fatal(err)
	}
	return subject
}

func streamName(subject string) string { return strings.ReplaceAll(subject, ".", "_") }

// read fetches the subject's stream from the start until done or the deadline.
func (e *env) read(tb testing.TB, subject string, deadline time.Time, done func([]jetstream.Msg) bool) []jetstream.Msg {
	tb.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cons, err := e.js.OrderedConsumer(ctx, streamName(subject), jetstream.OrderedConsumerConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	var got []jetstream.Msg
	for !done(got) {
		wait := min(time.Until(deadline), time.Second)
		if wait <= 0 {
			break
		}
		// FetchNoWait returns at once with what the stream has; block on Next
		// only when it had nothing.
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			tb.Fatal(err)
		}
		n := len(got)
		for m := range batch.Messages() {
			got = append(got, m)
		}
		if len(got) > n {
			continue
		}
		m, err := cons.Next(jetstream.FetchMaxWait(wait))
		if err == nil {
			got = append(got, m)
		} else if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			tb.Fatal(err)
		}
	}
	return got
}

func (e *env) pub(tb testing.TB, cfg Config) *Publisher {
	tb.Helper()
	if cfg.URL == "" && cfg.Conn == nil {
		cfg.URL = e.srv.ClientURL()
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
	e := newEnv(t, nil)
	outboxtest.RunConformance(t, outboxtest.Harness{
		NewPublisher: func(t *testing.T) outbox.Publisher {
			p, err := New(Config{URL: e.srv.ClientURL()})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewDestination: func(t *testing.T) string { return e.subject(t) },
		Receive: func(t *testing.T, dest string, deadline time.Time, done func([]outboxtest.Received) bool) []outboxtest.Received {
			var out []outboxtest.Received
			e.read(t, dest, deadline, func(ms []jetstream.Msg) bool {
				for _, m := range ms[len(out):] {
					h := make(map[string]string, len(m.Headers()))
					for k, v := range m.Headers() {
						h[k] = v[0]
					}
					out = append(out, outboxtest.Received{ID: h[jetstream.MsgIDHeader], Destination: m.Subject(), Payload: m.Data(), Headers: h})
				}
				return done(out)
			})
			return out
		},
		Dedups: true,
	})
}

func TestDuplicateAcknowledgedNotStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	subject := e.subject(t)
	p := e.pub(t, Config{})
	m := outboxtest.NewMessage(subject, 1)
	// The same event three times, twice within one batch.
	for i, err := range p.Publish(ctxFor(t), []outbox.Message{m, m}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := p.Publish(ctxFor(t), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	s, err := e.js.Stream(ctxFor(t), streamName(subject))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	subject := e.subject(t)
	p := e.pub(t, Config{})
	m := outboxtest.NewMessage(subject, 1)
	m.Headers["Nats-Msg-Id"] = "forged"
	m.Headers["Nats-Expected-Stream"] = "some-other-stream" // would make the publish fail if sent
	m.Headers["MixedCase-Name"] = "kept"
	if err := p.Publish(ctxFor(t), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	ms := e.read(t, subject, time.Now().Add(10*time.Second), func(ms []jetstream.Msg) bool { return len(ms) == 1 })
	if len(ms) != 1 {
		t.Fatalf("got %d messages", len(ms))
	}
	h := ms[0].Headers()
	want := map[string]string{
		jetstream.MsgIDHeader: m.ID, HeaderEventType: m.EventType, HeaderAggregateType: m.AggregateType,
		HeaderAggregateID: m.AggregateID, "MixedCase-Name": "kept", "x-tenant": "acme",
	}
	for k, v := range want {
		if got := h[k]; len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %v, want [%s]", k, got, v)
		}
	}
	if _, ok := h["Nats-Expected-Stream"]; ok {
		t.Error("user Nats-* header was passed to the server")
	}
}

func TestNoStreamIsRetryable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	p := e.pub(t, Config{Timeout: 10 * time.Second})
	err := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("nobody.listens", 1)})[0]
	if err == nil || errors.As(err, new(*skiplock.PermanentError)) || !strings.Contains(err.Error(), "stream") {
		t.Fatalf("got %v, want a retryable error about the stream", err)
	}
}

func TestTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *server.Options) { o.MaxPayload = 1024 })
	subject := e.subject(t)
	p := e.pub(t, Config{})
	big := outboxtest.NewMessage(subject, 1)
	big.Payload = []byte(`"` + strings.Repeat("x", 4096) + `"`)
	errs := p.Publish(ctxFor(t), []outbox.Message{big, outboxtest.NewMessage(subject, 2)})
	if !errors.As(errs[0], new(*skiplock.PermanentError)) || !errors.Is(errs[0], nats.ErrMaxPayload) {
		t.Errorf("too large: got %v, want a permanent ErrMaxPayload", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("small message: %v", errs[1])
	}
}

func TestDefaultSubjectAndNoDestination(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	subject := e.subject(t)
	if err := e.pub(t, Config{DefaultSubject: subject}).Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("", 1)})[0]; err != nil {
		t.Fatal(err)
	}
	if ms := e.read(t, subject, time.Now().Add(10*time.Second), func(ms []jetstream.Msg) bool { return len(ms) == 1 }); len(ms) != 1 || ms[0].Subject() != subject {
		t.Fatalf("default subject: got %d messages", len(ms))
	}
	err := e.pub(t, Config{}).Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("", 2)})[0]
	if !errors.As(err, new(*skiplock.PermanentError)) || !strings.Contains(err.Error(), "DefaultSubject") {
		t.Fatalf("got %v, want a permanent error naming DefaultSubject", err)
	}
}

func TestSharedConnStaysOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	subject := e.subject(t)
	p := e.pub(t, Config{Conn: e.nc})
	if err := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage(subject, 1)})[0]; err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if e.nc.IsClosed() {
		t.Fatal("Close closed a connection the Publisher did not open")
	}
}

// TestServerRestart stops the server and starts a new one on the same port and
// store: the client reconnects by itself and publishing resumes.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	s := runServer(t, func(o *server.Options) { o.StoreDir = store })
	port := s.Addr().(*net.TCPAddr).Port
	url := s.ClientURL()
	e := &env{srv: s}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if e.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	subject := e.subject(t)
	p := e.pub(t, Config{URL: url, Timeout: 5 * time.Second, Options: []nats.Option{nats.ReconnectWait(20 * time.Millisecond)}})
	if err := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage(subject, 1)})[0]; err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	runServer(t, func(o *server.Options) { o.StoreDir = store; o.Port = port })
	ok := outboxtest.WaitFor(30*time.Second, func() bool {
		return p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage(subject, 2)})[0] == nil
	})
	if !ok {
		t.Fatal("publishing did not resume after the server came back")
	}
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.URL"},
		{Config{URL: "nats://127.0.0.1:4222", Timeout: -1}, "negative"},
		{Config{URL: "nats://127.0.0.1:4222", MaxPending: -1}, "negative"},
	} {
		if _, err := New(c.cfg); !errors.Is(err, skiplock.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error mentioning %q", c.cfg, err, c.want)
		}
	}
}

func BenchmarkPublish(b *testing.B) {
	e := newEnv(b, nil)
	subject := e.subject(b)
	p := e.pub(b, Config{})
	const batch = 100
	msgs := make([]outbox.Message, batch)
	ctx := context.Background()
	for b.Loop() {
		// Fresh ids each round, or the stream would deduplicate them away.
		b.StopTimer()
		for i := range msgs {
			msgs[i] = outboxtest.NewMessage(subject, i)
		}
		b.StartTimer()
		for i, err := range p.Publish(ctx, msgs) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
}

// With no Logger, the publisher logs to slog.Default() at Warn and above, not to a
// discard handler.
func TestNilLoggerIsSlogDefault(t *testing.T) {
	t.Parallel()
	p := newEnv(t, nil).pub(t, Config{})
	if !p.log.Enabled(context.Background(), slog.LevelWarn) || p.log.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("the default logger is not slog.Default() at Warn")
	}
}
