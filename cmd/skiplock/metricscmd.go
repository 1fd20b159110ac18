package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/skiplock/skiplock/health"
	"github.com/skiplock/skiplock/metrics"
)

func init() {
	register("metrics", "serve Prometheus /metrics, /healthz and /readyz for a schema", runMetrics)
}

// listeningKey carries a func(addr string) that runMetrics calls with the bound
// address (tests listen on port 0).
type listeningKey struct{}

func runMetrics(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	fs.SetOutput(errW(ctx))
	var (
		db           dbFlags
		addr         string
		minInterval  time.Duration
		maxOldestDue time.Duration
		maxOutboxLag time.Duration
	)
	db.register(fs)
	fs.StringVar(&addr, "addr", ":9187", "listen address")
	fs.DurationVar(&minInterval, "min-interval", 5*time.Second, "least time between two database reads (scrapes in between are served from cache)")
	fs.DurationVar(&maxOldestDue, "max-oldest-due", 5*time.Minute, "/readyz fails when a queue's oldest due job is older")
	fs.DurationVar(&maxOutboxLag, "max-outbox-lag", 0, "/readyz fails when the oldest unpublished outbox event is older (0: not checked)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, done, err := opsClient(ctx, &db, 4)
	if err != nil {
		return err
	}
	defer done()
	m := metrics.New(c, metrics.Options{MinInterval: minInterval, ConstLabels: prometheus.Labels{"schema": db.schema}})
	defer m.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	h := health.Handler(c, health.Options{MaxOldestDue: maxOldestDue, MaxOutboxLag: maxOutboxLag})
	mux.Handle("GET /healthz", h)
	mux.Handle("GET /readyz", h)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(errW(ctx), "serving /metrics, /healthz and /readyz on http://%s\n", ln.Addr())
	if f, ok := ctx.Value(listeningKey{}).(func(string)); ok {
		f(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
