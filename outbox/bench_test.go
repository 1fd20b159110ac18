package outbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/outboxbench"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/memorypub"
	"github.com/skiplock/skiplock/outbox/webhookpub"
)

// Run with: go test -run '^$' -bench RelayThroughput -benchtime 1x ./outbox/
func BenchmarkRelayThroughput(b *testing.B) {
	const n = 100_000
	pubs := map[string]func(b *testing.B) outbox.Publisher{
		"memorypub": func(*testing.B) outbox.Publisher { return memorypub.New() },
		"webhook": func(b *testing.B) outbox.Publisher {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
			b.Cleanup(srv.Close)
			p, err := webhookpub.New(webhookpub.Config{Endpoints: map[string]string{"bench": srv.URL}, Secrets: []string{webhookSecret}, MaxConcurrency: 32})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { p.Close() })
			return p
		},
	}
	for _, name := range []string{"memorypub", "webhook"} {
		for _, ordered := range []bool{false, true} {
			label := name + "/unordered"
			if ordered {
				label = name + "/ordered"
			}
			b.Run(label, func(b *testing.B) {
				pub := pubs[name](b)
				var total time.Duration
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					schema := pgtest.Schema(b)
					b.StartTimer()
					d, err := outboxbench.RelayThroughputWith(context.Background(), pgtest.Pool(b), schema, pub, n, benchOptions(ordered))
					if err != nil {
						b.Fatal(err)
					}
					total += d
				}
				b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
			})
		}
	}
}

func benchOptions(ordered bool) outboxbench.Options {
	if ordered {
		// Ordered claims skip every event behind an in-flight predecessor; one relay
		// with large batches avoids relays scanning past each other's heads.
		return outboxbench.Options{Ordered: true, Relays: 1}
	}
	return outboxbench.Options{Relays: relaysFromEnv()}
}

// relaysFromEnv lets a run compare relay counts: SKIPLOCK_BENCH_RELAYS=1 (default 2).
func relaysFromEnv() int {
	if n, err := strconv.Atoi(os.Getenv("SKIPLOCK_BENCH_RELAYS")); err == nil && n > 0 {
		return n
	}
	return 2
}
