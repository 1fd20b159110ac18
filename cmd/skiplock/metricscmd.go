package main

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/health"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/metrics"
	"github.com/spf13/cobra"
)

func newMetricsCmd(db *dbFlags) *cobra.Command {
	var (
		addr         string
		minInterval  time.Duration
		maxOldestDue time.Duration
		maxOutboxLag time.Duration
		depthQueues  []string
		fairTop      int
	)
	cmd := &cobra.Command{
		Use:   "metrics [--listen :9187]",
		Short: "serve Prometheus /metrics, /healthz and /readyz for a schema",
		Long: `Serve Prometheus /metrics, /healthz and /readyz for a schema until SIGINT or SIGTERM.

The server starts even while the database is down: /healthz and /readyz then answer
503 with a JSON reason until it is reachable, and /metrics serves the process's own
metrics with skiplock_stats_up 0.`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "listen", ":9187", "listen address")
	fs.StringVar(&addr, "addr", ":9187", "listen address")
	_ = fs.MarkDeprecated("addr", "use --listen")
	durationFlag(cmd, &minInterval, "min-interval", 5*time.Second, "least time between two database reads; scrapes in between are served from cache (0: the default, 5s)")
	durationFlag(cmd, &maxOldestDue, "max-oldest-due", 5*time.Minute, "/readyz fails when a queue's oldest due job is older (0: the default, 5m)")
	durationFlag(cmd, &maxOutboxLag, "max-outbox-lag", 0, "/readyz fails when the oldest unpublished outbox event is older (0: not checked)")
	fs.StringSliceVar(&depthQueues, "depth-queues", nil, "also export skiplock_queue_depth (the capped due count, read every second at most) for these queues, comma-separated; \"\" is all queues together")
	fs.IntVar(&fairTop, "fair-top", 10, "fair queues: keys with series of their own (skiplock_fair_key_*), the rest summed under key \"*\"; 0: no fair-queue metrics")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		flag := "listen"
		if fs.Changed("addr") {
			flag = "addr"
		}
		if _, err := listenHost(cmd, flag, addr); err != nil {
			return err
		}
		if fairTop < 0 {
			return usagef(cmd, "--fair-top %d: want 0 or more", fairTop)
		}
		for _, q := range depthQueues {
			if q == "" {
				continue
			}
			if err := ident.ValidateQueue(q); err != nil {
				return usagef(cmd, "--depth-queues: %v", err)
			}
		}
		// No ping: the pool connects on the first probe or scrape, and again after
		// an outage, so the endpoints report the database's state rather than the
		// process failing to start.
		pool, where, err := db.openPool(cmd, 4)
		if err != nil {
			return err
		}
		defer pool.Close()
		schema := db.schemaName()
		c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: db.logger(cmd)})
		if err != nil {
			return err
		}
		defer c.Close()
		if err := refuseUnmigrated(cmd.Context(), c); err != nil {
			return err
		}
		m := metrics.New(c, metrics.Options{MinInterval: minInterval, ConstLabels: prometheus.Labels{"schema": schema}})
		defer m.Close()
		reg := prometheus.NewRegistry()
		reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		if len(depthQueues) > 0 {
			reg.MustRegister(metrics.NewDepthCollector(c, metrics.DepthOptions{Queues: depthQueues, ConstLabels: prometheus.Labels{"schema": schema}}))
		}
		if fairTop > 0 {
			reg.MustRegister(metrics.NewFairCollector(c, metrics.FairOptions{Top: fairTop, ConstLabels: prometheus.Labels{"schema": schema}}))
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		// A reader, often as a read-only role: its readiness does not ask for writes.
		h := health.Handler(c, health.Options{MaxOldestDue: maxOldestDue, MaxOutboxLag: maxOutboxLag, SkipWritable: true})
		mux.Handle("GET /healthz", h)
		mux.Handle("GET /readyz", h)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("metrics: listening on %s: %w", addr, err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		fmt.Fprintf(cmd.ErrOrStderr(), "serving /metrics, /healthz and /readyz on http://%s for schema %s at %s\n", ln.Addr(), schema, where)
		return serveUntilDone(ctx, srv, ln)
	}
	return cmd
}
