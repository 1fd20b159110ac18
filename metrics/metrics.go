// Package metrics exports skiplock's figures to Prometheus.
//
// A Metrics is a prometheus.Collector. On scrape it reads Client.Stats (at most once
// per Options.MinInterval; scrapes in between get the cached snapshot, so many
// Prometheus servers or a short scrape interval cost the database nothing more) and
// reports:
//
//	skiplock_jobs{queue,state}                       gauge: jobs per state (finished states may be sampled estimates)
//	skiplock_jobs_due{queue}                         gauge: pending jobs whose run_at has come
//	skiplock_oldest_due_age_seconds{queue}           gauge: the queue's health signal; alert on it
//	skiplock_expired_leases{queue}                   gauge: running jobs whose lease ran out
//	skiplock_queue_paused{queue}                     gauge: 1 while the queue is paused
//	skiplock_sequences_blocked{queue}                gauge: sequences held up by a failed job
//	skiplock_jobs_retrying{queue}                    gauge: pending jobs that already ran (retry backoff), all processes
//	skiplock_jobs_finished_recent{queue,state}       gauge: jobs finished within the recent window, all processes
//	skiplock_recent_window_seconds                   gauge: that window (Options.Stats.RecentWindow, default 1m)
//	skiplock_outbox_unpublished                      gauge
//	skiplock_outbox_lag_seconds                      gauge: age of the oldest unpublished event
//	skiplock_outbox_dead                             gauge
//	skiplock_vacuum_horizon_xid_age                  gauge: transactions since the oldest open snapshot began; alert on it
//	skiplock_vacuum_horizon_held_seconds             gauge: how long its transaction has been open (needs pg_read_all_stats
//	                                                 for other roles' sessions; absent when not known)
//	skiplock_jobs_dead_tuples                        gauge: PostgreSQL's estimate of dead tuples in the jobs table
//	skiplock_limit_holding{scope,target,key}         gauge: jobs holding a slot of a limit's bucket (claimed or running under a valid lease), all processes
//	skiplock_limit_max_running{scope,target,key}     gauge: the bucket's concurrency limit
//	skiplock_limit_started{scope,target,key}         gauge: the bucket's starts within its rate window, all processes
//	skiplock_limit_rate{scope,target,key}            gauge: the bucket's rate limit: most starts per window
//	skiplock_limit_window_seconds{scope,target,key}  gauge: that window (Limit.Per)
//	skiplock_stats_up                                gauge: 1 when the last reads (stats, limits) succeeded
//	skiplock_stats_duration_seconds                  gauge: how long the last read took
//	skiplock_<outcome>_total                         counters of this process (inserted, succeeded, failed,
//	                                                 retried, snoozed, cancelled, lease_lost, reclaimed)
//	skiplock_jobs_throttled_total                    counter: due jobs this process's claims left pending for a limit
//	skiplock_limit_handoffs_total                    counter: jobs claimed as successors of running jobs (slot handoff)
//	skiplock_limit_handoffs_returned_total           counter: successors given back to pending (predecessor too long, stop)
//	skiplock_retention_deleted_total                 counter: finished jobs this process's retention runs deleted
//	skiplock_retention_behind_total                  counter: retention runs that stopped at MaxBatches with expired jobs left; alert on its rate
//	skiplock_operation_failures_total{operation}     counter: failed claims, heartbeats, completions, maintenance runs
//	skiplock_operation_failing{operation}            gauge: 1 while the operation keeps failing; alert on it
//	skiplock_outbox_<outcome>_total                  counters of the relays added with AddRelay
//	skiplock_outbox_operation_failures_total{relay,operation}  counter: a relay's failed claims, publishes, marks
//	skiplock_outbox_operation_failing{relay,operation}         gauge: 1 while that operation keeps failing
//	skiplock_job_run_duration_seconds{queue,kind,outcome}   histogram
//	skiplock_job_queue_wait_seconds{queue,kind}             histogram: from due (run_at) to start
//
// The histograms are fed from Client.Subscribe, so they cover the jobs this process
// runs. Counters are this process's; sum them across processes with PromQL.
//
// The limit gauges (docs/limits.md) come from Client.LimitUsages, read on the same
// schedule as the stats: scope is "queue" or "kind", target the queue's or kind's
// name, key the bucket's concurrency key ("" for a limit on all the jobs together).
// A limit on each key (skiplock.EachKey) has one series per key that is running jobs
// or started any within its window, so the series follow the active keys.
package metrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/outbox"
)

// Options configure a Metrics.
type Options struct {
	// Namespace prefixes every metric name. Default "skiplock".
	Namespace string
	// MinInterval is the least time between two database reads. Default 5s.
	MinInterval time.Duration
	// Timeout bounds one read. Default 5s.
	Timeout time.Duration
	// Stats tunes the read (see skiplock.StatsOpts). Default: the defaults.
	Stats skiplock.StatsOpts
	// RunBuckets and WaitBuckets are the histograms' buckets, in seconds. Default
	// prometheus.ExponentialBuckets(0.001, 4, 10) (1 ms … 4.4 min) for both.
	RunBuckets, WaitBuckets []float64
	// ConstLabels are added to every metric (for example the schema).
	ConstLabels prometheus.Labels
}

// Metrics collects a client's figures. Register it with a prometheus.Registerer.
type Metrics struct {
	c    *skiplock.Client
	opts Options

	cache  *StatsCache
	mu     sync.Mutex
	relays map[string]*outbox.Relay
	descs  map[string]*prometheus.Desc
	run    *prometheus.HistogramVec
	wait   *prometheus.HistogramVec
	unsub  func()
	done   chan struct{}
}

// StatsCache reads Client.Stats at most once per interval and hands out the last
// snapshot in between. Safe for concurrent use.
type StatsCache struct {
	c        *skiplock.Client
	opts     skiplock.StatsOpts
	interval time.Duration
	timeout  time.Duration

	mu    sync.Mutex
	last  time.Time
	stats *skiplock.Stats
	err   error
	took  time.Duration

	limLast time.Time
	limits  []skiplock.LimitUsage
	limErr  error
}

// NewStatsCache returns a cache reading c's stats with opts at most once per
// interval, each read bounded by timeout.
func NewStatsCache(c *skiplock.Client, opts skiplock.StatsOpts, interval, timeout time.Duration) *StatsCache {
	return &StatsCache{c: c, opts: opts, interval: interval, timeout: timeout}
}

// Get returns the cached stats, reading them first when they are older than the
// interval, and how long the last read took. The error is the last read's; the stats
// are then the last good ones (nil if none).
func (s *StatsCache) Get(ctx context.Context) (*skiplock.Stats, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Host time paces the cache only; it never touches job state.
	now := hostclock.Now()
	if s.last.IsZero() || now.Sub(s.last) >= s.interval {
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		st, err := s.c.Stats(ctx, &s.opts)
		cancel()
		s.took = hostclock.Since(now)
		s.last = now
		s.err = nil
		if err != nil {
			s.err = fmt.Errorf("metrics: reading stats: %w", err)
		} else {
			s.stats = st
		}
	}
	return s.stats, s.took, s.err
}

// Limits returns the cached Client.LimitUsages, reading them first when they are
// older than the interval (each read bounded by the timeout). The error is the last
// read's; the usages are then the last good ones (nil if none).
func (s *StatsCache) Limits(ctx context.Context) ([]skiplock.LimitUsage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := hostclock.Now() // paces the cache only
	if s.limLast.IsZero() || now.Sub(s.limLast) >= s.interval {
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		use, err := s.c.LimitUsages(ctx)
		cancel()
		s.limLast = now
		s.limErr = nil
		if err != nil {
			s.limErr = fmt.Errorf("metrics: reading limit usage: %w", err)
		} else {
			s.limits = use
		}
	}
	return s.limits, s.limErr
}

// New returns a Metrics for c and starts feeding its histograms from c's events.
// Call Close when done.
func New(c *skiplock.Client, opts Options) *Metrics {
	if opts.Namespace == "" {
		opts.Namespace = "skiplock"
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.RunBuckets == nil {
		opts.RunBuckets = prometheus.ExponentialBuckets(0.001, 4, 10)
	}
	if opts.WaitBuckets == nil {
		opts.WaitBuckets = prometheus.ExponentialBuckets(0.001, 4, 10)
	}
	m := &Metrics{c: c, opts: opts, relays: map[string]*outbox.Relay{}, descs: map[string]*prometheus.Desc{},
		done: make(chan struct{}), cache: NewStatsCache(c, opts.Stats, opts.MinInterval, opts.Timeout)}
	d := func(name, help string, labels ...string) {
		m.descs[name] = prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, "", name), help, labels, opts.ConstLabels)
	}
	d("jobs", "Jobs per queue and state (finished states are estimated from a sample on large tables).", "queue", "state")
	d("jobs_due", "Pending jobs whose run_at has come.", "queue")
	d("oldest_due_age_seconds", "Age of the oldest due pending job: the queue's health signal.", "queue")
	d("expired_leases", "Running jobs whose lease has run out (the reclaimer's work).", "queue")
	d("queue_paused", "1 while the queue is paused (no client claims its jobs).", "queue")
	d("sequences_blocked", "Sequences whose failed job holds up later jobs until an operator retries or cancels it.", "queue")
	d("jobs_retrying", "Pending jobs that already ran at least once (waiting out a retry backoff), from the database.", "queue")
	d("jobs_finished_recent", "Jobs of every process that finished within the recent window (skiplock_recent_window_seconds), from the database.", "queue", "state")
	d("recent_window_seconds", "The window of skiplock_jobs_finished_recent.")
	d("outbox_unpublished", "Outbox events not yet published and not dead.")
	d("outbox_lag_seconds", "Age of the oldest unpublished outbox event.")
	d("outbox_dead", "Outbox events parked after their last attempt.")
	d("vacuum_horizon_xid_age", "Transaction ids assigned since the database's oldest open snapshot or transaction began: vacuum cannot remove what it may see.")
	d("vacuum_horizon_held_seconds", "How long the transaction holding the database's vacuum horizon has been open.")
	d("jobs_dead_tuples", "PostgreSQL's estimate of the dead tuples in the jobs table (all partitions).")
	lim := []string{"scope", "target", "key"}
	d("limit_holding", "Jobs of every process holding a slot of a limit's bucket: claimed or running under a valid lease (key: the concurrency key, \"\" for a limit on all jobs).", lim...)
	d("limit_max_running", "The most jobs a limit's bucket may run at once.", lim...)
	d("limit_started", "Jobs of every process started in a limit's bucket within its rate window.", lim...)
	d("limit_rate", "The most starts a limit's bucket may make per window (skiplock_limit_window_seconds).", lim...)
	d("limit_window_seconds", "The window of a limit's rate.", lim...)
	d("stats_up", "1 if the last database read for these metrics succeeded.")
	d("stats_duration_seconds", "How long the last database read for these metrics took.")
	for _, n := range []string{"inserted", "succeeded", "failed", "retried", "snoozed", "cancelled", "lease_lost", "reclaimed"} {
		d(n+"_total", "Jobs "+n+" by this process.")
	}
	d("jobs_throttled_total", "Due jobs that this process's claims left pending because a limit held them back (once per claim).")
	d("limit_handoffs_total", "Jobs this process claimed as successors of its running jobs, taking over their limit slots.")
	d("limit_handoffs_returned_total", "Successors this process gave back to pending: their predecessor ran too long, or the client stopped.")
	d("retention_deleted_total", "Finished jobs this process's retention runs deleted row by row.")
	d("retention_behind_total", "Retention runs of this process that stopped at their batch cap (MaxBatches) with expired jobs left: retention is behind the completions.")
	d("operation_failures_total", "Failed attempts of this process's repeating operations (claim, heartbeat, completion, maintenance:<service>).", "operation")
	d("operation_failing", "1 while the operation's latest attempt failed.", "operation")
	for _, n := range []string{"published", "retried", "dead", "lease_lost", "errors"} {
		d("outbox_"+n+"_total", "Outbox events "+n+" by this process's relays (errors: failed statements).", "relay")
	}
	d("outbox_operation_failures_total", "Failed attempts of a relay's repeating operations (relay:claim, relay:publish, relay:mark).", "relay", "operation")
	d("outbox_operation_failing", "1 while the relay operation's latest attempt failed.", "relay", "operation")
	m.run = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: opts.Namespace, Name: "job_run_duration_seconds",
		Help: "Handler run time of the jobs this process ran.", Buckets: opts.RunBuckets, ConstLabels: opts.ConstLabels},
		[]string{"queue", "kind", "outcome"})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: opts.Namespace, Name: "job_queue_wait_seconds",
		Help: "Time from a job's run_at to its start, for the jobs this process ran.", Buckets: opts.WaitBuckets, ConstLabels: opts.ConstLabels},
		[]string{"queue", "kind"})
	events, unsub := c.Subscribe()
	m.unsub = unsub
	go func() {
		defer close(m.done)
		for ev := range events {
			m.Observe(ev)
		}
	}()
	return m
}

// Observe records one job outcome in the histograms. New subscribes to the client's
// events and calls it; call it yourself only for events of another source.
func (m *Metrics) Observe(ev *skiplock.Event) {
	if ev == nil || ev.Job == nil {
		return
	}
	m.run.WithLabelValues(ev.Job.Queue, ev.Job.Kind, string(ev.Kind)).Observe(ev.RunDuration.Seconds())
	m.wait.WithLabelValues(ev.Job.Queue, ev.Job.Kind).Observe(max(ev.QueueWait, 0).Seconds())
}

// AddRelay exports a relay's totals under the label relay=name.
func (m *Metrics) AddRelay(name string, r *outbox.Relay) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.relays[name] = r
}

// Close ends the event subscription.
func (m *Metrics) Close() {
	m.unsub()
	<-m.done
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
	m.run.Describe(ch)
	m.wait.Describe(ch)
}

// Snapshot returns the cached stats (see StatsCache.Get).
func (m *Metrics) Snapshot(ctx context.Context) (*skiplock.Stats, time.Duration, error) {
	return m.cache.Get(ctx)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	gauge := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(m.descs[name], prometheus.GaugeValue, v, labels...)
	}
	counter := func(name string, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(m.descs[name], prometheus.CounterValue, float64(v), labels...)
	}
	s, took, err := m.Snapshot(context.Background())
	use, limErr := m.cache.Limits(context.Background())
	up := 1.0
	if err != nil || limErr != nil {
		up = 0
	}
	gauge("stats_up", up)
	gauge("stats_duration_seconds", took.Seconds())
	if s != nil {
		for _, q := range s.Queues {
			for state, n := range map[string]int64{"pending": q.Pending, "claimed": q.Claimed, "running": q.Running, "succeeded": q.Succeeded,
				"failed": q.Failed, "cancelled": q.Cancelled} {
				gauge("jobs", float64(n), q.Queue, state)
			}
			gauge("jobs_due", float64(q.Due), q.Queue)
			gauge("oldest_due_age_seconds", q.OldestDueAge.Seconds(), q.Queue)
			gauge("expired_leases", float64(q.ExpiredLeases), q.Queue)
			gauge("jobs_retrying", float64(q.Retrying), q.Queue)
			paused := 0.0
			if q.Paused {
				paused = 1
			}
			gauge("queue_paused", paused, q.Queue)
			gauge("sequences_blocked", float64(q.BlockedSequences), q.Queue)
			for state, n := range map[string]int64{"succeeded": q.RecentSucceeded, "failed": q.RecentFailed, "cancelled": q.RecentCancelled} {
				gauge("jobs_finished_recent", float64(n), q.Queue, state)
			}
		}
		gauge("recent_window_seconds", s.Recent.Window.Seconds())
		gauge("outbox_unpublished", float64(s.Outbox.Unpublished))
		gauge("outbox_lag_seconds", s.Outbox.OldestUnpublishedAge.Seconds())
		gauge("outbox_dead", float64(s.Outbox.Dead))
		gauge("vacuum_horizon_xid_age", float64(s.Horizon.XIDAge))
		if s.Horizon.HeldForKnown {
			gauge("vacuum_horizon_held_seconds", s.Horizon.HeldFor.Seconds())
		}
		gauge("jobs_dead_tuples", float64(s.Horizon.DeadJobTuples))
	}
	for _, u := range use {
		scope, target := "queue", u.Limit.Queue
		if u.Limit.Kind != "" {
			scope, target = "kind", u.Limit.Kind
		}
		gauge("limit_holding", float64(u.Holding), scope, target, u.Bucket)
		if u.Limit.MaxRunning > 0 {
			gauge("limit_max_running", float64(u.Limit.MaxRunning), scope, target, u.Bucket)
		}
		if u.Limit.Rate > 0 {
			gauge("limit_started", float64(u.Started), scope, target, u.Bucket)
			gauge("limit_rate", float64(u.Limit.Rate), scope, target, u.Bucket)
			gauge("limit_window_seconds", u.Limit.Per.Seconds(), scope, target, u.Bucket)
		}
	}
	p := m.c.Counters()
	for name, v := range map[string]int64{"inserted": p.Inserted, "succeeded": p.Succeeded, "failed": p.Failed,
		"retried": p.Retried, "snoozed": p.Snoozed, "cancelled": p.Cancelled, "lease_lost": p.LeaseLost, "reclaimed": p.Reclaimed} {
		counter(name+"_total", v)
	}
	counter("jobs_throttled_total", p.Throttled)
	counter("limit_handoffs_total", p.Handoffs)
	counter("limit_handoffs_returned_total", p.HandoffsReturned)
	counter("retention_deleted_total", p.RetentionDeleted)
	counter("retention_behind_total", p.RetentionBehind)
	operations := func(prefix string, ops []skiplock.OperationStatus, labels ...string) {
		for _, op := range ops {
			failing := 0.0
			if op.Failing {
				failing = 1
			}
			l := append(labels[:len(labels):len(labels)], op.Operation)
			counter(prefix+"operation_failures_total", op.Failures, l...)
			gauge(prefix+"operation_failing", failing, l...)
		}
	}
	operations("", m.c.Operations())
	m.mu.Lock()
	relays := make(map[string]*outbox.Relay, len(m.relays))
	for k, v := range m.relays {
		relays[k] = v
	}
	m.mu.Unlock()
	for name, r := range relays {
		st := r.Stats()
		counter("outbox_published_total", st.Published, name)
		counter("outbox_retried_total", st.Retried, name)
		counter("outbox_dead_total", st.Dead, name)
		counter("outbox_lease_lost_total", st.LeaseLost, name)
		counter("outbox_errors_total", st.Errors, name)
		operations("outbox_", r.Operations(), name)
	}
	m.run.Collect(ch)
	m.wait.Collect(ch)
}
