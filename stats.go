package skiplock

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock/internal/engine"
	"github.com/skiplock/skiplock/internal/store"
)

// QueueStats are one queue's figures from the database.
type QueueStats struct {
	Queue string
	// Pending counts jobs waiting, Due those of them whose run_at has come.
	Pending, Due int64
	// Running counts jobs whose handler runs (or ran until a moment ago: their
	// outcome is being written). Claimed counts the other leased jobs: claimed by a
	// worker, their handler not started yet — in its prefetch, or a limit slot's
	// successor waiting for its predecessor (StateClaimed). A claimed job's start is
	// written about a second after its handler began, so it never counts as running
	// before; Running + Claimed is every leased job.
	Running, Claimed int64
	// Waiting counts jobs in StateWaiting: flow parents whose children have not all
	// finished, and batch callbacks not released yet (docs/flows.md).
	Waiting int64
	// Succeeded, Failed and Cancelled count the finished jobs still in the table
	// (retention removes them). Exact when Stats.FinishedEstimated is false; else
	// scaled up from a random sample of the table's pages.
	Succeeded int64
	Failed    int64
	Cancelled int64
	// Paused is true while the queue is paused (Client.QueuePause).
	Paused bool
	// BlockedSequences counts sequences (EnqueueOpts.Sequence) whose failed job, in
	// this queue, holds up later jobs until an operator retries or cancels it.
	BlockedSequences int64
	// Retrying counts pending jobs that already ran at least once: jobs waiting out
	// a retry backoff, or reclaimed after a lost lease. Counted from the database,
	// so it covers every worker process; a rising figure means failing handlers.
	Retrying int64
	// RecentSucceeded, RecentFailed and RecentCancelled count this queue's jobs that
	// finished within Stats.Recent.Window, across every worker process.
	RecentSucceeded, RecentFailed, RecentCancelled int64
	// ExpiredLeases counts running jobs whose lease has run out (the reclaimer's work).
	ExpiredLeases int64
	// OldestDueAge is how long the oldest due pending job has waited: the best single
	// health signal of a queue. 0 when nothing is due.
	OldestDueAge time.Duration
}

// ProcessCounters are this client's totals since it was created. They count what
// this process did; cluster-wide figures (every worker's outcomes, committed
// enqueues) come from Stats, which reads the database.
type ProcessCounters struct {
	// Inserted counts jobs this client's enqueues inserted: deduplicated enqueues
	// are not counted; an insert whose transaction later rolled back is (the client
	// cannot see the caller's commit), so Stats, not Inserted, counts committed jobs.
	Inserted int64
	// Succeeded, Failed, Retried, Snoozed and Cancelled count the outcomes this
	// client wrote, LeaseLost the outcomes it discarded because its lease was lost,
	// Reclaimed the expired leases its reclaimer runs returned or failed.
	Succeeded, Failed, Retried, Snoozed, Cancelled, LeaseLost, Reclaimed int64
	// EventsDropped counts events a slow Subscribe receiver missed.
	EventsDropped int64
	// OperationFailures counts failed attempts of the runtime's repeating operations
	// by name ("claim", "heartbeat", "completion", "maintenance:reclaimer", …); see
	// Client.Operations for whether each is failing now.
	OperationFailures map[string]int64
	// ClaimStatements and CompletionStatements count the runtime's claim and
	// completion statements; Claimed and Completed over them are the batch sizes.
	ClaimStatements, Claimed, CompletionStatements, Completed int64
	// ClaimsBeside counts the claim statements sent while another claim of the same
	// queue was in flight: a plain queue's second claim under a backlog, a fair
	// queue's claim for a new job. At most two claims of a queue are in flight, so
	// ClaimTime can exceed the wall time it was spent in.
	ClaimsBeside int64
	// ClaimTime and CompletionTime are the wall time spent in those statements.
	ClaimTime, CompletionTime time.Duration
	// Throttled counts due jobs a limited claim left pending because a limit held
	// them back (a job held back by several claims counts once per claim).
	Throttled int64
	// Handoffs counts jobs a limited claim took as successors of running jobs (their
	// slots pass on without a database round trip; docs/limits.md, "Handoff"), and
	// HandoffsReturned those of them given back to pending because their predecessor
	// ran too long or the client stopped.
	Handoffs, HandoffsReturned int64
	// WarmedConns counts the pool connections the runtime's warmer prepared the claim
	// and the completion on while it was idle (docs/runtime.md, "warmer").
	WarmedConns int64
	// RetentionDeleted counts the finished jobs this process's retention runs
	// deleted row by row (the service and RunRetention), and RetentionBehind the runs
	// that stopped at RetentionConfig.MaxBatches with expired jobs left: retention
	// is behind the completion rate (the service then runs again at once, and logs
	// a warning). A count that keeps rising means the batches cannot follow the
	// completions: see docs/operations.md §2.
	RetentionDeleted, RetentionBehind int64
}

// counters are the client's in-process totals (see Stats and the metrics package).
type counters struct {
	inserted, succeeded, failed, retried, snoozed, cancelled, leaseLost, reclaimed atomic.Int64
	retentionDeleted, retentionBehind                                              atomic.Int64
	engine                                                                         engine.Counters // the engine's figures
}

// RecentStats count the jobs of all queues that finished within Window: divide by
// Window for a throughput that covers every worker process.
type RecentStats struct {
	Window                       time.Duration
	Succeeded, Failed, Cancelled int64
}

// OutboxStats are the outbox's figures.
type OutboxStats struct {
	// Unpublished counts events not yet published and not dead (new, being relayed,
	// or waiting to retry).
	Unpublished int64
	// OldestUnpublishedAge is the outbox's lag: how long ago the oldest unpublished
	// event was written. 0 when none is waiting.
	OldestUnpublishedAge time.Duration
	// Dead counts events parked after their last attempt, awaiting an operator.
	Dead int64
}

// Kinds of HorizonStats.Holder.
const (
	HolderSession             = store.HolderSession  // a session of this database (or a standby's walsender)
	HolderPreparedTransaction = store.HolderPrepared // a PREPARE TRANSACTION not yet committed or rolled back
	HolderReplicationSlot     = store.HolderSlot     // a replication slot's xmin
)

// HorizonStats describe the oldest transaction, prepared transaction or replication
// slot in the database: VACUUM cannot remove a tuple that it may still see, so every
// job claimed or finished since it began leaves a dead tuple that stays until it ends.
// A session idle in a transaction for minutes is the usual cause; operations.md says
// how to find and end it. An ordinary database always shows some holder — the oldest
// of the statements running right now — with an XIDAge of a few transactions; it is
// a large XIDAge or HeldFor that matters.
type HorizonStats struct {
	// Holder is HolderSession, HolderPreparedTransaction or HolderReplicationSlot;
	// "" when no other transaction is open.
	Holder string
	// PID is the session's process id (pg_terminate_backend ends it); 0 otherwise.
	PID int
	// Name is the session's application_name, the prepared transaction's gid or the
	// slot's name.
	Name string
	// State is the session's state ("idle in transaction", "active") or the slot's
	// ("active", "inactive"); "" when the connected role may not see it.
	State string
	// XIDAge counts the transaction ids assigned since the holder's snapshot (or
	// transaction) began.
	XIDAge int64
	// HeldFor is how long the holder's transaction has been open, by the database's
	// clock. HeldForKnown is false for a replication slot, and for a session of
	// another role unless the connected role has pg_read_all_stats (or pg_monitor).
	HeldFor      time.Duration
	HeldForKnown bool
	// DeadJobTuples is PostgreSQL's estimate of the dead tuples in the jobs table
	// (all partitions): it grows while the horizon is held.
	DeadJobTuples int64
}

// String describes the holder in one line, as the CLI and the dashboard show it:
// "session 4711 (psql, idle in transaction), open 12m3s, 250118 transactions
// behind", or "no other transaction open".
func (h HorizonStats) String() string {
	if h.Holder == "" {
		return "no other transaction open"
	}
	var b strings.Builder
	b.WriteString(h.Holder)
	switch h.Holder {
	case HolderSession:
		fmt.Fprintf(&b, " %d", h.PID)
		var about []string
		for _, s := range []string{h.Name, h.State} {
			if s != "" {
				about = append(about, s)
			}
		}
		if len(about) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(about, ", "))
		}
	default:
		fmt.Fprintf(&b, " %q", h.Name)
		if h.State != "" {
			fmt.Fprintf(&b, " (%s)", h.State)
		}
	}
	if h.HeldForKnown {
		fmt.Fprintf(&b, ", open %s", h.HeldFor.Round(time.Second))
	}
	fmt.Fprintf(&b, ", %d transactions behind", h.XIDAge)
	return b.String()
}

// horizonStats converts the store's figures.
func horizonStats(h store.Horizon) HorizonStats {
	return HorizonStats{Holder: h.Kind, PID: h.PID, Name: h.Name, State: h.State, XIDAge: h.XIDAge,
		HeldFor: h.HeldFor, HeldForKnown: h.Known, DeadJobTuples: h.DeadJobTuples}
}

// Stats is a snapshot of the queues and of this process.
type Stats struct {
	Queues []QueueStats
	Recent RecentStats
	Outbox OutboxStats
	// Schedules counts the periodic schedules (docs/scheduling.md).
	Schedules ScheduleStats
	// Waiting counts the jobs in StateWaiting over every queue (QueueStats.Waiting).
	Waiting int64
	// OpenBatches counts the batches whose completion callback has not been
	// released (docs/flows.md).
	OpenBatches int64
	// Horizon names what holds back the database's vacuum horizon the longest
	// (docs/operations.md, "A held vacuum horizon").
	Horizon HorizonStats
	// FinishedEstimated is true when the finished counts come from a sample.
	FinishedEstimated bool
	Process           ProcessCounters
}

// StatsOpts tune what Stats reads.
type StatsOpts struct {
	// SamplePages caps the heap pages read to count finished jobs: a table of at most
	// that many pages is counted exactly, a larger one estimated from a random sample
	// of about that many pages. Default 2000 (16 MB); negative skips finished counts.
	SamplePages int64
	// RecentWindow is the window of Stats.Recent. Default 1m; negative skips it.
	RecentWindow time.Duration
}

// Stats reads per-queue figures, recent throughput, the outbox's lag and what holds
// the vacuum horizon from the database, and this client's counters. Every figure of
// the queue tables is read from an index, except the finished counts, which read a
// capped sample (see StatsOpts); the cost does not grow with the number of finished
// jobs. The horizon comes from PostgreSQL's activity and statistics views. opts may
// be nil for the defaults.
func (c *Client) Stats(ctx context.Context, opts *StatsOpts) (*Stats, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	var o StatsOpts
	if opts != nil {
		o = *opts
	}
	if o.SamplePages == 0 {
		o.SamplePages = 2000
	}
	if o.RecentWindow == 0 {
		o.RecentWindow = time.Minute
	}
	now := store.NowParam(c.cfg.Clock)
	live, err := c.store.LiveStats(ctx, c.pool, now)
	if err != nil {
		return nil, fmt.Errorf("reading queue stats: %w", wrapPgError(err))
	}
	byQueue := map[string]*QueueStats{}
	for _, q := range live {
		byQueue[q.Queue] = &QueueStats{Queue: q.Queue, Pending: q.Pending, Due: q.Due, Running: q.Running, Claimed: q.Claimed,
			ExpiredLeases: q.ExpiredLeases, OldestDueAge: q.OldestDueAge, Retrying: q.Retrying}
	}
	s := &Stats{}
	if o.SamplePages > 0 {
		pages, err := c.store.JobsPages(ctx, c.pool)
		if err != nil {
			return nil, fmt.Errorf("reading the jobs table's size: %w", wrapPgError(err))
		}
		pct := 100.0
		if pages > o.SamplePages {
			pct = 100 * float64(o.SamplePages) / float64(pages)
			s.FinishedEstimated = true
		}
		fin, err := c.store.FinishedCounts(ctx, c.pool, pct)
		if err != nil {
			return nil, fmt.Errorf("counting finished jobs: %w", wrapPgError(err))
		}
		for _, f := range fin {
			q := byQueue[f.Queue]
			if q == nil {
				q = &QueueStats{Queue: f.Queue}
				byQueue[f.Queue] = q
			}
			switch f.Status {
			case store.StatusSucceeded:
				q.Succeeded = f.Count
			case store.StatusFailed:
				q.Failed = f.Count
			case store.StatusCancelled:
				q.Cancelled = f.Count
			}
		}
	}
	if o.RecentWindow > 0 {
		perQueue, r, err := c.store.RecentlyFinished(ctx, c.pool, now, o.RecentWindow)
		if err != nil {
			return nil, fmt.Errorf("counting recently finished jobs: %w", wrapPgError(err))
		}
		s.Recent = RecentStats{Window: o.RecentWindow, Succeeded: r.Succeeded, Failed: r.Failed, Cancelled: r.Cancelled}
		for name, rq := range perQueue {
			q := byQueue[name]
			if q == nil {
				q = &QueueStats{Queue: name}
				byQueue[name] = q
			}
			q.RecentSucceeded, q.RecentFailed, q.RecentCancelled = rq.Succeeded, rq.Failed, rq.Cancelled
		}
	}
	waiting, openBatches, err := c.store.WaitingStats(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("counting waiting jobs: %w", wrapPgError(err))
	}
	s.OpenBatches = openBatches
	for name, n := range waiting {
		q := byQueue[name]
		if q == nil {
			q = &QueueStats{Queue: name}
			byQueue[name] = q
		}
		q.Waiting, s.Waiting = n, s.Waiting+n
	}
	blocked, err := c.store.BlockedSequences(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("counting blocked sequences: %w", wrapPgError(err))
	}
	for name, n := range blocked {
		q := byQueue[name]
		if q == nil {
			q = &QueueStats{Queue: name}
			byQueue[name] = q
		}
		q.BlockedSequences = n
	}
	settings, err := c.store.QueueSettings(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("reading queue settings: %w", wrapPgError(err))
	}
	for _, qs := range settings {
		if qs.PausedAt == nil {
			continue
		}
		q := byQueue[qs.Name]
		if q == nil {
			q = &QueueStats{Queue: qs.Name}
			byQueue[qs.Name] = q
		}
		q.Paused = true
	}
	ob, err := c.store.OutboxHealth(ctx, c.pool, now)
	if err != nil {
		return nil, fmt.Errorf("reading outbox stats: %w", wrapPgError(err))
	}
	s.Outbox = OutboxStats{Unpublished: ob.Unpublished, OldestUnpublishedAge: ob.OldestUnpublished, Dead: ob.Dead}
	if s.Schedules, err = c.scheduleStats(ctx); err != nil {
		return nil, err
	}
	h, err := c.store.Horizon(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("reading the vacuum horizon: %w", wrapPgError(err))
	}
	s.Horizon = horizonStats(h)
	for _, q := range byQueue {
		s.Queues = append(s.Queues, *q)
	}
	sort.Slice(s.Queues, func(i, j int) bool { return s.Queues[i].Queue < s.Queues[j].Queue })
	s.Process = c.Counters()
	return s, nil
}

// Queue returns the named queue's figures (zero figures if it has no jobs).
func (s *Stats) Queue(name string) QueueStats {
	for _, q := range s.Queues {
		if q.Queue == name {
			return q
		}
	}
	return QueueStats{Queue: name}
}

// Counters returns this client's in-process totals.
func (c *Client) Counters() ProcessCounters {
	m := &c.metrics
	dropped := c.events.dropped.Load()
	pc := ProcessCounters{
		Inserted: m.inserted.Load(), Succeeded: m.succeeded.Load(), Failed: m.failed.Load(),
		Retried: m.retried.Load(), Snoozed: m.snoozed.Load(), Cancelled: m.cancelled.Load(),
		LeaseLost: m.leaseLost.Load(), Reclaimed: m.reclaimed.Load(), EventsDropped: dropped,
		ClaimStatements: m.engine.Claims.Load(), Claimed: m.engine.Claimed.Load(), ClaimsBeside: m.engine.ClaimsBeside.Load(),
		CompletionStatements: m.engine.Flushes.Load(), Completed: m.engine.Flushed.Load(),
		ClaimTime: time.Duration(m.engine.ClaimNanos.Load()), CompletionTime: time.Duration(m.engine.FlushNanos.Load()),
		Throttled: m.engine.Throttled.Load(),
		Handoffs:  m.engine.Handoffs.Load(), HandoffsReturned: m.engine.HandoffsReturned.Load(),
		WarmedConns:      m.engine.Warmed.Load(),
		RetentionDeleted: m.retentionDeleted.Load(), RetentionBehind: m.retentionBehind.Load(),
		OperationFailures: map[string]int64{},
	}
	for _, op := range c.failures.snapshot() {
		pc.OperationFailures[op.Operation] = op.Failures
	}
	return pc
}

// ThroughputPoint counts a queue's jobs that finished in one bucket of time.
type ThroughputPoint struct {
	Queue string    `json:"queue"`
	Start time.Time `json:"start"`
	// Succeeded, Failed and Cancelled count the jobs that reached each state in the
	// bucket (jobs deleted since — retention, DeleteOnSuccess — are not counted).
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Cancelled int64 `json:"cancelled"`
}

// Throughput counts the jobs of every process that finished within the last window,
// per queue and bucket (buckets aligned to the Unix epoch), from the database. Only
// buckets with finished jobs are returned, by queue then time. bucket is at least 1s
// and window at most 7 days.
func (c *Client) Throughput(ctx context.Context, window, bucket time.Duration) ([]ThroughputPoint, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if bucket < time.Second || window < bucket || window > 7*24*time.Hour {
		return nil, invalid("window", "want 1s ≤ bucket (%s) ≤ window (%s) ≤ 7 days", bucket, window)
	}
	counts, err := c.store.Throughput(ctx, c.pool, store.NowParam(c.cfg.Clock), window, bucket)
	if err != nil {
		return nil, fmt.Errorf("counting throughput: %w", wrapPgError(err))
	}
	type key struct {
		q string
		t int64
	}
	byKey := map[key]int{} // index into out
	var out []ThroughputPoint
	for _, n := range counts {
		k := key{n.Queue, n.Start.UnixNano()}
		i, ok := byKey[k]
		if !ok {
			i = len(out)
			out = append(out, ThroughputPoint{Queue: n.Queue, Start: n.Start})
			byKey[k] = i
		}
		p := &out[i]
		switch n.Status {
		case store.StatusSucceeded:
			p.Succeeded = n.Count
		case store.StatusFailed:
			p.Failed = n.Count
		case store.StatusCancelled:
			p.Cancelled = n.Count
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Queue != out[j].Queue {
			return out[i].Queue < out[j].Queue
		}
		return out[i].Start.Before(out[j].Start)
	})
	return out, nil
}
