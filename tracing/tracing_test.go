package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/tracing"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newTP returns a tracer provider that exports every ended span, synchronously, to
// an in-memory exporter.
func newTP(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// spanNamed returns the only exported span named name.
func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1 (spans: %v)", len(found), name, names(exp.GetSpans()))
	}
	return found[0]
}

func names(ss tracetest.SpanStubs) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

func attr(s tracetest.SpanStub, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// parseTraceparent splits a W3C traceparent into its trace id and parent span id.
func parseTraceparent(t *testing.T, tp string) (trace.TraceID, trace.SpanID) {
	t.Helper()
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
	if !sc.IsValid() {
		t.Fatalf("traceparent %q is not valid", tp)
	}
	return sc.TraceID(), sc.SpanID()
}

// The attribute names match OpenTelemetry's messaging semantic conventions.
func TestAttributeNamesAreSemconv(t *testing.T) {
	t.Parallel()
	for got, want := range map[attribute.Key]attribute.Key{
		tracing.AttrMessagingSystem:        semconv.MessagingSystemKey,
		tracing.AttrMessagingOperationType: semconv.MessagingOperationTypeKey,
		tracing.AttrMessagingOperationName: semconv.MessagingOperationNameKey,
		tracing.AttrMessagingDestination:   semconv.MessagingDestinationNameKey,
		tracing.AttrMessagingMessageID:     semconv.MessagingMessageIDKey,
	} {
		if got != want {
			t.Errorf("%s, want %s", got, want)
		}
	}
}

func TestEnqueueHook(t *testing.T) {
	t.Parallel()
	tp, exp := newTP(t)
	ctx, req := tp.Tracer("test").Start(context.Background(), "request")
	defer req.End()

	shared := map[string]string{"tenant": "acme", "tracestate": "stale=1"}
	p := skiplock.EnqueueParams{Kind: "email", Opts: skiplock.EnqueueOpts{Queue: "mail", Metadata: shared}}
	if err := tracing.EnqueueHook(tp)(ctx, &p); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(shared, map[string]string{"tenant": "acme", "tracestate": "stale=1"}) {
		t.Errorf("the caller's map was modified: %v", shared)
	}
	enq := spanNamed(t, exp, "skiplock.enqueue email")
	if enq.SpanKind != trace.SpanKindProducer || enq.Parent.SpanID() != req.SpanContext().SpanID() {
		t.Errorf("enqueue span: kind %v parent %v", enq.SpanKind, enq.Parent.SpanID())
	}
	if q := attr(enq, tracing.AttrMessagingDestination).AsString(); q != "mail" {
		t.Errorf("destination %q", q)
	}
	tid, sid := parseTraceparent(t, p.Opts.Metadata["traceparent"])
	if tid != req.SpanContext().TraceID() || sid != enq.SpanContext.SpanID() {
		t.Errorf("stored %s, want trace %s span %s", p.Opts.Metadata["traceparent"], req.SpanContext().TraceID(), enq.SpanContext.SpanID())
	}
	if _, ok := p.Opts.Metadata["tracestate"]; ok || p.Opts.Metadata["tenant"] != "acme" || len(p.Opts.Metadata) != 2 {
		t.Errorf("metadata %v: want tenant kept and the stale tracestate gone", p.Opts.Metadata)
	}

	t.Run("without enqueue span", func(t *testing.T) {
		p := skiplock.EnqueueParams{Kind: "email"}
		if err := tracing.EnqueueHook(tp, tracing.WithEnqueueSpan(false))(ctx, &p); err != nil {
			t.Fatal(err)
		}
		if _, sid := parseTraceparent(t, p.Opts.Metadata["traceparent"]); sid != req.SpanContext().SpanID() {
			t.Errorf("stored parent %s, want the request span %s", sid, req.SpanContext().SpanID())
		}
		p = skiplock.EnqueueParams{Kind: "email"}
		if err := tracing.EnqueueHook(tp, tracing.WithEnqueueSpan(false))(context.Background(), &p); err != nil {
			t.Fatal(err)
		}
		if p.Opts.Metadata != nil {
			t.Errorf("no span in the context, but metadata %v", p.Opts.Metadata)
		}
	})
	t.Run("metadata full", func(t *testing.T) {
		full := map[string]string{}
		for i := range skiplock.MaxMetadataEntries {
			full[fmt.Sprint("k", i)] = "v"
		}
		p := skiplock.EnqueueParams{Kind: "email", Opts: skiplock.EnqueueOpts{Metadata: full}}
		if err := tracing.EnqueueHook(tp)(ctx, &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Opts.Metadata) != skiplock.MaxMetadataEntries || p.Opts.Metadata["traceparent"] != "" {
			t.Errorf("full metadata: got %d entries", len(p.Opts.Metadata))
		}
	})
	t.Run("oversize tracestate", func(t *testing.T) {
		ts, err := trace.ParseTraceState("a=" + strings.Repeat("x", 250))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			if ts, err = ts.Insert(fmt.Sprint("k", i), strings.Repeat("y", 250)); err != nil {
				t.Fatal(err)
			}
		}
		big := trace.ContextWithSpanContext(context.Background(), req.SpanContext().WithTraceState(ts))
		p := skiplock.EnqueueParams{Kind: "email"}
		if err := tracing.EnqueueHook(tp, tracing.WithEnqueueSpan(false))(big, &p); err != nil {
			t.Fatal(err)
		}
		if p.Opts.Metadata != nil {
			t.Errorf("a tracestate over %d bytes was stored", skiplock.MaxMetadataValueLen)
		}
	})
	t.Run("no-op provider", func(t *testing.T) {
		p := skiplock.EnqueueParams{Kind: "email"}
		if err := tracing.EnqueueHook(noop.NewTracerProvider())(context.Background(), &p); err != nil {
			t.Fatal(err)
		}
		if p.Opts.Metadata != nil {
			t.Errorf("metadata %v from a no-op provider without a caller span", p.Opts.Metadata)
		}
	})
}

// storedJob returns a job as a worker sees it, enqueued under ctx by the hook.
func storedJob(t *testing.T, ctx context.Context, attempt int) *skiplock.Job {
	t.Helper()
	p := skiplock.EnqueueParams{Kind: "email"}
	if err := tracing.EnqueueHook(nil, tracing.WithEnqueueSpan(false))(ctx, &p); err != nil {
		t.Fatal(err)
	}
	return &skiplock.Job{ID: "0190c0de-0000-7000-8000-000000000001", Queue: "mail", Kind: "email",
		Attempt: attempt, MaxAttempts: 5, Metadata: p.Opts.Metadata}
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	tp, exp := newTP(t)
	ctx, req := tp.Tracer("test").Start(context.Background(), "request")
	req.End()
	mw := tracing.Middleware(tp)
	run := func(job *skiplock.Job, h skiplock.HandlerFunc) (tracetest.SpanStub, error) {
		t.Helper()
		exp.Reset()
		err := mw(h)(context.Background(), job)
		return spanNamed(t, exp, "skiplock.job email"), err
	}

	var inHandler trace.SpanContext
	s, err := run(storedJob(t, ctx, 1), func(ctx context.Context, job *skiplock.Job) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return errors.New("smtp down")
	})
	if err == nil || err.Error() != "smtp down" {
		t.Fatalf("handler error not passed through: %v", err)
	}
	if s.SpanContext.TraceID() != req.SpanContext().TraceID() || s.Parent.SpanID() != req.SpanContext().SpanID() || !s.Parent.IsRemote() {
		t.Errorf("attempt 1: trace %s parent %s, want %s %s", s.SpanContext.TraceID(), s.Parent.SpanID(), req.SpanContext().TraceID(), req.SpanContext().SpanID())
	}
	if inHandler.SpanID() != s.SpanContext.SpanID() {
		t.Errorf("the handler's context does not carry the job span")
	}
	if s.SpanKind != trace.SpanKindConsumer || s.Status.Code != codes.Error || s.Status.Description != "smtp down" || len(s.Links) != 0 {
		t.Errorf("attempt 1: kind %v status %v links %d", s.SpanKind, s.Status, len(s.Links))
	}
	if len(s.Events) != 1 || s.Events[0].Name != "exception" {
		t.Errorf("events %v, want one exception", s.Events)
	}
	for k, want := range map[attribute.Key]any{
		tracing.AttrMessagingSystem: "skiplock", tracing.AttrMessagingOperationType: "process",
		tracing.AttrMessagingDestination: "mail", tracing.AttrMessagingMessageID: "0190c0de-0000-7000-8000-000000000001",
		tracing.AttrJobKind: "email", tracing.AttrJobAttempt: int64(1), tracing.AttrJobMaxAttempts: int64(5),
	} {
		if got := attr(s, k).AsInterface(); got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}

	s, err = run(storedJob(t, ctx, 3), func(context.Context, *skiplock.Job) error { return nil })
	if err != nil || s.Status.Code != codes.Unset || s.Parent.SpanID() != req.SpanContext().SpanID() {
		t.Errorf("attempt 3: err %v status %v parent %s", err, s.Status, s.Parent.SpanID())
	}
	if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != req.SpanContext().SpanID() ||
		len(s.Links[0].Attributes) != 1 || s.Links[0].Attributes[0] != tracing.AttrJobAttempt.Int(3) {
		t.Errorf("attempt 3: links %+v, want one to the enqueue context with attempt=3", s.Links)
	}

	s, err = run(storedJob(t, ctx, 1), func(context.Context, *skiplock.Job) error { return skiplock.Snooze(time.Minute) })
	if err == nil || s.Status.Code != codes.Unset || !attr(s, tracing.AttrJobSnoozed).AsBool() {
		t.Errorf("snooze: err %v status %v", err, s.Status)
	}

	t.Run("panic", func(t *testing.T) {
		var got any
		func() {
			defer func() { got = recover() }()
			_, _ = run(storedJob(t, ctx, 1), func(context.Context, *skiplock.Job) error { panic("boom") })
		}()
		if got != "boom" {
			t.Fatalf("recovered %v, want the handler's panic re-raised", got)
		}
		s := spanNamed(t, exp, "skiplock.job email")
		if s.Status.Code != codes.Error || s.Status.Description != "panic: boom" || len(s.Events) != 1 {
			t.Errorf("panic: status %v events %v", s.Status, s.Events)
		}
	})
	t.Run("no stored context", func(t *testing.T) {
		exp.Reset()
		// A span in the worker's context is not the job's parent.
		wctx, worker := tp.Tracer("test").Start(context.Background(), "worker")
		defer worker.End()
		if err := mw(func(context.Context, *skiplock.Job) error { return nil })(wctx, &skiplock.Job{ID: "x", Kind: "email", Attempt: 2}); err != nil {
			t.Fatal(err)
		}
		s := spanNamed(t, exp, "skiplock.job email")
		if s.Parent.IsValid() || s.SpanContext.TraceID() == worker.SpanContext().TraceID() || len(s.Links) != 0 {
			t.Errorf("job without trace context: parent %v, links %d", s.Parent, len(s.Links))
		}
	})
	t.Run("error whose Error panics", func(t *testing.T) {
		s, err := run(storedJob(t, ctx, 1), func(context.Context, *skiplock.Job) error { return panicky{} })
		if _, ok := err.(panicky); !ok || s.Status.Code != codes.Error || !strings.Contains(s.Status.Description, "panicked") {
			t.Errorf("err %v status %v", err, s.Status)
		}
	})
	t.Run("error text under the one text policy", func(t *testing.T) {
		long := errors.New("gateway said \xff\x00 " + strings.Repeat("é", 2000))
		s, _ := run(storedJob(t, ctx, 1), func(context.Context, *skiplock.Job) error { return long })
		d := s.Status.Description
		if !utf8.ValidString(d) || strings.IndexByte(d, 0) >= 0 || len(d) > 1024 ||
			!strings.HasPrefix(d, "gateway said \uFFFD\uFFFD é") || !strings.Contains(d, "bytes shown]") {
			t.Errorf("status of a long error with invalid UTF-8 and a NUL: %q (%d bytes)", d, len(d))
		}
	})
}

type panicky struct{}

func (panicky) Error() string { panic("no text") }

func TestInjectEvent(t *testing.T) {
	t.Parallel()
	tp, _ := newTP(t)
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()

	shared := map[string]string{"x-tenant": "acme"}
	ev := outbox.Event{Headers: shared}
	tracing.InjectEvent(ctx, &ev)
	if len(shared) != 1 {
		t.Errorf("the caller's map was modified: %v", shared)
	}
	if _, sid := parseTraceparent(t, ev.Headers["traceparent"]); sid != span.SpanContext().SpanID() || ev.Headers["x-tenant"] != "acme" {
		t.Errorf("headers %v", ev.Headers)
	}

	ev = outbox.Event{Headers: shared}
	tracing.InjectEvent(context.Background(), &ev)
	if len(ev.Headers) != 1 {
		t.Errorf("no span, but headers %v", ev.Headers)
	}
	full := map[string]string{}
	for i := range outbox.MaxHeaders {
		full[fmt.Sprint("h", i)] = "v"
	}
	ev = outbox.Event{Headers: full}
	tracing.InjectEvent(ctx, &ev)
	if len(ev.Headers) != outbox.MaxHeaders || ev.Headers["traceparent"] != "" {
		t.Errorf("full headers: %d", len(ev.Headers))
	}
	tracing.InjectEvent(ctx, nil) // no panic
}

// fakePub records what it was given and answers with result.
type fakePub struct {
	mu     sync.Mutex
	got    []outbox.Message
	result func(msgs []outbox.Message) []error
	closed bool
}

func (f *fakePub) Publish(_ context.Context, msgs []outbox.Message) []error {
	f.mu.Lock()
	f.got = append(f.got, msgs...)
	f.mu.Unlock()
	if f.result != nil {
		return f.result(msgs)
	}
	return make([]error, len(msgs))
}

func (f *fakePub) Close() error { f.closed = true; return nil }

func TestPublisher(t *testing.T) {
	t.Parallel()
	tp, exp := newTP(t)
	wctx, writer := tp.Tracer("test").Start(context.Background(), "writer")
	writer.End()
	ev := outbox.Event{Headers: map[string]string{"x-tenant": "acme"}}
	tracing.InjectEvent(wctx, &ev)
	stored := ev.Headers

	inner := &fakePub{result: func(msgs []outbox.Message) []error {
		errs := make([]error, len(msgs))
		errs[1] = skiplock.Permanent(errors.New("too big"))
		return errs
	}}
	pub := tracing.Publisher(inner, tp, tracing.WithMessagingSystem("kafka"))
	msgs := []outbox.Message{
		{ID: "e1", EventType: "order.paid", AggregateType: "order", Destination: "orders", Headers: stored, Attempt: 1},
		{ID: "e2", EventType: "order.shipped", AggregateType: "order", Headers: stored, Attempt: 2},
		{ID: "e3", EventType: "order.lost", AggregateType: "order", Attempt: 1},
	}
	before := maps.Clone(stored)
	errs := pub.Publish(context.Background(), msgs)
	if len(errs) != 3 || errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("errs %v", errs)
	}
	if !maps.Equal(stored, before) || msgs[2].Headers != nil {
		t.Errorf("the caller's messages were modified: %v / %v", stored, msgs[2].Headers)
	}
	paid := spanNamed(t, exp, "skiplock.publish order.paid")
	shipped := spanNamed(t, exp, "skiplock.publish order.shipped")
	lost := spanNamed(t, exp, "skiplock.publish order.lost")
	for i, s := range []tracetest.SpanStub{paid, shipped, lost} {
		h := inner.got[i].Headers
		tid, sid := parseTraceparent(t, h["traceparent"])
		if tid != s.SpanContext.TraceID() || sid != s.SpanContext.SpanID() {
			t.Errorf("%s: the message's traceparent %s is not the publish span's", s.Name, h["traceparent"])
		}
		if s.SpanKind != trace.SpanKindProducer || attr(s, tracing.AttrMessagingSystem).AsString() != "kafka" ||
			attr(s, tracing.AttrMessagingMessageID).AsString() != msgs[i].ID {
			t.Errorf("%s: kind %v attributes %v", s.Name, s.SpanKind, s.Attributes)
		}
	}
	if inner.got[0].Headers["x-tenant"] != "acme" {
		t.Errorf("user headers lost: %v", inner.got[0].Headers)
	}
	for _, s := range []tracetest.SpanStub{paid, shipped} {
		if s.Parent.SpanID() != writer.SpanContext().SpanID() || s.SpanContext.TraceID() != writer.SpanContext().TraceID() {
			t.Errorf("%s: parent %s, want the writer %s", s.Name, s.Parent.SpanID(), writer.SpanContext().SpanID())
		}
	}
	if lost.Parent.IsValid() {
		t.Errorf("an event without trace context got parent %v", lost.Parent)
	}
	if attr(paid, tracing.AttrMessagingDestination).AsString() != "orders" || attr(shipped, tracing.AttrMessagingDestination).Type() != attribute.EMPTY {
		t.Errorf("destination attributes: %v / %v", paid.Attributes, shipped.Attributes)
	}
	if paid.Status.Code != codes.Unset || shipped.Status.Code != codes.Error || len(paid.Links) != 0 ||
		len(shipped.Links) != 1 || shipped.Links[0].Attributes[0] != tracing.AttrEventAttempt.Int(2) {
		t.Errorf("statuses %v %v, links %v %v", paid.Status, shipped.Status, paid.Links, shipped.Links)
	}

	t.Run("wrong result length", func(t *testing.T) {
		exp.Reset()
		pub := tracing.Publisher(&fakePub{result: func([]outbox.Message) []error { return nil }}, tp)
		if errs := pub.Publish(context.Background(), msgs[:2]); errs != nil {
			t.Errorf("errs %v, want the inner result unchanged", errs)
		}
		for _, s := range exp.GetSpans() {
			if s.Status.Code != codes.Error {
				t.Errorf("%s: status %v", s.Name, s.Status)
			}
		}
	})
	t.Run("panic", func(t *testing.T) {
		exp.Reset()
		pub := tracing.Publisher(&fakePub{result: func([]outbox.Message) []error { panic("broker client bug") }}, tp)
		var got any
		func() {
			defer func() { got = recover() }()
			pub.Publish(context.Background(), msgs[:1])
		}()
		if got != "broker client bug" || len(exp.GetSpans()) != 1 || exp.GetSpans()[0].Status.Code != codes.Error {
			t.Errorf("recovered %v, spans %v", got, exp.GetSpans())
		}
	})
	if err := pub.Close(); err != nil || !inner.closed {
		t.Errorf("Close: %v, inner closed %v", err, inner.closed)
	}
}

// The per-job cost: the hook (enqueue span + inject) and the middleware (extract +
// job span), with a sampling SDK provider that exports nowhere.
func BenchmarkEnqueueHook(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("bench").Start(context.Background(), "request")
	defer span.End()
	hook := tracing.EnqueueHook(tp)
	b.ReportAllocs()
	for b.Loop() {
		p := skiplock.EnqueueParams{Kind: "email"}
		if err := hook(ctx, &p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMiddleware(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("bench").Start(context.Background(), "request")
	span.End()
	p := skiplock.EnqueueParams{Kind: "email"}
	if err := tracing.EnqueueHook(tp)(ctx, &p); err != nil {
		b.Fatal(err)
	}
	job := &skiplock.Job{ID: "0190c0de-0000-7000-8000-000000000001", Queue: "default", Kind: "email", Attempt: 2, MaxAttempts: 8, Metadata: p.Opts.Metadata}
	h := tracing.Middleware(tp)(func(context.Context, *skiplock.Job) error { return nil })
	b.ReportAllocs()
	for b.Loop() {
		if err := h(context.Background(), job); err != nil {
			b.Fatal(err)
		}
	}
}
