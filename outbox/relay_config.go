package outbox

// The relay's configuration (RelayConfig and its defaults) and its running totals
// (RelayStats).

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/failures"
)

// RelayConfig configures a Relay. The zero value is usable: every field has a
// default. The schema, the pool and the clock are the Outbox's (its client's).
type RelayConfig struct {
	// BatchSize is how many events one claim leases and one Publish call carries,
	// 1..10000. Default 100.
	BatchSize int
	// LeaseDuration is how long a claim owns its events. A relay that has not
	// finished a batch by then (it crashed, hung or was partitioned away) loses it:
	// another relay claims the events again, and the late relay's marks change
	// nothing. It also bounds each Publish call. Default 30s.
	LeaseDuration time.Duration
	// PollInterval is the safety-net poll when no notification arrives, jittered by
	// ±10%. Default 1s.
	PollInterval time.Duration
	// Concurrency is how many claim/publish/mark loops Start runs at once, sharing the
	// Publisher and the LISTEN connection. Default 1.
	Concurrency int
	// OrderedByAggregate publishes the events of one aggregate (aggregate_type,
	// aggregate_id) one at a time, in id order: an event is not claimed while an
	// earlier event of its aggregate is unpublished, whether it is being relayed,
	// waiting in backoff, or dead. A dead event therefore blocks its aggregate until
	// an operator requeues or deletes it. Write with Config.Ordered (or hold a lock
	// on the aggregate in every writing transaction) so that id order is commit
	// order. Default false: events are published in batches, roughly in write order,
	// with no per-aggregate guarantee.
	OrderedByAggregate bool
	// RetryPolicy spaces the attempts of an event whose publish failed: attempt n
	// waits RetryPolicy.Delay(n). An event's attempt budget is its max_attempts
	// column (Event.MaxAttempts, default 25); attempts are counted at claim.
	// Default skiplock.ExponentialBackoff{} (1s doubling to 1h, +10% jitter), so
	// 25 attempts span about 14 hours of broker outage before events are parked.
	RetryPolicy skiplock.RetryPolicy
	// Logger receives operational logs (never payloads). Default: slog.Default() at
	// level Warn and above, as skiplock.Config.Logger: failures are never silent,
	// routine lines stay quiet. Repeating failures are logged once and then at most
	// every 30s with a count of the repeats.
	Logger *slog.Logger
	// PollOnly disables the LISTEN connection (for PgBouncer in transaction pooling
	// mode, where session-level LISTEN does not work). Default false.
	PollOnly bool
	// ListenURL is where the relay's LISTEN connection goes when it must not go where
	// the pool does (skiplock.Config.ListenURL: a pool behind a transaction-pooling
	// PgBouncer, the LISTEN connection to PostgreSQL itself). Checked by NewRelay;
	// not with PollOnly. Default: the pool's configuration.
	ListenURL string
	// StopTimeout bounds the marks of the batches in flight when Start's context ends
	// (they run on a fresh context, so a stopping relay still records what it
	// published), and those of RunOnce when its context ends. Stop is bounded by its
	// own context instead. Default 5s.
	StopTimeout time.Duration
}

func (c *RelayConfig) withDefaults() (RelayConfig, error) {
	cfg := *c
	switch {
	case cfg.BatchSize < 0 || cfg.BatchSize > 10000:
		return cfg, &skiplock.ValidationError{Field: "batch_size", Reason: fmt.Sprintf("%d is outside 1..10000 (0 means 100)", cfg.BatchSize)}
	case cfg.LeaseDuration < 0, cfg.PollInterval < 0, cfg.StopTimeout < 0:
		return cfg, &skiplock.ValidationError{Field: "duration", Reason: "LeaseDuration, PollInterval and StopTimeout must not be negative; use 0 for the default"}
	case cfg.Concurrency < 0:
		return cfg, &skiplock.ValidationError{Field: "concurrency", Reason: fmt.Sprintf("%d is negative; use 0 for the default (1)", cfg.Concurrency)}
	case cfg.RetryPolicy != nil && isNil(cfg.RetryPolicy):
		return cfg, &skiplock.ValidationError{Field: "retry_policy", Reason: fmt.Sprintf("is a nil %T; leave it nil for the default", cfg.RetryPolicy)}
	case cfg.ListenURL != "" && cfg.PollOnly:
		return cfg, &skiplock.ValidationError{Field: "listen_url", Reason: "is set with PollOnly, which opens no LISTEN connection: set one or the other"}
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 100
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 30 * time.Second
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = skiplock.ExponentialBackoff{}
	}
	cfg.Logger = failures.Logger(cfg.Logger)
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 5 * time.Second
	}
	return cfg, nil
}

// RelayStats are a relay's running totals since it was created.
type RelayStats struct {
	Published int64 // events marked published
	Retried   int64 // failed publishes scheduled for another attempt
	Dead      int64 // events parked (attempts exhausted or permanent error)
	Released  int64 // events given back unpublished because the relay was stopping
	LeaseLost int64 // outcomes not recorded because another relay had taken the event over
	Batches   int64 // non-empty claims
	Errors    int64 // claim or mark statements that failed (outcomes left unrecorded)
}

// Stats returns the relay's totals (zero for a nil Relay).
func (r *Relay) Stats() RelayStats {
	if r == nil {
		return RelayStats{}
	}
	return RelayStats{
		Published: r.published.Load(), Retried: r.retried.Load(), Dead: r.dead.Load(),
		Released: r.released.Load(), LeaseLost: r.lost.Load(), Batches: r.batches.Load(), Errors: r.errs.Load(),
	}
}

// Operations reports the relay's repeating operations that have failed at least once
// since it was created, sorted by name: "relay:claim", "relay:publish" (a batch none
// of whose messages the publisher accepted) and "relay:mark", in the type and with the
// meaning of skiplock.Client.Operations. An operation with Failing set has not
// succeeded since its last failure: give the relay to health.Options.Components and
// /readyz reports it. Nil for a nil Relay.
func (r *Relay) Operations() []skiplock.OperationStatus {
	if r == nil || r.fails == nil {
		return nil
	}
	ops := r.fails.Snapshot()
	out := make([]skiplock.OperationStatus, len(ops))
	for i, op := range ops {
		out[i] = skiplock.OperationStatus(op)
	}
	return out
}
