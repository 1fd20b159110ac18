package tracing

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/skiplock/skiplock"
)

// EnqueueHook returns a skiplock.EnqueueHook (for Config.EnqueueHooks) that stores
// the enqueuing context's trace context in the job's metadata, under the
// propagator's keys ("traceparent", "tracestate").
//
// By default it first starts and ends a "skiplock.enqueue <kind>" span (kind
// producer, messaging.operation.type "create") as a child of the caller's span, and
// stores that span's context: each job gets a node of its own in the trace, under
// which all its attempts hang, even when one request enqueues many jobs. The span
// is as short as the hook: it cannot cover the insert, which runs after the hooks,
// and it does not know the job's id. WithEnqueueSpan(false) stores the caller's
// span context instead.
//
// tp nil means otel.GetTracerProvider(). The hook never refuses an enqueue: when
// the metadata has no room (skiplock.MaxMetadataEntries, MaxMetadataValueLen), the
// job is enqueued without trace context. Metadata entries under the propagator's
// keys are replaced. A deduplicated enqueue changes nothing: the job already
// holding the key keeps the trace context it was enqueued with.
func EnqueueHook(tp trace.TracerProvider, opts ...Option) skiplock.EnqueueHook {
	c := newConfig(tp, opts)
	return func(ctx context.Context, p *skiplock.EnqueueParams) error {
		if p == nil || ctx == nil {
			return nil
		}
		if c.enqueueSpan {
			kind := p.Kind
			if p.Args != nil {
				kind = p.Args.Kind()
			}
			queue := p.Opts.Queue
			if queue == "" {
				queue = skiplock.DefaultQueue
			}
			var span trace.Span
			ctx, span = c.tracer.Start(ctx, "skiplock.enqueue "+kind,
				trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithAttributes(
					AttrMessagingSystem.String(System),
					AttrMessagingOperationType.String("create"),
					AttrMessagingOperationName.String("enqueue"),
					AttrMessagingDestination.String(queue),
					AttrJobKind.String(kind),
				))
			span.End()
		}
		p.Opts.Metadata = c.inject(ctx, p.Opts.Metadata, skiplock.MaxMetadataEntries, skiplock.MaxMetadataValueLen)
		return nil
	}
}

// Middleware returns a skiplock.Middleware (for Config.Middleware) that runs each
// attempt of a job in a "skiplock.job <kind>" span of kind consumer.
//
// The span's parent is the trace context stored in Job.Metadata by EnqueueHook, so
// every attempt of a job is a child of its enqueue span, in the enqueuing request's
// trace; a job without stored trace context gets a new root span. From the second
// attempt on, the span also carries a link to that stored context with attribute
// skiplock.job.attempt = n, which marks it as a retry in backends that list links.
//
// Attributes: messaging.system "skiplock", messaging.operation.type "process",
// messaging.operation.name "process", messaging.destination.name (the queue),
// messaging.message.id (the job id), skiplock.job.kind, skiplock.job.attempt,
// skiplock.job.max_attempts. A handler error is recorded (an "exception" event) and
// sets the status to Error; a snooze (skiplock.Snooze) is not an error and sets
// skiplock.job.snoozed instead; a panic is recorded with its stack, sets Error, and
// is re-raised for the runtime to handle as it always does. The handler's context
// carries the span, so spans it starts, and InjectEvent, continue the trace.
//
// Put it first in Config.Middleware so the span covers the other middleware. tp nil
// means otel.GetTracerProvider().
func Middleware(tp trace.TracerProvider, opts ...Option) skiplock.Middleware {
	c := newConfig(tp, opts)
	return func(next skiplock.HandlerFunc) skiplock.HandlerFunc {
		return func(ctx context.Context, job *skiplock.Job) (err error) {
			if job == nil {
				return next(ctx, job)
			}
			// Forget any span of the worker's own context: the parent is the stored
			// one, or none.
			ctx = c.prop.Extract(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), propagation.MapCarrier(job.Metadata))
			stored := trace.SpanContextFromContext(ctx)
			start := append([]trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					AttrMessagingSystem.String(System),
					AttrMessagingOperationType.String("process"),
					AttrMessagingOperationName.String("process"),
					AttrMessagingDestination.String(job.Queue),
					AttrMessagingMessageID.String(job.ID),
					AttrJobKind.String(job.Kind),
					AttrJobAttempt.Int(job.Attempt),
					AttrJobMaxAttempts.Int(job.MaxAttempts),
				),
			}, link(stored, AttrJobAttempt, job.Attempt)...)
			ctx, span := c.tracer.Start(ctx, "skiplock.job "+job.Kind, start...)
			defer func() {
				if p := recover(); p != nil {
					perr := fmt.Errorf("panic: %v", p)
					span.RecordError(perr, trace.WithStackTrace(true))
					span.SetStatus(codes.Error, statusText(perr))
					span.End()
					panic(p)
				}
				var snooze *skiplock.SnoozeError
				switch {
				case err == nil:
				case errors.As(err, &snooze):
					span.SetAttributes(AttrJobSnoozed.Bool(true))
				default:
					recordError(span, err)
				}
				span.End()
			}()
			return next(ctx, job)
		}
	}
}
