package tracing

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/skiplock/skiplock/outbox"
)

// InjectEvent stores ctx's trace context in ev.Headers (under the propagator's
// keys, "traceparent" and "tracestate" by default), so the relay's publish span —
// see Publisher — continues ctx's trace. Call it before Outbox.Write:
//
//	ev := outbox.Event{...}
//	tracing.InjectEvent(ctx, &ev)
//	id, err := ob.Write(ctx, tx, ev)
//
// It replaces ev.Headers with a copy and never writes into the caller's map. It
// leaves ev unchanged when ctx carries no valid span context, or when the headers
// have no room (outbox.MaxHeaders, MaxHeaderValueLen): tracing never makes a write
// fail. Headers under the propagator's keys are replaced. Of the options only
// WithPropagator applies.
func InjectEvent(ctx context.Context, ev *outbox.Event, opts ...Option) {
	if ev == nil || ctx == nil {
		return
	}
	c := defaults
	if len(opts) > 0 {
		c = options(opts)
	}
	ev.Headers = c.inject(ctx, ev.Headers, outbox.MaxHeaders, outbox.MaxHeaderValueLen)
}

// Publisher wraps pub so that each message is published in a
// "skiplock.publish <event type>" span of kind producer, and the copy of the message
// pub receives carries that span's trace context in its headers: a consumer that
// extracts it (the W3C "traceparent" header on Kafka, RabbitMQ, NATS and webhooks)
// starts its span as a child of the publish span, in the trace of the request that
// wrote the event.
//
// The publish span's parent is the trace context stored in the event's headers by
// InjectEvent; an event without one gets a new root span. From the event's second
// publish attempt on, the span also carries a link to that stored context with
// attribute skiplock.event.attempt = n. Attributes: messaging.system
// (WithMessagingSystem, default "skiplock"), messaging.operation.type "send",
// messaging.operation.name "publish", messaging.destination.name (when the
// message names one), messaging.message.id (the event id), skiplock.event.type,
// skiplock.aggregate.type, skiplock.event.attempt. A message pub fails is recorded
// and sets the status to Error.
//
// The batch goes to pub in one Publish call, as the relay handed it over, so each
// span lasts the whole call. Messages are copied with new header maps; the
// caller's messages and maps are never modified. Close closes pub. tp nil means
// otel.GetTracerProvider().
func Publisher(pub outbox.Publisher, tp trace.TracerProvider, opts ...Option) outbox.Publisher {
	return &publisher{inner: pub, c: newConfig(tp, opts)}
}

type publisher struct {
	inner outbox.Publisher
	c     *config
}

func (p *publisher) Publish(ctx context.Context, msgs []outbox.Message) (errs []error) {
	if len(msgs) == 0 {
		return p.inner.Publish(ctx, msgs)
	}
	out := make([]outbox.Message, len(msgs))
	spans := make([]trace.Span, len(msgs))
	// The relay's own context may carry a span (a Start under one); the parent
	// of a publish is the event's stored context, never that.
	base := trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	for i := range msgs {
		m := msgs[i]
		parent := p.c.prop.Extract(base, propagation.MapCarrier(m.Headers))
		attrs := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				AttrMessagingSystem.String(p.c.system),
				AttrMessagingOperationType.String("send"),
				AttrMessagingOperationName.String("publish"),
				AttrMessagingMessageID.String(m.ID),
				AttrEventType.String(m.EventType),
				AttrAggregateType.String(m.AggregateType),
				AttrEventAttempt.Int(m.Attempt),
			),
		}
		if m.Destination != "" {
			attrs = append(attrs, trace.WithAttributes(AttrMessagingDestination.String(m.Destination)))
		}
		attrs = append(attrs, link(trace.SpanContextFromContext(parent), AttrEventAttempt, m.Attempt)...)
		sctx, span := p.c.tracer.Start(parent, "skiplock.publish "+m.EventType, attrs...)
		spans[i] = span
		// A copy without the stored trace context, then the publish span's. No
		// limits apply: the message goes to the broker, not back to the table.
		h := make(map[string]string, len(m.Headers)+2)
		for k, v := range m.Headers {
			if !p.c.fields[k] {
				h[k] = v
			}
		}
		p.c.prop.Inject(sctx, propagation.MapCarrier(h))
		m.Headers = h
		out[i] = m
	}
	defer func() {
		if r := recover(); r != nil {
			for _, s := range spans {
				s.SetStatus(codes.Error, fmt.Sprintf("publisher panicked: %v", r))
				s.End()
			}
			panic(r)
		}
	}()
	errs = p.inner.Publish(ctx, out)
	for i, s := range spans {
		switch {
		case len(errs) != len(msgs):
			s.SetStatus(codes.Error, fmt.Sprintf("publisher returned %d results for %d messages", len(errs), len(msgs)))
		case errs[i] != nil:
			recordError(s, errs[i])
		}
		s.End()
	}
	return errs
}

func (p *publisher) Close() error { return p.inner.Close() }
