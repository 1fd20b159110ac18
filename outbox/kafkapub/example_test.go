package kafkapub_test

import (
	"context"
	"log"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/kafkapub"
)

// This example needs a Kafka cluster with a topic named "orders"; it is compiled
// but not run by go test.
func Example() {
	pub, err := kafkapub.New(kafkapub.Config{
		SeedBrokers:  []string{"kafka-1:9092", "kafka-2:9092", "kafka-3:9092"},
		DefaultTopic: "orders",
		Options:      []kgo.Opt{kgo.ClientID("billing-relay")},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	errs := pub.Publish(context.Background(), []outbox.Message{{
		ID:            "0190c0de-0000-7000-8000-000000000001",
		AggregateType: "order",
		AggregateID:   "42", // the record key: order 42's events stay in order
		EventType:     "order.paid",
		Payload:       []byte(`{"order":42}`),
	}})
	if errs[0] != nil {
		log.Printf("not published: %v", errs[0])
	}
}
