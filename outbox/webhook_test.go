package outbox_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/webhookpub"
)

const webhookSecret = "whsec_dGVzdC1zZWNyZXQtMDEyMzQ1Njc4OQ=="

// End to end through the webhook adapter: a relay that dies between publish and mark
// makes the receiver see every event twice; the receiver's inbox applies each once.
func TestWebhookRelayCrashAndInboxDedup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.pool.Exec(e.ctx, "CREATE TABLE "+e.q("effects")+" (event_id text PRIMARY KEY)")
	e.must(err)

	var requests, duplicates atomic.Int64
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		requests.Add(1)
		if down.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(req.Body)
		if err := webhookpub.Verify([]string{webhookSecret}, req.Header, body, 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		id := req.Header.Get(webhookpub.HeaderID)
		tx, err := e.pool.Begin(req.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer tx.Rollback(context.Background())
		first, err := e.inbox.Claim(req.Context(), tx, "webhook-receiver", id)
		if err == nil && first {
			_, err = tx.Exec(req.Context(), "INSERT INTO "+e.q("effects")+" VALUES ($1)", id)
		} else if err == nil {
			duplicates.Add(1)
		}
		if err == nil {
			err = tx.Commit(req.Context())
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	pub, err := webhookpub.New(webhookpub.Config{DefaultURL: srv.URL, Secrets: []string{webhookSecret}})
	e.must(err)
	defer pub.Close()

	evs := make([]outbox.Event, 20)
	for i := range evs {
		evs[i] = event("G", i)
		evs[i].Destination = ""
	}
	_, err = e.ob.WriteMany(e.ctx, e.pool, evs)
	e.must(err)

	// The receiver is down first: attempts are counted, nothing is lost.
	down.Store(true)
	r := e.relay(pub, outbox.RelayConfig{})
	if p, f := e.runOnce(r); p != 0 || f != 20 {
		t.Fatalf("while down: published %d failed %d", p, f)
	}
	down.Store(false)
	e.clock.Advance(10 * time.Second)

	crashing := e.relay(pub, outbox.RelayConfig{})
	outbox.SetBeforeMark(crashing, func(context.Context) error { return errors.New("relay killed") })
	if _, _, err := crashing.RunOnce(e.ctx); err == nil {
		t.Fatal("expected the simulated crash")
	}
	e.clock.Advance(31 * time.Second)
	if p, _ := e.runOnce(r); p != 20 {
		t.Fatalf("after lease expiry published %d", p)
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("effects")); n != 20 || duplicates.Load() != 20 || requests.Load() != 60 {
		t.Fatalf("effects %d, duplicates %d, requests %d", n, duplicates.Load(), requests.Load())
	}
	if c := e.counts(); c.Published != 20 {
		t.Fatalf("counts %+v", c)
	}
}
