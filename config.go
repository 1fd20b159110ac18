package skiplock

// Config and its defaults: what a Client is built from (NewClient validates it here).

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	ifailures "github.com/skiplock/skiplock/internal/failures"
	"github.com/skiplock/skiplock/internal/ident"
)

// DefaultQueue is the queue of jobs enqueued without EnqueueOpts.Queue.
const DefaultQueue = "default"

// DefaultSchema is the PostgreSQL schema skiplock's tables live in.
const DefaultSchema = "skiplock"

// QueueConfig configures one queue a client works.
type QueueConfig struct {
	// MaxWorkers is how many of the queue's jobs this client runs at once. Required, ≥ 1.
	MaxWorkers int
	// MaxPrefetch caps how many jobs beyond MaxWorkers the client claims ahead and
	// holds locally (under lease, heartbeated) so fast handlers never wait for a
	// round trip. The prefetch is adaptive: it holds about PrefetchWindow of work
	// at the queue's recent average handler duration, so slow jobs are not hoarded by
	// one process. Default 1000; negative disables prefetching.
	MaxPrefetch int
	// PrefetchWindow is how much work (in handler time) the prefetch may hold.
	// Default 50ms.
	PrefetchWindow time.Duration
}

// Config configures a Client. Every field has a working default; a Client with no
// Queues only enqueues and administers jobs.
type Config struct {
	// Schema holds skiplock's tables. Default "skiplock". Letters, digits, underscores.
	Schema string
	// Queues this client works, by name, with their concurrency. Default none.
	Queues map[string]QueueConfig
	// Workers maps job kinds to handlers. Required when Queues is set (NewClient
	// refuses Queues without Workers).
	Workers *Workers
	// ID names this client in worker_id and logs. Default hostname-pid-random.
	ID string
	// Clock supplies time to every time-dependent statement. Default nil: the
	// database's now().
	Clock Clock
	// Logger receives operational logs (never payloads). Default: slog.Default()
	// at level Warn and above, so failures are never silent while routine lines
	// (started, stopped, maintenance runs) stay quiet. Repeating failures are logged
	// once and then at most every 30s with a count of the repeats.
	Logger *slog.Logger
	// MaxPayloadBytes refuses larger payloads at enqueue. Default 1 MiB.
	MaxPayloadBytes int
	// LeaseDuration is how long a claim owns a job without a heartbeat. Default 30s.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often all in-flight leases are renewed (one statement).
	// Default LeaseDuration/3; must be below LeaseDuration/2.
	HeartbeatInterval time.Duration
	// PollInterval is the safety-net poll of each queue; it is jittered by ±10%.
	// NOTIFY wakes producers sooner. Default 1s.
	PollInterval time.Duration
	// PollOnly disables LISTEN (for PgBouncer in transaction pooling mode, where a
	// session-level LISTEN does not work). Enqueue still sends NOTIFY. Default false.
	PollOnly bool
	// ListenURL is where the client's one LISTEN connection goes when it must not go
	// where the pool does: with the pool behind PgBouncer in transaction pooling, a
	// connection string to PostgreSQL itself (for an HA pair, every node with
	// target_session_attrs=read-write) keeps NOTIFY's wake-ups instead of PollOnly's
	// polling. Checked by NewClient; not with PollOnly. Default: the pool's
	// configuration.
	ListenURL string
	// NotifyCoalesce is the window within which this process sends at most one
	// in-transaction NOTIFY per queue, plus one trailing NOTIFY at its end if any
	// enqueue was skipped — for enqueues in their own transaction (Enqueue,
	// EnqueueMany on the client's pool), only once every one of them that skipped its
	// NOTIFY has committed, and only while they overlap: one such enqueue at a time
	// always carries its own. NOTIFY serialises committing transactions on a global
	// lock; coalescing keeps concurrent enqueues from queueing behind it. Default 2ms;
	// negative notifies every transaction (then a job enqueued in a long transaction
	// never waits for a poll).
	NotifyCoalesce time.Duration
	// CompletionBatchSize caps how many outcomes one completion statement writes.
	// Default 1000.
	CompletionBatchSize int
	// CompletionBatchDelay is how long the completer waits to fill a batch once it
	// has one outcome. Default 1ms.
	CompletionBatchDelay time.Duration
	// FetchLimit caps how many jobs a single claim takes. Default 1000.
	FetchLimit int
	// ReclaimInterval is how often the reclaimer looks for expired leases (one client
	// at a time, by advisory lock). Default 15s, jittered; negative disables it.
	ReclaimInterval time.Duration
	// HorizonWarning is how long one transaction (or prepared transaction, or
	// replication slot) may hold back the database's vacuum horizon before the client
	// logs a warning that names it: while it does, dead jobs cannot be removed and
	// enqueues and claims slow down (docs/operations.md, "A held vacuum horizon").
	// Checked by one client at a time, every minute or every HorizonWarning if
	// shorter. Default 5m; negative disables the check.
	HorizonWarning time.Duration
	// RetryPolicy for kinds whose WorkerOpts set none. Default DefaultRetryPolicy.
	RetryPolicy RetryPolicy
	// JobTimeout bounds a handler run when its WorkerOpts set no Timeout. Default 0:
	// no timeout. A handler still running HeartbeatInterval after its timeout (one
	// that ignores its context) stops being heartbeated: its lease expires, the job is
	// reclaimed and retried elsewhere, and whatever it returns later is fenced out.
	JobTimeout time.Duration
	// ShutdownTimeout is how long running jobs may keep running once the context
	// given to Start ends (a graceful stop, for example on SIGTERM): then their
	// contexts are cancelled and their jobs go back to pending without spending an
	// attempt. Default 20s, inside Kubernetes' default 30s grace period with room
	// for the cancelled jobs' outcomes to be written. Stop(ctx) and
	// StopAndCancel(ctx) take their deadline from their own ctx instead.
	ShutdownTimeout time.Duration
	// EnqueueHooks amend every job this client enqueues, in order, before it is
	// validated (see EnqueueHook). Default none.
	EnqueueHooks []EnqueueHook
	// Middleware wraps every handler run, first = outermost. Default none.
	Middleware []Middleware
	// DeleteOnSuccess deletes a job the moment it succeeds (one fenced DELETE in the
	// completion batch) instead of keeping it as 'succeeded' until retention removes
	// it. Less write volume and a smaller table; the cost is no record of succeeded
	// jobs and that their deduplication keys are free again at once. Default false.
	DeleteOnSuccess bool
	Retention       RetentionConfig // deletes finished jobs, maintains partitions; defaults in RetentionConfig
	// Periodic declares schedules (docs/scheduling.md): Start writes them to the
	// database before it returns — adding the missing, updating those whose definition
	// differs, never touching a schedule's pause — and fails on a bad one; from then on
	// one client at a time fires them. Names must be unique. Default none.
	Periodic []PeriodicJob
	// Limits are set (LimitSet) when the client starts, replacing limits with the
	// same Queue or Kind and Key; limits set otherwise are left alone, so the
	// database — not any one Config — holds the truth every client enforces
	// (docs/limits.md). Default none.
	Limits []Limit
	// PeriodicRemoveUndeclared makes that first run also delete the schedules that a
	// Config declared before and this one does not; schedules added at run time
	// (ScheduleAdd, the CLI) are never deleted. Set it only where one codebase declares
	// all the schema's schedules. Default false.
	PeriodicRemoveUndeclared bool
	// SchedulerInterval is how often the scheduler looks for due schedules (one client
	// at a time, by advisory lock), and so how late, at most, a fire time is enqueued
	// (its job's run_at is the fire time itself). Default 1s, the finest resolution a
	// spec has, jittered; negative disables the scheduler in this client.
	SchedulerInterval time.Duration
	// SchedulerMisfireGrace is how late a fire time may be found and still fire as on
	// time; older ones are missed and follow their schedule's MisfirePolicy. Default
	// 1m: well above the scheduler's own lateness (an interval, or a failover).
	SchedulerMisfireGrace time.Duration
}

func (c *Config) withDefaults() (Config, error) {
	cfg := *c
	cfg.Queues = make(map[string]QueueConfig, len(c.Queues))
	for k, v := range c.Queues {
		cfg.Queues[k] = v
	}
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if err := ident.Validate("schema", cfg.Schema); err != nil {
		return cfg, invalid("schema", "%v", err)
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		var b [3]byte
		rand.Read(b[:])
		cfg.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if cfg.Logger == nil {
		cfg.Logger = ifailures.DefaultLogger()
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = DefaultMaxPayload
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 30 * time.Second
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = cfg.LeaseDuration / 3
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.NotifyCoalesce == 0 {
		cfg.NotifyCoalesce = 2 * time.Millisecond
	}
	if cfg.CompletionBatchSize == 0 {
		cfg.CompletionBatchSize = 1000
	}
	if cfg.CompletionBatchDelay == 0 {
		cfg.CompletionBatchDelay = time.Millisecond
	}
	if cfg.FetchLimit == 0 {
		cfg.FetchLimit = 1000
	}
	if cfg.ReclaimInterval == 0 {
		cfg.ReclaimInterval = 15 * time.Second
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 20 * time.Second
	}
	if cfg.HorizonWarning == 0 {
		cfg.HorizonWarning = 5 * time.Minute
	}
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = DefaultRetryPolicy
	}
	if cfg.Workers == nil {
		cfg.Workers = NewWorkers()
	}
	cfg.Retention = cfg.Retention.withDefaults()
	if cfg.SchedulerInterval == 0 {
		cfg.SchedulerInterval = time.Second
	}
	if cfg.SchedulerMisfireGrace == 0 {
		cfg.SchedulerMisfireGrace = time.Minute
	}
	cfg.Periodic = append([]PeriodicJob(nil), c.Periodic...)
	cfg.Limits = append([]Limit(nil), c.Limits...)
	if len(c.Queues) > 0 && c.Workers == nil {
		return cfg, invalid("Config.Workers", "must be set when Queues is: every job of a worked queue needs a registered worker (skiplock.NewWorkers + AddWorker)")
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"Config.CompletionBatchDelay", cfg.CompletionBatchDelay},
		{"Config.ShutdownTimeout", cfg.ShutdownTimeout},
		{"Config.Retention.PartitionLockTimeout", cfg.Retention.PartitionLockTimeout},
		{"Config.SchedulerMisfireGrace", cfg.SchedulerMisfireGrace},
	} {
		if d.v < 0 {
			return cfg, invalid(d.field, "%s is negative", d.v)
		}
	}
	switch {
	case cfg.MaxPayloadBytes < 0:
		return cfg, invalid("Config.MaxPayloadBytes", "%d is negative", cfg.MaxPayloadBytes)
	case cfg.LeaseDuration < time.Second:
		return cfg, invalid("Config.LeaseDuration", "%s is below 1s; leases that short expire during ordinary pauses", cfg.LeaseDuration)
	case cfg.HeartbeatInterval <= 0 || cfg.HeartbeatInterval*2 > cfg.LeaseDuration:
		return cfg, invalid("Config.HeartbeatInterval", "%s must be positive and at most LeaseDuration/2 (%s), so one missed beat does not lose the lease", cfg.HeartbeatInterval, cfg.LeaseDuration/2)
	case cfg.PollInterval < time.Millisecond:
		return cfg, invalid("Config.PollInterval", "%s is below 1ms", cfg.PollInterval)
	case cfg.ListenURL != "" && cfg.PollOnly:
		return cfg, invalid("Config.ListenURL", "is set with PollOnly, which opens no LISTEN connection: set one or the other")
	case cfg.CompletionBatchSize < 1:
		return cfg, invalid("Config.CompletionBatchSize", "%d is below 1", cfg.CompletionBatchSize)
	case cfg.FetchLimit < 1:
		return cfg, invalid("Config.FetchLimit", "%d is below 1", cfg.FetchLimit)
	case cfg.JobTimeout < 0:
		return cfg, invalid("Config.JobTimeout", "%s is negative", cfg.JobTimeout)
	case c.Retention.BatchSize < 0 || c.Retention.MaxBatches < 0:
		return cfg, invalid("Config.Retention", "BatchSize and MaxBatches must not be negative")
	}
	if err := validatePeriodic(&cfg); err != nil {
		return cfg, err
	}
	for i, l := range cfg.Limits {
		if err := l.Validate(); err != nil {
			return cfg, fmt.Errorf("Config.Limits[%d]: %w", i, err)
		}
	}
	for name, q := range cfg.Queues {
		if err := ident.ValidateQueue(name); err != nil {
			return cfg, invalid("queue", "%v", err)
		}
		if q.MaxWorkers < 1 {
			return cfg, invalid("Config.Queues", "queue %q: MaxWorkers %d is below 1", name, q.MaxWorkers)
		}
		if q.PrefetchWindow < 0 {
			return cfg, invalid("Config.Queues", "queue %q: PrefetchWindow %s is negative", name, q.PrefetchWindow)
		}
		if q.MaxPrefetch == 0 {
			q.MaxPrefetch = 1000
		}
		if q.PrefetchWindow <= 0 {
			q.PrefetchWindow = 50 * time.Millisecond
		}
		cfg.Queues[name] = q
	}
	return cfg, nil
}
