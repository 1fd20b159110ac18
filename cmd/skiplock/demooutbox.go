package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/webhookpub"
)

// demoOutbox is the demo's outbox side: each order also writes an "order.created"
// event in its transaction; a relay publishes the events as signed webhooks to a
// local receiver, which verifies every signature and deduplicates by event id with
// the inbox helper, in its own transaction.
type demoOutbox struct {
	outbox   *outbox.Outbox
	relay    *outbox.Relay
	hook     *webhookpub.Publisher
	srv      *httptest.Server
	received atomic.Int64
	dups     atomic.Int64
	badSig   atomic.Int64
	mu       sync.Mutex
	lastPub  int64
	lastAt   time.Time
}

// demoEventType is the type of every event the demo writes.
const demoEventType = "order.created"

const demoWebhookSecret = "whsec_ZGVtby13ZWJob29rLXNpZ25pbmcta2V5" // base64("demo-webhook-signing-key")

func startDemoOutbox(ctx context.Context, client *skiplock.Client) (*demoOutbox, error) {
	ob, err := outbox.New(client, outbox.Config{})
	if err != nil {
		return nil, err
	}
	pool := client.Pool()
	o := &demoOutbox{outbox: ob}
	inbox := ob.Inbox()
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhookpub.Verify([]string{demoWebhookSecret}, r.Header, body, 5*time.Minute); err != nil {
			o.badSig.Add(1)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// The consumer's own transaction: record the event id, then do the effect.
		err := pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
			first, err := inbox.Claim(r.Context(), tx, "demo-consumer", r.Header.Get("webhook-id"))
			if err == nil && !first {
				o.dups.Add(1)
			}
			return err
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		o.received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	if o.hook, err = webhookpub.New(webhookpub.Config{DefaultURL: o.srv.URL, Secrets: []string{demoWebhookSecret}}); err != nil {
		return nil, err
	}
	if o.relay, err = ob.NewRelay(o.hook, outbox.RelayConfig{}); err != nil {
		return nil, err
	}
	if err := o.relay.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *demoOutbox) write(ctx context.Context, tx pgx.Tx, orderID int64, customer string) error {
	payload, _ := json.Marshal(map[string]any{"order_id": orderID, "customer": customer})
	_, err := o.outbox.Write(ctx, tx, outbox.Event{
		AggregateType: "order", AggregateID: strconv.FormatInt(orderID, 10), EventType: demoEventType, Payload: payload,
	})
	return err
}

func (o *demoOutbox) line() string {
	st := o.relay.Stats()
	o.mu.Lock()
	defer o.mu.Unlock()
	rate := int64(0)
	if !o.lastAt.IsZero() {
		rate = int64(float64(st.Published-o.lastPub) / time.Since(o.lastAt).Seconds())
	}
	o.lastPub, o.lastAt = st.Published, time.Now()
	return fmt.Sprintf("outbox: published %6d (%4d/s) webhooks verified %6d", st.Published, rate, o.received.Load())
}

// drain waits, at most within, until the relay has published want events: the
// events of the last orders, so that the summary's counts agree.
func (o *demoOutbox) drain(want int64, within time.Duration) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for o.relay.Stats().Published < want {
		select {
		case <-tick.C:
		case <-deadline:
			return
		}
	}
}

func (o *demoOutbox) stop() {
	_ = o.relay.Stop(context.Background())
	o.hook.Close()
	o.srv.Close()
}

func (o *demoOutbox) summary() string {
	st := o.relay.Stats()
	return fmt.Sprintf("outbox: %d events published as signed webhooks, %d verified by the receiver (%d duplicates dropped by the inbox, %d bad signatures)",
		st.Published, o.received.Load(), o.dups.Load(), o.badSig.Load())
}
