package bench

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/amqppub"
	"github.com/skiplock/skiplock/outbox/kafkapub"
	"github.com/skiplock/skiplock/outbox/natspub"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
	"github.com/twmb/franz-go/pkg/kfake"
)

// timed measures the time spent inside Publish.
type timed struct {
	outbox.Publisher
	spent atomic.Int64
}

func (t *timed) Publish(ctx context.Context, msgs []outbox.Message) []error {
	start := time.Now()
	defer func() { t.spent.Add(int64(time.Since(start))) }()
	return t.Publisher.Publish(ctx, msgs)
}

// relayRate runs the relay benchmark for pub and reports events/s, and the share of
// the relay's time spent inside the publisher.
func relayRate(b *testing.B, inner outbox.Publisher, n int) {
	b.Helper()
	pub := &timed{Publisher: inner}
	var total time.Duration
	for range b.N {
		schema := pgtest.Schema(b)
		d, err := RelayThroughput(context.Background(), pgtest.Pool(b), schema, pub, n, RelayOptions{})
		if err != nil {
			b.Fatal(err)
		}
		total += d
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
	b.ReportMetric(float64(pub.spent.Load())/float64(total)/2, "publish-share") // 2 relays
}

// BenchmarkRelayToBrokers measures the relay end to end (claim, publish with the
// adapter's confirmations, fenced mark) to each broker the tests can run here:
//
//	go test -run '^$' -bench RelayToBrokers -benchtime 1x ./internal/outboxbench/
func BenchmarkRelayToBrokers(b *testing.B) {
	const n = 20000
	b.Run("memory", func(b *testing.B) { relayRate(b, memorypub.New(), n) })
	b.Run("kafka-kfake", func(b *testing.B) {
		c, err := kfake.NewCluster(kfake.NumBrokers(3))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if err := c.CreateTopic("bench", 3, nil); err != nil {
			b.Fatal(err)
		}
		pub, err := kafkapub.New(kafkapub.Config{SeedBrokers: c.ListenAddrs()})
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		relayRate(b, pub, n)
	})
	b.Run("nats-jetstream", func(b *testing.B) {
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: b.TempDir(), NoLog: true, NoSigs: true})
		if err != nil {
			b.Fatal(err)
		}
		go s.Start()
		defer func() { s.Shutdown(); s.WaitForShutdown() }()
		if !s.ReadyForConnections(10 * time.Second) {
			b.Fatal("nats-server did not start")
		}
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "bench", Subjects: []string{"bench"}, Storage: jetstream.FileStorage}); err != nil {
			b.Fatal(err)
		}
		pub, err := natspub.New(natspub.Config{URL: s.ClientURL()})
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		relayRate(b, pub, n)
	})
	b.Run("rabbitmq", func(b *testing.B) {
		url := os.Getenv("SKIPLOCK_TEST_AMQP_URL")
		if url == "" {
			url = "amqp://guest:guest@127.0.0.1:5672/"
		}
		conn, err := amqp.Dial(url)
		if err != nil {
			b.Skipf("RabbitMQ not reachable (%v); start it with scripts/rabbitmq.sh start", err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		queue := fmt.Sprintf("skiplock-bench-%d", os.Getpid())
		if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
		defer ch.QueueDelete(queue, false, false, false)
		// Events carry the destination "bench": bind it to the queue on a direct exchange.
		if err := ch.ExchangeDeclare("skiplock-bench", "direct", true, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
		if err := ch.QueueBind(queue, "bench", "skiplock-bench", false, nil); err != nil {
			b.Fatal(err)
		}
		pub, err := amqppub.New(amqppub.Config{URL: url, Exchange: "skiplock-bench"})
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		relayRate(b, pub, n)
	})
}
