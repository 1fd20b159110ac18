package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/skiplock/skiplock"
)

// DepthOptions configure a DepthCollector.
type DepthOptions struct {
	// Namespace prefixes the metric names. Default "skiplock".
	Namespace string
	// Queues are the queues to report, one series each; "" is every queue together
	// (the series with queue=""). Default: [""].
	Queues []string
	// MinInterval is the least time between two reads of a queue's depth; scrapes in
	// between get the last value. Default 1s.
	MinInterval time.Duration
	// Timeout bounds one scrape's reads. Default 5s.
	Timeout time.Duration
	// ConstLabels are added to every metric (for example the schema).
	ConstLabels prometheus.Labels
}

// DepthCollector exports Client.Depth, the capped count of due jobs, for autoscaling
// on queue depth (a Kubernetes HPA on an external or Prometheus-adapter metric):
//
//	skiplock_queue_depth{queue}   gauge: due jobs (pending, run_at passed), at most skiplock.DepthCap
//	skiplock_queue_depth_up       gauge: 1 if the last read of every queue succeeded
//
// Each read is one indexed statement, unlike the Stats that Metrics reads, so it is
// cheap enough to scrape every few seconds from every pod. A queue whose read fails
// keeps no series until it succeeds again. Register it with a prometheus.Registerer;
// it is safe for concurrent scrapes.
type DepthCollector struct {
	c     *skiplock.Client
	opts  DepthOptions
	depth *prometheus.Desc
	up    *prometheus.Desc

	cache perQueue[int64]
}

// NewDepthCollector returns a DepthCollector for c.
func NewDepthCollector(c *skiplock.Client, opts DepthOptions) *DepthCollector {
	if opts.Namespace == "" {
		opts.Namespace = "skiplock"
	}
	if len(opts.Queues) == 0 {
		opts.Queues = []string{""}
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	return &DepthCollector{c: c, opts: opts,
		depth: prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, "", "queue_depth"),
			"Due jobs (pending, run_at passed) of the queue (\"\": all queues), counted up to a cap (skiplock.DepthCap).",
			[]string{"queue"}, opts.ConstLabels),
		up: prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, "", "queue_depth_up"),
			"1 if the last read of every queue's depth succeeded.", nil, opts.ConstLabels),
	}
}

// Describe implements prometheus.Collector.
func (d *DepthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.depth
	ch <- d.up
}

// Collect implements prometheus.Collector.
func (d *DepthCollector) Collect(ch chan<- prometheus.Metric) {
	vals, ok := d.read(context.Background())
	for q, n := range vals {
		ch <- prometheus.MustNewConstMetric(d.depth, prometheus.GaugeValue, float64(n), q)
	}
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(d.up, prometheus.GaugeValue, up)
}

// read returns the depths, reading them first when they are older than MinInterval.
func (d *DepthCollector) read(ctx context.Context) (map[string]int64, bool) {
	return d.cache.get(ctx, d.opts.MinInterval, d.opts.Timeout, func(ctx context.Context, vals map[string]int64) bool {
		ok := true
		for _, q := range d.opts.Queues {
			n, err := d.c.Depth(ctx, q)
			if err != nil {
				ok = false
				continue
			}
			vals[q] = n
		}
		return ok
	})
}
