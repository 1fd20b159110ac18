package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/skiplock/skiplock"
)

// OtherKeys is the key label of the series that sums a fair queue's keys beyond the
// top ones (FairCollector). It is skiplock.EachKey, which no job's concurrency key
// can be.
const OtherKeys = skiplock.EachKey

// FairOptions configure a FairCollector.
type FairOptions struct {
	// Namespace prefixes the metric names. Default "skiplock".
	Namespace string
	// Queues are the fair queues to report. Default: every queue that is fair when
	// a scrape reads (QueueList).
	Queues []string
	// Top is how many keys of each queue get series of their own, those with the
	// most due jobs; the rest are summed under the key OtherKeys. Default 10: a
	// queue has at most Top + 1 series per metric, whatever its number of keys.
	Top int
	// MinInterval is the least time between two reads; scrapes in between get the
	// last values. Default 15s: a read costs one index descent per key with pending
	// jobs and up to 10,000 index entries per key (skiplock.FairKeysOpts).
	MinInterval time.Duration
	// Timeout bounds one scrape's reads. Default 5s.
	Timeout time.Duration
	// ConstLabels are added to every metric (for example the schema).
	ConstLabels prometheus.Labels
}

// FairCollector exports the backlog of the keys of fair queues (docs/fairness.md),
// with bounded cardinality: the Top keys by due jobs and one series for the others.
//
//	skiplock_fair_key_due{queue,key}                  gauge: due jobs of the key, counted up to 10,000
//	skiplock_fair_key_oldest_due_seconds{queue,key}   gauge: age of the key's oldest due job (0: none due)
//	skiplock_fair_keys{queue}                         gauge: keys with pending jobs (read up to 100,000)
//	skiplock_fair_up                                  gauge: 1 if the last read of every queue succeeded
//
// key is OtherKeys ("*") on the series that sums the keys beyond the top ones (for
// its oldest due age: the oldest of theirs). Which keys are on top changes as
// backlogs move; a key that drops out stops having a series. Register it with a
// prometheus.Registerer; it is safe for concurrent scrapes.
type FairCollector struct {
	c                *skiplock.Client
	opts             FairOptions
	due, oldest, cnt *prometheus.Desc
	up               *prometheus.Desc

	cache perQueue[[]skiplock.FairKeyStats]
}

// NewFairCollector returns a FairCollector for c.
func NewFairCollector(c *skiplock.Client, opts FairOptions) *FairCollector {
	if opts.Namespace == "" {
		opts.Namespace = "skiplock"
	}
	if opts.Top <= 0 {
		opts.Top = 10
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = 15 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	name := func(n string) string { return prometheus.BuildFQName(opts.Namespace, "", n) }
	return &FairCollector{c: c, opts: opts,
		due: prometheus.NewDesc(name("fair_key_due"),
			"Due jobs of a key of a fair queue, counted up to 10,000 (key \"*\": the keys beyond the top ones, summed).",
			[]string{"queue", "key"}, opts.ConstLabels),
		oldest: prometheus.NewDesc(name("fair_key_oldest_due_seconds"),
			"Age of the oldest due job of a key of a fair queue (key \"*\": of the keys beyond the top ones); 0 when none is due.",
			[]string{"queue", "key"}, opts.ConstLabels),
		cnt: prometheus.NewDesc(name("fair_keys"),
			"Keys of a fair queue that have pending jobs (read up to 100,000).", []string{"queue"}, opts.ConstLabels),
		up: prometheus.NewDesc(name("fair_up"), "1 if the last read of every fair queue's keys succeeded.", nil, opts.ConstLabels),
	}
}

// Describe implements prometheus.Collector.
func (f *FairCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.due
	ch <- f.oldest
	ch <- f.cnt
	ch <- f.up
}

// Collect implements prometheus.Collector.
func (f *FairCollector) Collect(ch chan<- prometheus.Metric) {
	vals, ok := f.read(context.Background())
	for q, keys := range vals {
		n := 0
		for _, k := range keys {
			key := k.Key
			if k.Other {
				key = OtherKeys
			}
			n += k.Keys
			ch <- prometheus.MustNewConstMetric(f.due, prometheus.GaugeValue, float64(k.Due), q, key)
			ch <- prometheus.MustNewConstMetric(f.oldest, prometheus.GaugeValue, k.OldestDue.Seconds(), q, key)
		}
		ch <- prometheus.MustNewConstMetric(f.cnt, prometheus.GaugeValue, float64(n), q)
	}
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(f.up, prometheus.GaugeValue, up)
}

// read returns the keys of every reported queue, reading them first when they are
// older than MinInterval.
func (f *FairCollector) read(ctx context.Context) (map[string][]skiplock.FairKeyStats, bool) {
	return f.cache.get(ctx, f.opts.MinInterval, f.opts.Timeout, func(ctx context.Context, vals map[string][]skiplock.FairKeyStats) bool {
		queues := f.opts.Queues
		if len(queues) == 0 {
			qs, err := f.c.QueueList(ctx)
			if err != nil {
				return false
			}
			for _, q := range qs {
				if q.Fair {
					queues = append(queues, q.Name)
				}
			}
		}
		ok := true
		for _, q := range queues {
			keys, err := f.c.FairKeys(ctx, q, &skiplock.FairKeysOpts{Top: f.opts.Top})
			if err != nil {
				ok = false
				continue
			}
			vals[q] = keys
		}
		return ok
	})
}
