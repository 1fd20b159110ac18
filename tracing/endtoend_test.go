package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/amqppub"
	"github.com/skiplock/skiplock/outbox/kafkapub"
	"github.com/skiplock/skiplock/outbox/natspub"
	"github.com/skiplock/skiplock/outbox/webhookpub"
	"github.com/skiplock/skiplock/tracing"
)

// broker is one destination of the end-to-end test: a wrapped publisher, and a way
// to read back the traceparent of the message it published.
type broker struct {
	system string // messaging.system of its publish span
	dest   string // outbox Event.Destination
	pub    outbox.Publisher
	// traceparent reads the published message back from the broker.
	traceparent func(t *testing.T, ctx context.Context) string
	skip        string // why the broker is not available, or ""
}

// router sends each message to the publisher of its destination: one relay feeds
// every broker of the test.
type router map[string]outbox.Publisher

func (r router) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	byDest := map[string][]int{}
	for i, m := range msgs {
		byDest[m.Destination] = append(byDest[m.Destination], i)
	}
	for dest, idx := range byDest {
		pub, ok := r[dest]
		if !ok {
			for _, i := range idx {
				errs[i] = skiplock.Permanent(fmt.Errorf("no publisher for %q", dest))
			}
			continue
		}
		batch := make([]outbox.Message, len(idx))
		for j, i := range idx {
			batch[j] = msgs[i]
		}
		res := pub.Publish(ctx, batch)
		for j, i := range idx {
			if len(res) != len(batch) {
				errs[i] = fmt.Errorf("%d results for %d messages", len(res), len(batch))
			} else {
				errs[i] = res[j]
			}
		}
	}
	return errs
}

func (r router) Close() error {
	var errs []error
	for _, p := range r {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// ONE trace, from a request span in the test through an enqueue, two attempts of
// the job (the first fails), the outbox events the second attempt writes, the
// relay's publish spans, to the message on each broker — Kafka (kfake), RabbitMQ
// (scripts/rabbitmq.sh; skipped when unreachable unless SKIPLOCK_REQUIRE_BROKERS=1),
// NATS JetStream (in-process) and a webhook — where a consumer continues it.
func TestOneTraceFromEnqueueToBrokers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp, exp := newTP(t)
	tracer := tp.Tracer("test")
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)

	brokers := []*broker{kafkaBroker(t, tp), rabbitBroker(t, tp), natsBroker(t, tp), webhookBroker(t, tp)}
	routes := router{}
	for _, b := range brokers {
		if b.skip == "" {
			routes[b.dest] = b.pub
		}
	}
	t.Cleanup(func() { _ = routes.Close() })

	// The job: the first attempt fails; the second writes one outbox event per broker
	// in its own transaction, each stamped with the attempt's trace context.
	var ob *outbox.Outbox
	workers := skiplock.NewWorkers()
	err := workers.AddHandler("order.confirm", func(ctx context.Context, job *skiplock.Job) error {
		if job.Attempt == 1 {
			return errors.New("payment service unavailable")
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, b := range brokers {
				if b.skip != "" {
					continue
				}
				ev := outbox.Event{AggregateType: "order", AggregateID: "42", EventType: "order.confirmed",
					Destination: b.dest, Payload: []byte(`{"order":42}`), Headers: map[string]string{"x-tenant": "acme"}}
				tracing.InjectEvent(ctx, &ev)
				if _, err := ob.Write(ctx, tx, ev); err != nil {
					return err
				}
			}
			return nil
		})
	}, &skiplock.WorkerOpts{MaxAttempts: 3, RetryPolicy: noDelay{}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{
		Schema:       schema,
		Queues:       map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}},
		Workers:      workers,
		PollInterval: 20 * time.Millisecond,
		EnqueueHooks: []skiplock.EnqueueHook{tracing.EnqueueHook(tp)},
		Middleware:   []skiplock.Middleware{tracing.Middleware(tp)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ob, err = outbox.New(client, outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	events, unsubscribe := client.Subscribe()
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := client.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})

	// The request that enqueues the job.
	rctx, req := tracer.Start(ctx, "POST /orders/42/confirm", trace.WithSpanKind(trace.SpanKindServer))
	res, err := client.EnqueueRaw(rctx, "order.confirm", []byte(`{"order":42}`), nil)
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	traceID := req.SpanContext().TraceID()
	for _, want := range []skiplock.EventKind{skiplock.EventRetried, skiplock.EventSucceeded} {
		select {
		case ev := <-events:
			if ev.Kind != want || ev.Job.ID != res.ID {
				t.Fatalf("event %s for job %s, want %s for %s (error %v)", ev.Kind, ev.Job.ID, want, res.ID, ev.Err)
			}
		case <-ctx.Done():
			t.Fatalf("no %s event", want)
		}
	}

	relay, err := ob.NewRelay(routes, outbox.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	published, failed, err := relay.RunOnce(ctx)
	if err != nil || published != len(routes) || failed != 0 {
		t.Fatalf("relay: published %d failed %d err %v, want %d published", published, failed, err, len(routes))
	}

	// Each broker: read the message back and continue its trace as a consumer would.
	got := map[string]string{} // system → the message's traceparent
	for _, b := range brokers {
		if b.skip != "" {
			continue
		}
		tparent := b.traceparent(t, ctx)
		got[b.system] = tparent
		cctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tparent})
		_, span := tracer.Start(cctx, "consume "+b.system, trace.WithSpanKind(trace.SpanKindConsumer))
		span.End()
	}

	spans := exp.GetSpans()
	logTrace(t, spans)

	enq := spanNamed(t, exp, "skiplock.enqueue order.confirm")
	var attempts, publishes []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanContext.TraceID() != traceID {
			t.Errorf("%s is in trace %s, want %s", s.Name, s.SpanContext.TraceID(), traceID)
		}
		switch s.Name {
		case "skiplock.job order.confirm":
			attempts = append(attempts, s)
		case "skiplock.publish order.confirmed":
			publishes = append(publishes, s)
		}
	}
	if enq.Parent.SpanID() != req.SpanContext().SpanID() {
		t.Errorf("the enqueue span's parent is %s, want the request %s", enq.Parent.SpanID(), req.SpanContext().SpanID())
	}
	slices.SortFunc(attempts, func(a, b tracetest.SpanStub) int {
		return int(attr(a, tracing.AttrJobAttempt).AsInt64() - attr(b, tracing.AttrJobAttempt).AsInt64())
	})
	if len(attempts) != 2 {
		t.Fatalf("%d job spans, want 2", len(attempts))
	}
	for i, s := range attempts {
		if s.Parent.SpanID() != enq.SpanContext.SpanID() || attr(s, tracing.AttrJobAttempt).AsInt64() != int64(i+1) ||
			attr(s, tracing.AttrMessagingMessageID).AsString() != res.ID {
			t.Errorf("attempt %d: parent %s (want the enqueue span %s), attributes %v", i+1, s.Parent.SpanID(), enq.SpanContext.SpanID(), s.Attributes)
		}
	}
	if a := attempts[0]; a.Status.Code != codes.Error || len(a.Links) != 0 {
		t.Errorf("attempt 1: status %v links %v, want Error and no link", a.Status, a.Links)
	}
	if a := attempts[1]; a.Status.Code != codes.Unset || len(a.Links) != 1 ||
		a.Links[0].SpanContext.SpanID() != enq.SpanContext.SpanID() || a.Links[0].Attributes[0] != tracing.AttrJobAttempt.Int(2) {
		t.Errorf("attempt 2: status %v links %+v, want Unset and one link to the enqueue span with attempt=2", a.Status, a.Links)
	}
	if len(publishes) != len(routes) {
		t.Fatalf("%d publish spans, want %d", len(publishes), len(routes))
	}
	for _, b := range brokers {
		t.Run(b.system, func(t *testing.T) {
			if b.skip != "" {
				if os.Getenv("SKIPLOCK_REQUIRE_BROKERS") == "1" {
					t.Fatal(b.skip + " (SKIPLOCK_REQUIRE_BROKERS=1, so this is a failure)")
				}
				t.Skip(b.skip)
			}
			i := slices.IndexFunc(publishes, func(s tracetest.SpanStub) bool {
				return attr(s, tracing.AttrMessagingSystem).AsString() == b.system
			})
			if i < 0 {
				t.Fatalf("no publish span with messaging.system %q", b.system)
			}
			pub := publishes[i]
			if pub.Parent.SpanID() != attempts[1].SpanContext.SpanID() || attr(pub, tracing.AttrMessagingDestination).AsString() != b.dest {
				t.Errorf("publish span: parent %s (want attempt 2, %s), attributes %v", pub.Parent.SpanID(), attempts[1].SpanContext.SpanID(), pub.Attributes)
			}
			tid, parent := parseTraceparent(t, got[b.system])
			if tid != traceID || parent != pub.SpanContext.SpanID() {
				t.Errorf("the %s message's traceparent %s: want trace %s and parent %s (the publish span)", b.system, got[b.system], traceID, pub.SpanContext.SpanID())
			}
			consumer := spanNamed(t, exp, "consume "+b.system)
			if consumer.Parent.SpanID() != pub.SpanContext.SpanID() {
				t.Errorf("the consumer's parent is %s, want the publish span %s", consumer.Parent.SpanID(), pub.SpanContext.SpanID())
			}
			t.Logf("%s message traceparent %s: trace %s, parent %s = publish span", b.system, got[b.system], tid, parent)
		})
	}
}

type noDelay struct{}

func (noDelay) Delay(int) time.Duration { return 0 }

// logTrace logs the spans as a tree, children in start order, with their ids.
func logTrace(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	children := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if p := s.Parent.SpanID(); s.Parent.IsValid() && ids[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) }
	var b strings.Builder
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		fmt.Fprintf(&b, "%s%-*s trace=%s span=%s parent=%s %s", strings.Repeat("  ", depth), 40-2*depth, s.Name,
			s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID(), strings.ToLower(s.SpanKind.String()))
		for _, k := range []attribute.Key{tracing.AttrJobAttempt, tracing.AttrMessagingSystem, tracing.AttrMessagingDestination} {
			if v := attr(s, k); v.Type() != attribute.EMPTY && !(k == tracing.AttrMessagingSystem && v.AsString() == tracing.System) {
				fmt.Fprintf(&b, " %s=%s", k, v.String())
			}
		}
		if s.Status.Code != codes.Unset {
			fmt.Fprintf(&b, " status=%s(%q)", s.Status.Code, s.Status.Description)
		}
		for _, l := range s.Links {
			fmt.Fprintf(&b, " link=%s", l.SpanContext.SpanID())
			for _, kv := range l.Attributes {
				fmt.Fprintf(&b, "(%s=%s)", kv.Key, kv.Value.String())
			}
		}
		b.WriteByte('\n')
		kids := children[s.SpanContext.SpanID()]
		slices.SortFunc(kids, byStart)
		for _, c := range kids {
			walk(c, depth+1)
		}
	}
	slices.SortFunc(roots, byStart)
	for _, r := range roots {
		walk(r, 0)
	}
	t.Logf("the trace (%d spans):\n%s", len(spans), b.String())
}

func kafkaBroker(t *testing.T, tp trace.TracerProvider) *broker {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const topic = "orders"
	if err := c.CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	p, err := kafkapub.New(kafkapub.Config{SeedBrokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	return &broker{system: "kafka", dest: topic, pub: tracing.Publisher(p, tp, tracing.WithMessagingSystem("kafka")),
		traceparent: func(t *testing.T, ctx context.Context) string {
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				for _, r := range fs.Records() {
					for _, h := range r.Headers {
						if h.Key == "traceparent" {
							return string(h.Value)
						}
					}
					t.Fatalf("kafka record without traceparent: %v", r.Headers)
				}
			}
			t.Fatal("no kafka record")
			return ""
		}}
}

var queueSeq atomic.Int64

func rabbitBroker(t *testing.T, tp trace.TracerProvider) *broker {
	b := &broker{system: "rabbitmq"}
	url := os.Getenv("SKIPLOCK_TEST_AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		b.skip = fmt.Sprintf("RabbitMQ not reachable (%v); run scripts/rabbitmq.sh start or set SKIPLOCK_TEST_AMQP_URL", err)
		return b
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	b.dest = fmt.Sprintf("skiplock-tracing-%d-%d", os.Getpid(), queueSeq.Add(1))
	if _, err := ch.QueueDeclare(b.dest, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(b.dest, false, false, false); _ = ch.Close() })
	p, err := amqppub.New(amqppub.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	b.pub = tracing.Publisher(p, tp, tracing.WithMessagingSystem("rabbitmq"))
	b.traceparent = func(t *testing.T, ctx context.Context) string {
		// Publish returned after the broker's confirm: the message is in the queue.
		d, ok, err := ch.Get(b.dest, true)
		if err != nil || !ok {
			t.Fatalf("amqp get: ok %v err %v", ok, err)
		}
		s, _ := d.Headers["traceparent"].(string)
		return s
	}
	return b
}

func natsBroker(t *testing.T, tp trace.TracerProvider) *broker {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const subject = "orders.confirmed"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := natspub.New(natspub.Config{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	return &broker{system: "nats", dest: subject, pub: tracing.Publisher(p, tp, tracing.WithMessagingSystem("nats")),
		traceparent: func(t *testing.T, ctx context.Context) string {
			// Publish returned after the stream's PubAck: the message is stored.
			m, err := stream.GetLastMsgForSubject(ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			return m.Header.Get("traceparent")
		}}
}

func webhookBroker(t *testing.T, tp trace.TracerProvider) *broker {
	const secret = "whsec_dGVzdC1zZWNyZXQtMDEyMzQ1Njc4OQ=="
	var mu sync.Mutex
	var received []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r.Header.Get("traceparent"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	p, err := webhookpub.New(webhookpub.Config{Endpoints: map[string]string{"order-hooks": srv.URL}, Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	return &broker{system: "webhook", dest: "order-hooks", pub: tracing.Publisher(p, tp, tracing.WithMessagingSystem("webhook")),
		traceparent: func(t *testing.T, ctx context.Context) string {
			// Publish returned after the 2xx: the request was served.
			mu.Lock()
			defer mu.Unlock()
			if len(received) != 1 {
				t.Fatalf("the webhook received %d requests", len(received))
			}
			return received[0]
		}}
}
