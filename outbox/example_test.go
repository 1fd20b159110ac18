package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
)

// newOutbox is what an application does once at start: a client for its schema,
// and that client's outbox.
func newOutbox(pool *pgxpool.Pool) *outbox.Outbox {
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: "app_jobs"})
	if err != nil {
		panic(err)
	}
	ob, err := outbox.New(client, outbox.Config{})
	if err != nil {
		panic(err)
	}
	return ob
}

// Write an order and its "order.placed" event in one transaction: the event exists
// if and only if the order does. (Needs a database, so it is compiled, not run.)
func ExampleOutbox_Write() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	ob := newOutbox(pool)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, 42, 1999); err != nil {
			return err
		}
		payload, _ := json.Marshal(map[string]any{"order_id": 42, "total": 1999})
		id, err := ob.Write(ctx, tx, outbox.Event{
			AggregateType: "order",
			AggregateID:   "42",
			EventType:     "order.placed",
			Destination:   "orders", // topic, routing key, subject or webhook endpoint name
			Payload:       payload,
			Headers:       map[string]string{"x-tenant": "acme"},
		})
		fmt.Println("event", id)
		return err
	})
	if err != nil {
		panic(err)
	}
}

// Run a relay until SIGINT: Start returns once it runs, and Stop finishes the
// batches in flight (within its context's deadline) before returning.
func ExampleRelay_Start() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	pub := memorypub.New() // or webhookpub.New, amqppub.New, kafkapub.New, natspub.New
	relay, err := newOutbox(pool).NewRelay(pub, outbox.RelayConfig{BatchSize: 500, OrderedByAggregate: true})
	if err != nil {
		panic(err)
	}
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := relay.Stop(sctx); err != nil {
		panic(err)
	}
}

// A consumer skips redelivered events atomically with its own effects. Its database
// holds skiplock's schema too; the client only names it.
func ExampleInbox_Claim() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("CONSUMER_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	inbox := newOutbox(pool).Inbox()
	handle := func(msg outbox.Message) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			first, err := inbox.Claim(ctx, tx, "billing", msg.ID)
			if err != nil || !first {
				return err // duplicate: already applied
			}
			_, err = tx.Exec(ctx, `UPDATE accounts SET paid = true WHERE order_id = $1`, msg.AggregateID)
			return err
		})
	}
	_ = handle
}
