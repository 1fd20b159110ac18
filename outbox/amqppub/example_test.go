package amqppub_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/amqppub"
)

// This example needs a RabbitMQ broker with a durable queue named "orders"; it is
// compiled but not run by go test.
func Example() {
	pub, err := amqppub.New(amqppub.Config{
		URL: "amqp://guest:guest@127.0.0.1:5672/",
		// Exchange left empty: the default exchange routes by queue name, so
		// Destination "orders" lands in the queue "orders".
		Timeout: 10 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	errs := pub.Publish(context.Background(), []outbox.Message{{
		ID:          "0190c0de-0000-7000-8000-000000000001",
		EventType:   "order.paid",
		Destination: "orders",
		Payload:     []byte(`{"order":42}`),
		CreatedAt:   time.Now(),
	}})
	for _, err := range errs {
		if err != nil {
			log.Printf("not published (permanent=%v): %v", errors.As(err, new(*skiplock.PermanentError)), err)
		}
	}
}
