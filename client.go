package skiplock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/store"
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
		cfg.Logger = slog.New(minLevel{slog.Default().Handler(), slog.LevelWarn})
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

// Client enqueues jobs, administers them, and — with Queues configured and Start
// called — works them. It is safe for concurrent use.
type Client struct {
	pool     *pgxpool.Pool
	cfg      Config
	store    *store.Store
	workers  *Workers
	log      *slog.Logger
	failures *failures
	maint    *maint.Runner
	channel  string
	metrics  counters

	notifyMu   sync.Mutex
	lastNotify map[string]time.Time
	trailing   map[string]bool // a trailing NOTIFY is scheduled
	skipped    map[string]int  // enqueues in flight that rely on the trailing NOTIFY
	due        map[string]bool // the window ended while some of them were in flight
	notifying  int             // own inserts in flight that carry a NOTIFY inside their transaction
	ownFlight  int             // own inserts in flight, whatever their NOTIFY
	sendNotify func(queue string)
	bg         sync.WaitGroup // trailing notifications

	events eventHub

	rt *runtime // set while started
	mu sync.Mutex
}

// NewClient returns a client on pool. It does not touch the database; run the
// migrations first (skiplock migrate up, or Migrate).
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, invalid("pool", "must not be nil")
	}
	full, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	st, err := store.New(full.Schema)
	if err != nil {
		return nil, invalid("schema", "%v", err)
	}
	c := &Client{
		pool: pool, cfg: full, store: st, workers: full.Workers, log: full.Logger,
		channel: Channel(full.Schema), lastNotify: map[string]time.Time{}, trailing: map[string]bool{},
		skipped: map[string]int{}, due: map[string]bool{},
		failures: newFailures(full.Logger),
	}
	c.maint = c.newRunner()
	c.sendNotify = c.sendTrailing
	return c, nil
}

// Channel returns the NOTIFY channel of a schema's job queue.
func Channel(schema string) string { return ident.Channel(schema, "jobs") }

// Schema returns the client's schema name.
func (c *Client) Schema() string { return c.cfg.Schema }

// ID returns the client's worker id.
func (c *Client) ID() string { return c.cfg.ID }

// MaxPayloadBytes returns the payload limit the client enforces at enqueue (the
// outbox applies the same to events).
func (c *Client) MaxPayloadBytes() int { return c.cfg.MaxPayloadBytes }

// Clock returns the client's clock; nil means the database's now().
func (c *Client) Clock() Clock { return c.cfg.Clock }

// Pool returns the client's pool.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// notifyQueues returns the NOTIFY an insert should carry, and done, to call once the
// insert's statement has returned. An insert announces a queue unless this process
// announced it less than NotifyCoalesce ago; then one trailing notification follows
// at the window's end. own says the insert commits by itself (an autocommit statement
// on the client's pool): the trailing notification then also waits until every such
// insert that skipped its own has returned, committed or not. (Sent before such an
// insert committed, it would wake the producers too early: their claims would miss
// the job, and nothing would wake them again until their next poll.) An insert in the
// caller's transaction cannot be waited for — its commit is the caller's — so one
// that commits after its window's trailing notification relies on the next
// notification or poll (docs/runtime.md); carrying a NOTIFY in every such
// transaction instead serialises their commits on NOTIFY's lock (the chaos
// suite's mvcc-pin scenario, 800 transactional enqueues a second, saw its baseline
// pickup p99 rise from about 40 to 56 ms).
//
// An own insert that announces queues carries the NOTIFY inside its transaction only
// while no other such insert of this client is in flight; otherwise it announces them
// after its commit, in an asynchronously committed transaction of its own, so that it
// does not wait on NOTIFY's lock for the other's disk sync (store.Notify.AfterCommit).
//
// An own insert with no other own insert in flight is not coalesced: it carries its
// NOTIFY and opens a window for the inserts that overlap it. Coalescing saves
// concurrent commits from queueing on NOTIFY's lock; one insert at a time has nobody
// of its own to queue behind, and skipping its NOTIFY only bought a trailing one, a
// transaction of its own on another connection (sequential enqueues, W1, sent one for
// every 4–5 inserts).
func (c *Client) notifyQueues(queues []string, own bool) (notify *store.Notify, done func()) {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	send, done := queues, func() {}
	switch {
	case c.cfg.NotifyCoalesce < 0:
	case own && c.ownFlight == 0:
		now := hostclock.Now()
		for _, q := range queues {
			c.lastNotify[q] = now
		}
	default:
		send, done = c.coalesceLocked(queues, own)
	}
	if own {
		done = c.countLocked(&c.ownFlight, done)
	}
	if len(send) == 0 {
		return nil, done
	}
	n := &store.Notify{Channel: c.channel, Queues: send}
	switch {
	case !own:
	case c.notifying > 0:
		n.AfterCommit = true
	default:
		done = c.countLocked(&c.notifying, done)
	}
	return n, done
}

// countLocked counts one more insert in flight on *n and returns done extended to
// count it off. Called with notifyMu held; n is one of its counters.
func (c *Client) countLocked(n *int, done func()) func() {
	*n++
	return func() {
		c.notifyMu.Lock()
		*n--
		c.notifyMu.Unlock()
		done()
	}
}

// coalesceLocked returns the queues an insert announces itself (see notifyQueues)
// and done. Called with notifyMu held.
func (c *Client) coalesceLocked(queues []string, own bool) (send []string, done func()) {
	now := hostclock.Now()
	var skipped []string
	for _, q := range queues {
		last, ok := c.lastNotify[q]
		if !ok || now.Sub(last) >= c.cfg.NotifyCoalesce {
			c.lastNotify[q] = now
			send = append(send, q)
			continue
		}
		if own {
			skipped = append(skipped, q)
			c.skipped[q]++
		}
		if !c.trailing[q] {
			c.trailing[q] = true
			wait := c.cfg.NotifyCoalesce - now.Sub(last)
			c.bg.Add(1)
			time.AfterFunc(wait, func() { defer c.bg.Done(); c.trailingDue(q) })
		}
	}
	done = func() {}
	if len(skipped) > 0 {
		done = func() { c.skippedDone(skipped) }
	}
	return send, done
}

// txNotify is the NOTIFY of an insert in a transaction the caller commits (flows and
// batches; see notifyQueues).
func (c *Client) txNotify(queues []string) *store.Notify {
	n, _ := c.notifyQueues(queues, false)
	return n
}

// trailingDue is the end of queue's window: its trailing NOTIFY goes out now, or
// when the last insert that relies on it returns.
func (c *Client) trailingDue(queue string) {
	c.notifyMu.Lock()
	if c.skipped[queue] > 0 {
		c.due[queue] = true
		c.notifyMu.Unlock()
		return
	}
	c.fireLocked(queue)
	c.notifyMu.Unlock()
	c.sendNotify(queue)
}

// fireLocked records that queue's trailing NOTIFY goes out now, which opens its
// next window. Called with notifyMu held.
func (c *Client) fireLocked(queue string) {
	c.trailing[queue] = false
	c.lastNotify[queue] = hostclock.Now()
}

// skippedDone records that inserts which skipped their NOTIFY for queues have
// returned, and sends the trailing NOTIFYs that were waiting for them.
func (c *Client) skippedDone(queues []string) {
	var send []string
	c.notifyMu.Lock()
	for _, q := range queues {
		if c.skipped[q]--; c.skipped[q] == 0 {
			delete(c.skipped, q)
			if c.due[q] {
				delete(c.due, q)
				c.fireLocked(q)
				send = append(send, q)
			}
		}
	}
	c.notifyMu.Unlock()
	for _, q := range send {
		c.bg.Add(1)
		go func() { defer c.bg.Done(); c.sendNotify(q) }()
	}
}

// sendTrailing sends a trailing NOTIFY for queue, committed asynchronously.
func (c *Client) sendTrailing(queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.store.NotifyAsync(ctx, c.pool, c.channel, queue); err != nil {
		c.log.Debug("trailing notify failed; polling will pick the jobs up", "queue", queue, "error", err)
	}
}

// Close waits for background notifications. Call it when done with a client that
// was never started (Stop does it for a started client).
func (c *Client) Close() { c.bg.Wait() }

// ErrNotMigrated is matched by errors from a database whose schema lacks skiplock's
// tables: run `skiplock migrate up` (or Migrate) first.
var ErrNotMigrated = errors.New("skiplock: schema not migrated (is the schema name right? if so, run `skiplock migrate up`)")

// ErrSchemaNewer is returned by Start when the schema was migrated by a newer
// skiplock than this build: upgrade the build (or point it at another schema).
var ErrSchemaNewer = errors.New("skiplock: schema is newer than this skiplock")

// wrapPgError turns PostgreSQL errors a caller can act on into typed errors.
func wrapPgError(err error) error {
	return pgerr.Wrap(err, func(reason string) error { return invalid("payload", "%s", reason) }, ErrNotMigrated)
}

// minLevel passes on only records at or above its level.
type minLevel struct {
	slog.Handler
	level slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.level}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.level}
}
