// Package otelmetrics reports skiplock's figures through an OpenTelemetry meter, for
// services that export metrics with the OpenTelemetry SDK rather than a Prometheus
// registry. It has the same instruments as package metrics, named with dots
// (skiplock.jobs, skiplock.oldest_due_age, …): observable gauges and counters read in
// one callback from a cached Client.Stats, and two histograms fed from the client's
// events. Of the limits it reports skiplock.limit.holding, .max_running, .started,
// .rate and .window (attributes scope, target and key, from a cached
// Client.LimitUsages) and the counters skiplock.jobs.throttled and
// skiplock.limit.handoffs.
//
// It depends only on the OpenTelemetry API (go.opentelemetry.io/otel/metric); the
// application chooses and configures the SDK and exporter.
package otelmetrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/metrics"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Bridge feeds a meter from a client. Close it when done.
type Bridge struct {
	reg   metric.Registration
	unsub func()
	done  chan struct{}
	once  sync.Once
}

// Options configure Register.
type Options struct {
	// MinInterval is the least time between two database reads. Default 5s.
	MinInterval time.Duration
	// Stats tunes the read (see skiplock.StatsOpts).
	Stats skiplock.StatsOpts
}

// Register creates skiplock's instruments on meter and starts feeding them from c.
func Register(meter metric.Meter, c *skiplock.Client, opts Options) (*Bridge, error) {
	if opts.MinInterval <= 0 {
		opts.MinInterval = 5 * time.Second
	}
	cache := metrics.NewStatsCache(c, opts.Stats, opts.MinInterval, 5*time.Second)

	var err error
	gauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		if err != nil {
			return nil
		}
		var g metric.Float64ObservableGauge
		g, err = meter.Float64ObservableGauge("skiplock."+name, metric.WithUnit(unit), metric.WithDescription(desc))
		return g
	}
	jobs := gauge("jobs", "{job}", "Jobs per queue and state (finished states may be estimated).")
	due := gauge("jobs_due", "{job}", "Pending jobs whose run_at has come.")
	oldest := gauge("oldest_due_age", "s", "Age of the oldest due pending job.")
	expired := gauge("expired_leases", "{job}", "Running jobs whose lease has run out.")
	unpublished := gauge("outbox.unpublished", "{event}", "Outbox events not yet published.")
	lag := gauge("outbox.lag", "s", "Age of the oldest unpublished outbox event.")
	dead := gauge("outbox.dead", "{event}", "Outbox events parked after their last attempt.")
	horizonAge := gauge("vacuum_horizon.xid_age", "{transaction}",
		"Transaction ids assigned since the database's oldest open snapshot or transaction began.")
	horizonHeld := gauge("vacuum_horizon.held", "s", "How long the transaction holding the database's vacuum horizon has been open.")
	deadTuples := gauge("jobs.dead_tuples", "{tuple}", "PostgreSQL's estimate of the dead tuples in the jobs table.")
	limHolding := gauge("limit.holding", "{job}", "Jobs of every process holding a slot of a limit's bucket: claimed or running under a valid lease.")
	limMax := gauge("limit.max_running", "{job}", "The most jobs a limit's bucket may run at once.")
	limStarted := gauge("limit.started", "{job}", "Jobs of every process started in a limit's bucket within its rate window.")
	limRate := gauge("limit.rate", "{job}", "The most starts a limit's bucket may make per window (skiplock.limit.window).")
	limWindow := gauge("limit.window", "s", "The window of a limit's rate.")
	var outcomes, throttled, handoffs metric.Int64ObservableCounter
	if err == nil {
		outcomes, err = meter.Int64ObservableCounter("skiplock.jobs.outcomes", metric.WithUnit("{job}"),
			metric.WithDescription("Job outcomes of this process (attribute outcome)."))
	}
	if err == nil {
		throttled, err = meter.Int64ObservableCounter("skiplock.jobs.throttled", metric.WithUnit("{job}"),
			metric.WithDescription("Due jobs that this process's claims left pending because a limit held them back."))
	}
	if err == nil {
		handoffs, err = meter.Int64ObservableCounter("skiplock.limit.handoffs", metric.WithUnit("{job}"),
			metric.WithDescription("Jobs this process claimed as successors of its running jobs (attribute result: claimed, or returned to pending)."))
	}
	var run, wait metric.Float64Histogram
	if err == nil {
		run, err = meter.Float64Histogram("skiplock.job.run_duration", metric.WithUnit("s"),
			metric.WithDescription("Handler run time of the jobs this process ran."))
	}
	if err == nil {
		wait, err = meter.Float64Histogram("skiplock.job.queue_wait", metric.WithUnit("s"),
			metric.WithDescription("Time from a job's run_at to its start."))
	}
	if err != nil {
		return nil, fmt.Errorf("otelmetrics: creating instruments: %w", err)
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		s, _, err := cache.Get(ctx)
		if s != nil {
			for _, q := range s.Queues {
				qa := attribute.String("queue", q.Queue)
				for state, n := range map[string]int64{"pending": q.Pending, "claimed": q.Claimed, "running": q.Running, "succeeded": q.Succeeded,
					"failed": q.Failed, "cancelled": q.Cancelled} {
					o.ObserveFloat64(jobs, float64(n), metric.WithAttributes(qa, attribute.String("state", state)))
				}
				o.ObserveFloat64(due, float64(q.Due), metric.WithAttributes(qa))
				o.ObserveFloat64(oldest, q.OldestDueAge.Seconds(), metric.WithAttributes(qa))
				o.ObserveFloat64(expired, float64(q.ExpiredLeases), metric.WithAttributes(qa))
			}
			o.ObserveFloat64(unpublished, float64(s.Outbox.Unpublished))
			o.ObserveFloat64(lag, s.Outbox.OldestUnpublishedAge.Seconds())
			o.ObserveFloat64(dead, float64(s.Outbox.Dead))
			o.ObserveFloat64(horizonAge, float64(s.Horizon.XIDAge))
			if s.Horizon.HeldForKnown {
				o.ObserveFloat64(horizonHeld, s.Horizon.HeldFor.Seconds())
			}
			o.ObserveFloat64(deadTuples, float64(s.Horizon.DeadJobTuples))
		}
		use, limErr := cache.Limits(ctx)
		for _, u := range use {
			scope, target := "queue", u.Limit.Queue
			if u.Limit.Kind != "" {
				scope, target = "kind", u.Limit.Kind
			}
			attrs := metric.WithAttributes(attribute.String("scope", scope), attribute.String("target", target),
				attribute.String("key", u.Bucket))
			o.ObserveFloat64(limHolding, float64(u.Holding), attrs)
			if u.Limit.MaxRunning > 0 {
				o.ObserveFloat64(limMax, float64(u.Limit.MaxRunning), attrs)
			}
			if u.Limit.Rate > 0 {
				o.ObserveFloat64(limStarted, float64(u.Started), attrs)
				o.ObserveFloat64(limRate, float64(u.Limit.Rate), attrs)
				o.ObserveFloat64(limWindow, u.Limit.Per.Seconds(), attrs)
			}
		}
		p := c.Counters()
		for name, v := range map[string]int64{"inserted": p.Inserted, "succeeded": p.Succeeded, "failed": p.Failed,
			"retried": p.Retried, "snoozed": p.Snoozed, "cancelled": p.Cancelled, "lease_lost": p.LeaseLost, "reclaimed": p.Reclaimed} {
			o.ObserveInt64(outcomes, v, metric.WithAttributes(attribute.String("outcome", name)))
		}
		o.ObserveInt64(throttled, p.Throttled)
		o.ObserveInt64(handoffs, p.Handoffs, metric.WithAttributes(attribute.String("result", "claimed")))
		o.ObserveInt64(handoffs, p.HandoffsReturned, metric.WithAttributes(attribute.String("result", "returned")))
		return errors.Join(err, limErr)
	}, jobs, due, oldest, expired, unpublished, lag, dead, horizonAge, horizonHeld, deadTuples, limHolding, limMax, limStarted, limRate, limWindow, outcomes, throttled, handoffs)
	if err != nil {
		return nil, fmt.Errorf("otelmetrics: registering the callback: %w", err)
	}
	events, unsub := c.Subscribe()
	b := &Bridge{reg: reg, unsub: unsub, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for ev := range events {
			if ev.Job == nil {
				continue
			}
			attrs := metric.WithAttributes(attribute.String("queue", ev.Job.Queue), attribute.String("kind", ev.Job.Kind))
			run.Record(context.Background(), ev.RunDuration.Seconds(), attrs,
				metric.WithAttributes(attribute.String("outcome", string(ev.Kind))))
			wait.Record(context.Background(), max(ev.QueueWait, 0).Seconds(), attrs)
		}
	}()
	return b, nil
}

// Close unregisters the callback and ends the event subscription.
func (b *Bridge) Close() error {
	var err error
	b.once.Do(func() {
		err = b.reg.Unregister()
		b.unsub()
		<-b.done
	})
	return err
}
