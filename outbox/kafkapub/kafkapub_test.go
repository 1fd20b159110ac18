package kafkapub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest"
)

// newCluster starts an in-process Kafka cluster (kfake speaks the real wire
// protocol) with three brokers.
func newCluster(tb testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

var topicSeq atomic.Int64

func newTopic(tb testing.TB, c *kfake.Cluster) string {
	tb.Helper()
	name := fmt.Sprintf("skiplock-test-%d", topicSeq.Add(1))
	if err := c.CreateTopic(name, 3, nil); err != nil {
		tb.Fatal(err)
	}
	return name
}

func newPub(tb testing.TB, c *kfake.Cluster, cfg Config) *Publisher {
	tb.Helper()
	if cfg.SeedBrokers == nil {
		cfg.SeedBrokers = c.ListenAddrs()
	}
	p, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// consume reads topic from the start until done or the deadline.
func consume(tb testing.TB, c *kfake.Cluster, topic string, deadline time.Time, done func([]*kgo.Record) bool) []*kgo.Record {
	tb.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var got []*kgo.Record
	for !done(got) && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				tb.Errorf("fetch %s/%d: %v", t, p, err)
			}
		})
		got = append(got, fs.Records()...)
	}
	return got
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	c := newCluster(t)
	outboxtest.RunConformance(t, outboxtest.Harness{
		NewPublisher: func(t *testing.T) outbox.Publisher {
			p, err := New(Config{SeedBrokers: c.ListenAddrs()})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewDestination: func(t *testing.T) string { return newTopic(t, c) },
		Receive: func(t *testing.T, dest string, deadline time.Time, done func([]outboxtest.Received) bool) []outboxtest.Received {
			var out []outboxtest.Received
			consume(t, c, dest, deadline, func(rs []*kgo.Record) bool {
				for _, r := range rs[len(out):] {
					h := make(map[string]string, len(r.Headers))
					for _, kv := range r.Headers {
						h[kv.Key] = string(kv.Value)
					}
					id, _ := header(r, HeaderEventID)
					out = append(out, outboxtest.Received{ID: id, Destination: r.Topic, Payload: r.Value, Headers: h, Key: string(r.Key)})
				}
				return done(out)
			})
			return out
		},
		Keyed: true,
	})
}

func TestRecordShape(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t, c)
	p := newPub(t, c, Config{})
	m := outboxtest.NewMessage(topic, 1)
	m.Headers[HeaderEventID] = "forged"
	if err := p.Publish(ctxFor(t), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	rs := consume(t, c, topic, time.Now().Add(20*time.Second), func(rs []*kgo.Record) bool { return len(rs) == 1 })
	if len(rs) != 1 {
		t.Fatalf("got %d records", len(rs))
	}
	r := rs[0]
	want := map[string]string{
		HeaderEventID: m.ID, HeaderEventType: m.EventType, HeaderAggregateType: m.AggregateType,
		"x-tenant": "acme", "x-trace-id": m.Headers["x-trace-id"],
	}
	for k, v := range want {
		if got, ok := header(r, k); !ok || got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	ids := 0
	for _, h := range r.Headers {
		if h.Key == HeaderEventID {
			ids++
		}
	}
	if ids != 1 {
		t.Errorf("%d %s headers, want 1 (user header must not override)", ids, HeaderEventID)
	}
	if string(r.Key) != m.AggregateID || !bytes.Equal(r.Value, m.Payload) {
		t.Errorf("key %q value %q", r.Key, r.Value)
	}
}

func TestSameAggregateSamePartitionInOrder(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t, c)
	p := newPub(t, c, Config{})
	var msgs []outbox.Message
	for i := range 30 {
		m := outboxtest.NewMessage(topic, i)
		m.AggregateID = fmt.Sprintf("agg-%d", i%3)
		msgs = append(msgs, m)
	}
	for i, err := range p.Publish(ctxFor(t), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	rs := consume(t, c, topic, time.Now().Add(20*time.Second), func(rs []*kgo.Record) bool { return len(rs) == len(msgs) })
	partition := map[string]int32{}
	order := map[string][]string{}
	for _, r := range rs {
		if p, ok := partition[string(r.Key)]; ok && p != r.Partition {
			t.Errorf("key %s on partitions %d and %d", r.Key, p, r.Partition)
		}
		partition[string(r.Key)] = r.Partition
		id, _ := header(r, HeaderEventID)
		order[string(r.Key)] = append(order[string(r.Key)], id)
	}
	for _, m := range msgs {
		ids := order[m.AggregateID]
		if len(ids) == 0 || ids[0] != m.ID {
			t.Fatalf("aggregate %s out of order: got %v", m.AggregateID, order[m.AggregateID])
		}
		order[m.AggregateID] = ids[1:]
	}
}

// TestAcksAllAndIdempotent watches the requests the client sends: an idempotent
// producer id is requested, and every produce request asks for acks=all.
func TestAcksAllAndIdempotent(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t, c)
	var produces, badAcks, initPID atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		produces.Add(1)
		if req.(*kmsg.ProduceRequest).Acks != -1 {
			badAcks.Add(1)
		}
		return nil, nil, false // observe only
	})
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		initPID.Add(1)
		return nil, nil, false
	})
	p := newPub(t, c, Config{})
	for i, err := range p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage(topic, 1), outboxtest.NewMessage(topic, 2)}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if produces.Load() == 0 || badAcks.Load() != 0 {
		t.Errorf("%d produce requests, %d without acks=all", produces.Load(), badAcks.Load())
	}
	if initPID.Load() == 0 {
		t.Error("no InitProducerID request: the producer is not idempotent")
	}
}

func TestDefaultTopicAndNoDestination(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t, c)
	withDefault := newPub(t, c, Config{DefaultTopic: topic})
	m := outboxtest.NewMessage("", 1)
	if err := withDefault.Publish(ctxFor(t), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	rs := consume(t, c, topic, time.Now().Add(20*time.Second), func(rs []*kgo.Record) bool { return len(rs) == 1 })
	if len(rs) != 1 {
		t.Fatalf("default topic got %d records", len(rs))
	}
	without := newPub(t, c, Config{})
	err := without.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("", 2)})[0]
	if !errors.As(err, new(*skiplock.PermanentError)) || !strings.Contains(err.Error(), "DefaultTopic") {
		t.Fatalf("got %v, want a permanent error naming DefaultTopic", err)
	}
}

func TestTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t, c)
	p := newPub(t, c, Config{Options: []kgo.Opt{kgo.ProducerBatchMaxBytes(1024)}})
	big := outboxtest.NewMessage(topic, 1)
	big.Payload = []byte(`"` + strings.Repeat("x", 4096) + `"`)
	small := outboxtest.NewMessage(topic, 2)
	errs := p.Publish(ctxFor(t), []outbox.Message{big, small})
	if !errors.As(errs[0], new(*skiplock.PermanentError)) || !errors.Is(errs[0], kerr.MessageTooLarge) {
		t.Errorf("too large: got %v, want a permanent MessageTooLarge", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("small message: %v", errs[1])
	}
}

func TestUnknownTopicIsRetryable(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPub(t, c, Config{Timeout: 10 * time.Second, Options: []kgo.Opt{kgo.UnknownTopicRetries(1)}})
	err := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("no-such-topic", 1)})[0]
	if err == nil || errors.As(err, new(*skiplock.PermanentError)) {
		t.Fatalf("got %v, want a retryable error", err)
	}
}

func TestBrokerUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	p, err := New(Config{SeedBrokers: []string{addr}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	errs := p.Publish(context.Background(), []outbox.Message{outboxtest.NewMessage("t", 1), outboxtest.NewMessage("t", 2)})
	for i, err := range errs {
		if err == nil || errors.As(err, new(*skiplock.PermanentError)) {
			t.Errorf("message %d: got %v, want a retryable error", i, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Publish took %v with a 1s timeout", d)
	}
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "SeedBrokers: empty"},
		{Config{SeedBrokers: []string{""}}, "entry is empty"},
		{Config{SeedBrokers: []string{"localhost:9092"}, Timeout: -1}, "negative"},
		{Config{SeedBrokers: []string{"localhost:9092"}, Options: []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck())}}, "Config.Options"},
	} {
		p, err := New(c.cfg)
		if err == nil {
			_ = p.Close()
		}
		if !errors.Is(err, skiplock.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error mentioning %q", c.cfg, err, c.want)
		}
	}
}

func BenchmarkPublish(b *testing.B) {
	c := newCluster(b)
	topic := newTopic(b, c)
	p := newPub(b, c, Config{})
	const batch = 100
	msgs := make([]outbox.Message, batch)
	for i := range msgs {
		msgs[i] = outboxtest.NewMessage(topic, i)
	}
	ctx := context.Background()
	for b.Loop() {
		for i, err := range p.Publish(ctx, msgs) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
}

// With no Logger, the publisher logs to slog.Default() at Warn and above, not to a
// discard handler.
func TestNilLoggerIsSlogDefault(t *testing.T) {
	t.Parallel()
	p, err := New(Config{SeedBrokers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.log.Enabled(context.Background(), slog.LevelWarn) || p.log.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("the default logger is not slog.Default() at Warn")
	}
}
