// Package tracing carries OpenTelemetry traces through skiplock: from the request
// that enqueues a job, through every attempt of that job, to the outbox events it
// writes and the broker messages (or webhooks) the relay publishes, so that one
// trace shows the whole path and a consumer continues it.
//
//	request span ──▶ skiplock.enqueue <kind>          EnqueueHook: W3C trace context → job metadata
//	                   ├─▶ skiplock.job <kind>         Middleware, attempt 1 (child)
//	                   └─▶ skiplock.job <kind>         Middleware, attempt 2 (child + link, attempt=2)
//	                         └─▶ (handler) InjectEvent: trace context → outbox event headers
//	                               └─▶ skiplock.publish <event type>   Publisher (child)
//	                                     └─▶ broker message "traceparent" = the publish span
//	                                           └─▶ the consumer's span (child)
//
// What is stored is the W3C Trace Context: the "traceparent" entry (55 bytes) and,
// when the trace has one, "tracestate", in the job's metadata (Job.Metadata) and in
// the outbox event's headers (Event.Headers). The default propagator is
// propagation.TraceContext alone; pass WithPropagator to add Baggage, which is then
// stored in the database and sent to brokers as well.
//
// The root package does not depend on OpenTelemetry: everything here plugs into
// skiplock.Config.EnqueueHooks, skiplock.Config.Middleware and an
// outbox.Publisher. See docs/tracing.md for span names, attributes and costs.
package tracing

import (
	"context"

	"github.com/skiplock/skiplock/internal/safetext"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracers this package creates.
const ScopeName = "github.com/skiplock/skiplock/tracing"

// Attribute keys. The messaging.* keys are OpenTelemetry's messaging semantic
// conventions; the skiplock.* keys are this package's own.
const (
	AttrMessagingSystem        = attribute.Key("messaging.system")         // "skiplock" on job spans
	AttrMessagingOperationType = attribute.Key("messaging.operation.type") // create, process, send
	AttrMessagingOperationName = attribute.Key("messaging.operation.name") // enqueue, process, publish
	AttrMessagingDestination   = attribute.Key("messaging.destination.name")
	AttrMessagingMessageID     = attribute.Key("messaging.message.id")

	AttrJobKind        = attribute.Key("skiplock.job.kind")
	AttrJobAttempt     = attribute.Key("skiplock.job.attempt") // on job spans and on their links
	AttrJobMaxAttempts = attribute.Key("skiplock.job.max_attempts")
	AttrJobSnoozed     = attribute.Key("skiplock.job.snoozed")

	AttrEventType     = attribute.Key("skiplock.event.type")
	AttrAggregateType = attribute.Key("skiplock.aggregate.type")
	AttrEventAttempt  = attribute.Key("skiplock.event.attempt") // on publish spans and on their links
)

// System is the messaging.system value of job spans (and, by default, of publish
// spans: see WithMessagingSystem).
const System = "skiplock"

// Option configures EnqueueHook, Middleware, Publisher and InjectEvent. An option
// that does not apply to a constructor is ignored by it.
type Option func(*config)

// WithPropagator sets the propagator that writes and reads the stored trace
// context. Default propagation.TraceContext{} (traceparent and tracestate only).
// Every part of a deployment — the enqueuing service, the workers, the outbox
// writers and the relay — must use the same one. A nil p keeps the default.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) {
		if p != nil {
			c.prop = p
		}
	}
}

// WithEnqueueSpan turns EnqueueHook's "skiplock.enqueue <kind>" producer span on
// or off. Default on. Off, the job stores the caller's own span context: its
// attempts become children of the caller's span directly, and a job enqueued with
// no span in its context carries no trace context at all.
func WithEnqueueSpan(on bool) Option {
	return func(c *config) { c.enqueueSpan = on }
}

// WithMessagingSystem sets messaging.system on Publisher's spans — "kafka",
// "rabbitmq", "nats", "webhook" — since the wrapper cannot tell which broker the
// wrapped Publisher talks to. Default "skiplock". An empty name keeps the default.
func WithMessagingSystem(name string) Option {
	return func(c *config) {
		if name != "" {
			c.system = name
		}
	}
}

type config struct {
	tracer      trace.Tracer
	prop        propagation.TextMapPropagator
	fields      map[string]bool // the propagator's keys
	enqueueSpan bool
	system      string
}

// options applies opts to the defaults; it creates no tracer.
func options(opts []Option) *config {
	c := &config{prop: propagation.TraceContext{}, enqueueSpan: true, system: System}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	c.fields = map[string]bool{}
	for _, f := range c.prop.Fields() {
		c.fields[f] = true
	}
	return c
}

// defaults is options(nil), for InjectEvent without options.
var defaults = options(nil)

// newConfig is options plus a tracer from tp (otel.GetTracerProvider() when nil,
// which follows a later otel.SetTracerProvider).
func newConfig(tp trace.TracerProvider, opts []Option) *config {
	c := options(opts)
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	c.tracer = tp.Tracer(ScopeName)
	return c
}

// inject writes ctx's trace context into a copy of m, replacing any stale entries
// of the propagator's keys, provided the result stays within maxEntries entries of
// at most maxValueLen bytes each. It returns m itself when ctx has nothing to inject
// or the limits would be exceeded: tracing never makes a write fail.
func (c *config) inject(ctx context.Context, m map[string]string, maxEntries, maxValueLen int) map[string]string {
	carrier := propagation.MapCarrier{}
	c.prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return m
	}
	out := make(map[string]string, len(m)+len(carrier))
	for k, v := range m {
		if !c.fields[k] {
			out[k] = v
		}
	}
	for k, v := range carrier {
		if len(v) > maxValueLen {
			return m
		}
		out[k] = v
	}
	if len(out) > maxEntries {
		return m
	}
	return out
}

// link returns a link to sc carrying the attempt number, or nothing when sc is
// not valid or this is the first attempt.
func link(sc trace.SpanContext, key attribute.Key, attempt int) []trace.SpanStartOption {
	if attempt <= 1 || !sc.IsValid() {
		return nil
	}
	return []trace.SpanStartOption{trace.WithLinks(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{key.Int(attempt)}})}
}

// maxStatusLen bounds a span status description taken from an error's text.
const maxStatusLen = 1024

// recordError marks span as failed with err. An error whose Error method panics is
// recorded with a description of that panic instead of taking the handler or relay
// down.
func recordError(span trace.Span, err error) {
	msg := statusText(err)
	func() {
		defer func() { _ = recover() }()
		span.RecordError(err)
	}()
	span.SetStatus(codes.Error, msg)
}

// statusText is err's text as a span status: skiplock's one text policy
// (internal/safetext), bounded to maxStatusLen.
func statusText(err error) string { return safetext.ErrorN(err, maxStatusLen) }
