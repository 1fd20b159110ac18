package webhookpub_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/webhookpub"
)

func Example() {
	// The secret both sides share, as Standard Webhooks distributes it.
	const secret = "whsec_c2tpcGxvY2stZXhhbXBsZS1zZWNyZXQ="

	// A receiver: verify before trusting anything in the request.
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhookpub.Verify([]string{secret}, r.Header, body, 5*time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Printf("received %s %s: %s\n", r.Header.Get("webhook-id"), r.URL.Path, body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	pub, err := webhookpub.New(webhookpub.Config{
		Endpoints: map[string]string{"billing": receiver.URL + "/hooks/billing"},
		Secrets:   []string{secret},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()

	errs := pub.Publish(context.Background(), []outbox.Message{{
		ID:          "evt_1",
		EventType:   "order.paid",
		Destination: "billing",
		Payload:     []byte(`{"order":42}`),
	}})
	fmt.Println("published:", errs[0] == nil)
	// Output:
	// received evt_1 /hooks/billing: {"order":42}
	// published: true
}
