package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
	"github.com/skiplock/skiplock/outbox/webhookpub"
)

// runW8 measures the outbox relay: n events to an in-process publisher, then to a
// local webhook receiver that verifies every signature.
func runW8(ctx context.Context, e *Env) (*Result, error) {
	n := e.n(100000)
	schema, err := e.schema(ctx, "bench_w8")
	if err != nil {
		return nil, err
	}
	mem := memorypub.New()
	d, err := RelayThroughput(ctx, e.Pool, schema, mem, n, RelayOptions{})
	if err != nil {
		return nil, fmt.Errorf("W8 memory: %w", err)
	}
	if mem.Count() < n {
		return nil, fmt.Errorf("W8: memory publisher got %d of %d events", mem.Count(), n)
	}

	secret := "whsec_c2tpcGxvY2stYmVuY2gtc2VjcmV0"
	var received, badSig atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhookpub.Verify([]string{secret}, r.Header, body, 5*time.Minute); err != nil {
			badSig.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	hook, err := webhookpub.New(webhookpub.Config{DefaultURL: srv.URL, Endpoints: map[string]string{"bench": srv.URL}, Secrets: []string{secret}, MaxConcurrency: 32})
	if err != nil {
		return nil, err
	}
	defer hook.Close()
	webhookN := max(n/5, 10)
	schemaHook, err := e.schema(ctx, "bench_w8_webhook")
	if err != nil {
		return nil, err
	}
	dh, err := RelayThroughput(ctx, e.Pool, schemaHook, hook, webhookN, RelayOptions{})
	if err != nil {
		var lastErr string
		e.Pool.QueryRow(ctx, `SELECT coalesce(max(last_error), '') FROM "`+schemaHook+`".outbox`).Scan(&lastErr)
		return nil, fmt.Errorf("W8 webhook: %w (last error: %s)", err, lastErr)
	}
	if badSig.Load() != 0 || received.Load() < int64(webhookN) {
		return nil, fmt.Errorf("W8 webhook: %d verified deliveries of %d, %d bad signatures", received.Load(), webhookN, badSig.Load())
	}
	var _ outbox.Publisher = hook
	return &Result{Workload: "W8", N: n, Seconds: d.Seconds(), JobsPerSec: float64(n) / d.Seconds(), Settings: e.Settings,
		Verified: fmt.Sprintf("ok: %d events published (memory), %d signed webhooks verified", mem.Count(), received.Load()),
		Extra: map[string]any{
			"webhook_events":          webhookN,
			"webhook_events_per_sec":  int(float64(webhookN) / dh.Seconds()),
			"relays":                  2,
			"batch":                   1000,
			"memory_publisher_events": n,
		}}, nil
}
