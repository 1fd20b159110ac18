package tracing_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/kafkapub"
	"github.com/skiplock/skiplock/tracing"
)

type confirmOrder struct {
	Order int `json:"order"`
}

func (confirmOrder) Kind() string { return "order.confirm" }

// One trace from the request that enqueues a job, through each attempt of the job,
// to the Kafka record its outbox event becomes. (Needs a database and Kafka, so it
// is compiled, not run.)
func Example() {
	ctx := context.Background()
	// The application's tracer provider, with its exporter (OTLP, say).
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(ctx) }()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	var ob *outbox.Outbox
	workers := skiplock.NewWorkers()
	err = skiplock.AddWorker(workers, skiplock.WorkFunc[confirmOrder](func(ctx context.Context, job *skiplock.Job, args confirmOrder) error {
		// ctx carries the attempt's "skiplock.job order.confirm" span.
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			ev := outbox.Event{AggregateType: "order", AggregateID: "42", EventType: "order.confirmed",
				Destination: "orders", Payload: []byte(`{"order":42}`)}
			tracing.InjectEvent(ctx, &ev) // traceparent → the event's headers
			_, err := ob.Write(ctx, tx, ev)
			return err
		})
	}), nil)
	if err != nil {
		log.Fatal(err)
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{
		Queues:       map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 10}},
		Workers:      workers,
		EnqueueHooks: []skiplock.EnqueueHook{tracing.EnqueueHook(tp)}, // traceparent → job metadata
		Middleware:   []skiplock.Middleware{tracing.Middleware(tp)},   // first, so outermost
	})
	if err != nil {
		log.Fatal(err)
	}
	if ob, err = outbox.New(client, outbox.Config{}); err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Stop(context.Background()) }()

	// The relay publishes each event in a "skiplock.publish" span whose traceparent
	// the Kafka record carries.
	kafka, err := kafkapub.New(kafkapub.Config{SeedBrokers: []string{"kafka-1:9092"}, DefaultTopic: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	relay, err := ob.NewRelay(tracing.Publisher(kafka, tp, tracing.WithMessagingSystem("kafka")), outbox.RelayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = relay.Stop(context.Background()) }()

	// In a request handler, under the request's span (from otelhttp, say):
	//	client.Enqueue(r.Context(), confirmOrder{Order: 42}, nil)
	_, _ = client.Enqueue(ctx, confirmOrder{Order: 42}, nil)
}

// A Kafka consumer continues the trace from the record's traceparent header.
func Example_consumer() {
	tp := sdktrace.NewTracerProvider()
	handle := func(ctx context.Context, r *kgo.Record) {
		carrier := propagation.MapCarrier{}
		for _, h := range r.Headers {
			carrier[h.Key] = string(h.Value)
		}
		ctx = propagation.TraceContext{}.Extract(ctx, carrier)
		ctx, span := tp.Tracer("billing").Start(ctx, "process order.confirmed") // a child of the publish span
		defer span.End()
		_ = ctx // … handle the event (deduplicating with outbox.Inbox) …
	}
	_ = handle
}
