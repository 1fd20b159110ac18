package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/store"
)

// RelayConfig configures a Relay. The zero value is usable: every field has a default.
type RelayConfig struct {
	// Schema holding skiplock's tables. Default skiplock.DefaultSchema ("skiplock").
	Schema string
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
	// Concurrency is how many claim/publish/mark loops Run runs at once, sharing the
	// Publisher and the LISTEN connection. Default 1.
	Concurrency int
	// OrderedByAggregate publishes the events of one aggregate (aggregate_type,
	// aggregate_id) one at a time, in id order: an event is not claimed while an
	// earlier event of its aggregate is unpublished, whether it is being relayed,
	// waiting in backoff, or dead. A dead event therefore blocks its aggregate until
	// an operator requeues or deletes it. Write with WriterConfig.Ordered (or hold a
	// lock on the aggregate in every writing transaction) so that id order is commit
	// order. Default false: events are published in batches, roughly in write order,
	// with no per-aggregate guarantee.
	OrderedByAggregate bool
	// RetryPolicy spaces the attempts of an event whose publish failed: attempt n
	// waits RetryPolicy.Delay(n). An event's attempt budget is its max_attempts
	// column (Event.MaxAttempts, default 25); attempts are counted at claim.
	// Default skiplock.ExponentialBackoff{} (1s doubling to 1h, +10% jitter), so
	// 25 attempts span about 14 hours of broker outage before events are parked.
	RetryPolicy skiplock.RetryPolicy
	// Logger receives operational logs (never payloads). Default: discard.
	Logger *slog.Logger
	// Clock supplies the time of claims, leases, backoff and marks. Default nil: the
	// database's now().
	Clock skiplock.Clock
	// PollOnly disables the LISTEN connection (for PgBouncer in transaction pooling
	// mode, where session-level LISTEN does not work). Default false.
	PollOnly bool
	// StopTimeout bounds the marks of the batch in flight when Run's context ends
	// (they run on a fresh context, so a stopping relay still records what it
	// published). Default 5s.
	StopTimeout time.Duration
}

func (c *RelayConfig) withDefaults() (RelayConfig, error) {
	cfg := *c
	if cfg.Schema == "" {
		cfg.Schema = skiplock.DefaultSchema
	}
	switch {
	case cfg.BatchSize < 0 || cfg.BatchSize > 10000:
		return cfg, invalid("batch_size", "%d is outside 1..10000 (0 means 100)", cfg.BatchSize)
	case cfg.LeaseDuration < 0, cfg.PollInterval < 0, cfg.StopTimeout < 0:
		return cfg, invalid("duration", "LeaseDuration, PollInterval and StopTimeout must not be negative; use 0 for the default")
	case cfg.Concurrency < 0:
		return cfg, invalid("concurrency", "%d is negative; use 0 for the default (1)", cfg.Concurrency)
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 5 * time.Second
	}
	return cfg, nil
}

// Relay moves committed outbox events to a Publisher: claim a batch under a lease
// and a fresh token, publish it with one Publish call, then record each event's
// outcome with a statement fenced by the token. It never marks on claim, so a crash
// between publish and mark republishes (at-least-once) under the same event id.
// Any number of relays, in one process or many, may run against one schema.
type Relay struct {
	pool  *pgxpool.Pool
	pub   Publisher
	cfg   RelayConfig
	store *store.Store
	log   *slog.Logger

	wakeMu sync.Mutex
	wakes  []chan struct{}

	published, retried, dead, released, lost, batches, errs atomic.Int64

	// beforeMark, when set (by tests), runs between publish and mark; an error skips
	// the mark as a crash at that point would.
	beforeMark func(ctx context.Context) error
}

// NewRelay validates cfg and returns a Relay that claims from pool's database and
// publishes with pub. The Relay does not close pub.
func NewRelay(pool *pgxpool.Pool, pub Publisher, cfg RelayConfig) (*Relay, error) {
	if pool == nil || pub == nil {
		return nil, errors.New("outbox: NewRelay needs a pool and a Publisher")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	st, err := store.New(c.Schema)
	if err != nil {
		return nil, invalid("schema", "%v", err)
	}
	return &Relay{pool: pool, pub: pub, cfg: c, store: st, log: c.Logger}, nil
}

// RelayStats are a relay's running totals since it was created.
type RelayStats struct {
	Published int64 // events marked published
	Retried   int64 // failed publishes scheduled for another attempt
	Dead      int64 // events parked (attempts exhausted or permanent error)
	Released  int64 // events given back unpublished because the relay was stopping
	LeaseLost int64 // outcomes not recorded because another relay had taken the event over
	Batches   int64 // non-empty claims
	Errors    int64 // claim or mark statements that failed
}

// Stats returns the relay's totals.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Published: r.published.Load(), Retried: r.retried.Load(), Dead: r.dead.Load(),
		Released: r.released.Load(), LeaseLost: r.lost.Load(), Batches: r.batches.Load(), Errors: r.errs.Load(),
	}
}

// Wake makes every waiting loop of Run poll now. It is what the LISTEN connection
// calls on a notification; call it yourself if you learn of new events another way.
func (r *Relay) Wake() {
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	for _, ch := range r.wakes {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Run relays until ctx ends, then finishes the marks of the batches in flight and
// returns nil. Claim and mark errors (the database is down, say) are logged and
// retried at the poll interval; they do not stop Run.
func (r *Relay) Run(ctx context.Context) error {
	wakes := make([]chan struct{}, r.cfg.Concurrency)
	r.wakeMu.Lock()
	for i := range wakes {
		wakes[i] = make(chan struct{}, 1)
		r.wakes = append(r.wakes, wakes[i])
	}
	r.wakeMu.Unlock()
	defer func() {
		r.wakeMu.Lock()
		defer r.wakeMu.Unlock()
		r.wakes = slicesDelete(r.wakes, wakes)
	}()

	var wg sync.WaitGroup
	if !r.cfg.PollOnly {
		lctx, stop := context.WithCancel(ctx)
		defer stop()
		l, err := notify.New(notify.Config{
			ConnConfig: r.pool.Config().ConnConfig.Copy(),
			Channels:   []string{Channel(r.cfg.Schema)},
			OnNotify:   func(string, string) { r.Wake() },
			OnConnect:  r.Wake, // notifications sent while disconnected are lost: poll now
			Logger:     r.log,
		})
		if err != nil {
			return fmt.Errorf("outbox: starting the relay's listener: %w", err)
		}
		wg.Go(func() { _ = l.Run(lctx) })
		defer wg.Wait()
		defer stop()
	}
	var loops sync.WaitGroup
	for i := range wakes {
		loops.Go(func() { r.loop(ctx, wakes[i]) })
	}
	loops.Wait()
	return nil
}

func slicesDelete(all, remove []chan struct{}) []chan struct{} {
	out := all[:0]
	for _, ch := range all {
		keep := true
		for _, x := range remove {
			if ch == x {
				keep = false
			}
		}
		if keep {
			out = append(out, ch)
		}
	}
	return out
}

func (r *Relay) loop(ctx context.Context, wake chan struct{}) {
	for ctx.Err() == nil {
		res, err := r.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.log.Warn("outbox relay: batch failed; retrying after the poll interval", "error", err)
		} else if res.claimed > 0 {
			continue // drain: more may be due
		}
		t := time.NewTimer(r.jittered())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

func (r *Relay) jittered() time.Duration {
	d := r.cfg.PollInterval
	return d - d/10 + rand.N(d/5+1)
}

// RunOnce claims one batch, publishes it and records the outcomes. It returns how
// many events were marked published and how many failed (scheduled for retry,
// parked, or given back). A lost lease counts in neither. If ctx ends during the
// publish, the marks still run on a fresh context bounded by StopTimeout.
func (r *Relay) RunOnce(ctx context.Context) (published, failed int, err error) {
	res, err := r.runOnce(ctx)
	return res.published, res.failed, err
}

type batchResult struct {
	claimed, published, failed int
}

func (r *Relay) now() *time.Time { return nowParam(r.cfg.Clock) }

func (r *Relay) runOnce(ctx context.Context) (batchResult, error) {
	var res batchResult
	evs, err := r.store.OutboxClaim(ctx, r.pool, r.now(), store.OutboxClaimParams{
		Limit: r.cfg.BatchSize, Lease: r.cfg.LeaseDuration, Ordered: r.cfg.OrderedByAggregate,
	})
	if err != nil {
		if ctx.Err() != nil {
			return res, nil
		}
		r.errs.Add(1)
		return res, fmt.Errorf("claiming outbox events: %w", wrapPgError(err))
	}
	res.claimed = len(evs)
	if len(evs) == 0 {
		return res, nil
	}
	r.batches.Add(1)

	outs := make([]store.OutboxOutcome, 0, len(evs))
	msgs := make([]Message, 0, len(evs))
	tokens := make([]string, 0, len(evs))
	for _, ev := range evs {
		token := *ev.RelayToken
		if ev.Attempts > ev.MaxAttempts {
			// The previous claim used the last attempt and its relay never reported
			// back (crashed or hung past its lease). Park without publishing again.
			outs = append(outs, store.OutboxOutcome{ID: ev.ID, Token: token, Action: store.OutboxDead,
				Error: fmt.Sprintf("relay lease expired on the last attempt (%d of %d)", ev.MaxAttempts, ev.MaxAttempts)})
			continue
		}
		msgs = append(msgs, Message{
			ID: ev.ID, AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, EventType: ev.EventType,
			Destination: ev.Destination, Payload: ev.Payload, Headers: ev.Headers, CreatedAt: ev.CreatedAt,
			Attempt: ev.Attempts,
		})
		tokens = append(tokens, token)
	}
	if len(msgs) > 0 {
		errs := r.publish(ctx, msgs)
		stopping := ctx.Err() != nil
		for i, m := range msgs {
			o := store.OutboxOutcome{ID: m.ID, Token: tokens[i]}
			switch e := errs[i]; {
			case e == nil:
				o.Action = store.OutboxPublished
			case stopping:
				o.Action = store.OutboxRelease // our own cancellation, not the event's fault
			case IsPermanent(e):
				o.Action, o.Error = store.OutboxDead, errorText(e)
			default:
				o.Action, o.Error, o.Delay = store.OutboxRetry, errorText(e), r.cfg.RetryPolicy.Delay(m.Attempt)
			}
			outs = append(outs, o)
		}
	}

	// The marks record what already happened outside: they must not be lost to a
	// stop that arrives now. They run detached from ctx, and only once ctx has ended
	// are they bounded, by StopTimeout.
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(r.cfg.StopTimeout, cancel) })()
	if r.beforeMark != nil {
		if err := r.beforeMark(mctx); err != nil {
			r.errs.Add(1)
			return res, fmt.Errorf("marking %d outbox event(s): %w", len(outs), err)
		}
	}
	done, err := r.store.OutboxFinish(mctx, r.pool, r.now(), outs)
	if err != nil {
		// The events stay leased; after LeaseDuration another claim retries them
		// (republishing those that were published: at-least-once).
		r.errs.Add(1)
		return res, fmt.Errorf("marking %d outbox event(s): %w", len(outs), err)
	}
	for _, o := range outs {
		action, ok := done[o.ID]
		if !ok {
			r.lost.Add(1)
			r.log.Debug("outbox relay: lease lost before mark; outcome dropped", "event_id", o.ID, "outcome", string(o.Action))
			continue
		}
		switch action {
		case store.OutboxPublished:
			res.published++
			r.published.Add(1)
		case store.OutboxDead:
			res.failed++
			r.dead.Add(1)
			r.log.Warn("outbox relay: event parked as dead", "event_id", o.ID, "error", o.Error)
		case store.OutboxRetry:
			res.failed++
			r.retried.Add(1)
		case store.OutboxRelease:
			res.failed++
			r.released.Add(1)
		}
	}
	r.log.Debug("outbox relay: batch done", "claimed", res.claimed, "published", res.published, "failed", res.failed)
	return res, nil
}

// publish calls the Publisher with a deadline of one lease (after it, another relay
// may own the events) and guards against a broken Publisher: a panic or a result of
// the wrong length fails the whole batch, to be retried.
func (r *Relay) publish(ctx context.Context, msgs []Message) (errs []error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseDuration)
	defer cancel()
	fail := func(err error) []error {
		out := make([]error, len(msgs))
		for i := range out {
			out[i] = err
		}
		return out
	}
	defer func() {
		if p := recover(); p != nil {
			errs = fail(fmt.Errorf("outbox: publisher panicked: %v", p))
		}
	}()
	errs = r.pub.Publish(pctx, msgs)
	if len(errs) != len(msgs) {
		return fail(fmt.Errorf("outbox: publisher returned %d results for %d messages", len(errs), len(msgs)))
	}
	return errs
}

// errorText makes an error storable as last_error: valid UTF-8, no NUL, bounded.
func errorText(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	const max = 2000
	if len(s) > max {
		s = s[:max]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}
