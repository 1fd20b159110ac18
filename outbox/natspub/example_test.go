package natspub_test

import (
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/natspub"
)

// This example needs a NATS server with JetStream; it is compiled but not run by
// go test.
func Example() {
	ctx := context.Background()

	// The stream is normally created by deployment tooling; the duplicate window
	// must outlast the relay's retries.
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       "ORDERS",
		Subjects:   []string{"orders.>"},
		Storage:    jetstream.FileStorage,
		Replicas:   1, // 3 on a production cluster
		Duplicates: 10 * time.Minute,
	}); err != nil {
		log.Fatal(err)
	}

	pub, err := natspub.New(natspub.Config{Conn: nc, DefaultSubject: "orders.events"})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	errs := pub.Publish(ctx, []outbox.Message{{
		ID:          "0190c0de-0000-7000-8000-000000000001",
		EventType:   "order.paid",
		Destination: "orders.paid",
		Payload:     []byte(`{"order":42}`),
	}})
	if errs[0] != nil {
		log.Printf("not published: %v", errs[0])
	}
}
