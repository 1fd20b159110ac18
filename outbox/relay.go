package outbox

// The relay: Relay, its constructor, its lifecycle (Start, Stop, the shape of
// Client's) and the claim/publish/mark loop. A batch is claimed under a lease,
// published with one Publish call, and its outcomes are recorded by mark
// (relay_mark.go).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/failures"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/lifecycle"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/safetext"
	"github.com/skiplock/skiplock/internal/store"
)

// Relay moves committed outbox events to a Publisher: claim a batch under a lease
// and a fresh token, publish it with one Publish call, then record each event's
// outcome with a statement fenced by the token. It never marks on claim, so a crash
// between publish and mark republishes (at-least-once) under the same event id.
// Any number of relays, in one process or many, may run against one schema.
//
// Nothing one event or one publisher result can do stops a relay or holds up the
// other events of its batch; see RunOnce for what happens to an outcome the
// database refuses to record.
type Relay struct {
	o   *Outbox
	pub Publisher
	cfg RelayConfig
	log *slog.Logger

	// fails reports the repeating operations (relay:claim, relay:publish,
	// relay:mark): rate-limited log lines, counts, Operations.
	fails *failures.Reporter
	// listenConn is where the LISTEN connection goes: RelayConfig.ListenURL's, or the pool's.
	listenConn *pgx.ConnConfig

	mu  sync.Mutex
	run *relayRun // non-nil from Start until the run has stopped

	wakeMu sync.Mutex
	wakes  []chan struct{}

	published, retried, dead, released, lost, batches, errs atomic.Int64

	// beforeMark, when set (by tests), runs between publish and mark; an error skips
	// the mark as a crash at that point would.
	beforeMark func(ctx context.Context) error
}

// NewRelay validates cfg and returns a Relay that claims from the outbox's schema
// on its client's pool and publishes with pub. The Relay does not close pub.
func (o *Outbox) NewRelay(pub Publisher, cfg RelayConfig) (*Relay, error) {
	if o == nil || o.store == nil {
		return nil, &skiplock.ValidationError{Field: "outbox", Reason: "not created by outbox.New"}
	}
	if o.pool == nil {
		return nil, &skiplock.ValidationError{Field: "client", Reason: "has no pool; create it with skiplock.NewClient"}
	}
	if isNil(pub) {
		return nil, &skiplock.ValidationError{Field: "publisher", Reason: fmt.Sprintf("is a nil %T; pass a Publisher such as webhookpub.New's", pub)}
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	listenConn := o.pool.Config().ConnConfig
	if c.ListenURL != "" {
		if listenConn, err = pgx.ParseConfig(c.ListenURL); err != nil {
			return nil, &skiplock.ValidationError{Field: "listen_url", Reason: err.Error()} // pgx leaves the password out
		}
	}
	return &Relay{o: o, pub: pub, cfg: c, log: c.Logger, fails: failures.New(c.Logger), listenConn: listenConn}, nil
}

// Wake makes every waiting loop of a started relay poll now. It is what the LISTEN
// connection calls on a notification; call it yourself if you learn of new events
// another way.
func (r *Relay) Wake() {
	if r == nil {
		return
	}
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	for _, ch := range r.wakes {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// usable refuses a Relay not made by NewRelay and a nil ctx.
func (r *Relay) usable(ctx context.Context) error {
	if r == nil || r.o == nil || r.pub == nil {
		return &skiplock.ValidationError{Field: "relay", Reason: "not created by Outbox.NewRelay"}
	}
	if ctx == nil {
		return &skiplock.ValidationError{Field: "ctx", Reason: "must not be nil; use context.Background() or a signal context"}
	}
	return nil
}

// relayRun is one started run of a relay, from Start to the end of its stop.
type relayRun struct {
	stopLoops context.CancelFunc // no new claims; a publish in flight is cancelled
	hard      context.CancelFunc // the marks in flight are cancelled
	stopped   chan struct{}      // closed once every loop and the listener returned
}

// stop stops the run and waits for it, as Relay.Stop documents.
func (run *relayRun) stop(ctx context.Context) error {
	run.stopLoops()
	select {
	case <-run.stopped:
		return nil
	case <-ctx.Done():
	}
	run.hard()
	<-run.stopped
	return fmt.Errorf("outbox: stopping relay: %w", ctx.Err())
}

// Start checks the schema and starts the relay's Concurrency claim/publish/mark
// loops (and, unless PollOnly, its LISTEN connection); it returns once they run. The
// relay runs until Stop, or until ctx ends: ending ctx (a signal.NotifyContext on
// SIGTERM, say) is a graceful stop bounded by StopTimeout, as Stop with that
// timeout. This is Client.Start's shape.
//
// Claim, publish and mark failures (the database or the broker is down, say) do not
// stop a started relay: they are retried at the poll interval, logged once and then
// at most every 30s, and reported by Operations. A schema that is reachable but not
// migrated for this build (a misspelt schema name, most often) does: Start returns
// skiplock.ErrNotMigrated or skiplock.ErrSchemaNewer instead of failing the same
// claim at every poll. Start on a running relay returns ErrRelayStarted.
func (r *Relay) Start(ctx context.Context) error {
	if err := r.usable(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("outbox: starting relay: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run != nil {
		return ErrRelayStarted
	}
	// Bounded: a connection that stalls must not hold Start (the loops time their
	// statements out and retry).
	cctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseDuration)
	err := r.o.client.CheckSchema(cctx)
	cancel()
	if errors.Is(err, skiplock.ErrNotMigrated) || errors.Is(err, skiplock.ErrSchemaNewer) {
		return fmt.Errorf("outbox: starting relay: %w", err)
	}
	base := context.WithoutCancel(ctx)
	loopCtx, stopLoops := context.WithCancel(base)
	hardCtx, hard := context.WithCancel(base)
	run := &relayRun{stopLoops: stopLoops, hard: hard, stopped: make(chan struct{})}

	var listener *notify.Listener
	if !r.cfg.PollOnly {
		listener, err = notify.New(notify.Config{
			ConnConfig: r.listenConn.Copy(),
			Channels:   []string{Channel(r.o.schema)},
			OnNotify:   func(string, string) { r.Wake() },
			OnConnect:  r.Wake, // notifications sent while disconnected are lost: poll now
			Logger:     r.log,
		})
		if err != nil {
			stopLoops()
			hard()
			return fmt.Errorf("outbox: starting the relay's listener: %w", err)
		}
	}
	wakes := make([]chan struct{}, r.cfg.Concurrency)
	r.wakeMu.Lock()
	for i := range wakes {
		wakes[i] = make(chan struct{}, 1)
		r.wakes = append(r.wakes, wakes[i])
	}
	r.wakeMu.Unlock()

	var wg sync.WaitGroup
	if listener != nil {
		wg.Go(func() { _ = listener.Run(loopCtx) })
	}
	for i := range wakes {
		wg.Go(func() { r.loop(loopCtx, hardCtx, wakes[i]) })
	}
	go func() {
		wg.Wait()
		hard()
		r.wakeMu.Lock()
		r.wakes = slicesDelete(r.wakes, wakes)
		r.wakeMu.Unlock()
		r.mu.Lock()
		r.run = nil
		r.mu.Unlock()
		close(run.stopped)
		r.log.Info("outbox relay: stopped")
	}()
	go lifecycle.StopWhenDone(ctx, run.stopped, r.cfg.StopTimeout, run.stop, func() {
		r.log.Warn("outbox relay: marks still running at the end of StopTimeout were cancelled; their events are claimed again once their lease expires",
			"stop_timeout", r.cfg.StopTimeout)
	})
	r.run = run
	r.log.Info("outbox relay: started", "concurrency", r.cfg.Concurrency, "poll_only", r.cfg.PollOnly)
	return nil
}

// Stop stops claiming, cancels the publish in flight (its events are given back
// unpublished, without spending an attempt) and waits for the batches in flight to be
// marked. If ctx ends first, the marks are cancelled — their events stay leased and
// are claimed again once the lease expires, as after a crash — and Stop returns ctx's
// error once the loops have returned. Stop on a relay that is not running returns
// nil; a second concurrent Stop waits for the first. This is Client.Stop's shape.
func (r *Relay) Stop(ctx context.Context) error {
	if err := r.usable(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	run := r.run
	r.mu.Unlock()
	if run == nil {
		return nil
	}
	return run.stop(ctx)
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

// loop claims, publishes and marks until ctx ends; hard cancels the marks of the
// batch in flight.
func (r *Relay) loop(ctx, hard context.Context, wake chan struct{}) {
	for ctx.Err() == nil {
		res, _ := r.runOnce(ctx, hard) // failures are reported (rate-limited) by runOnce
		if ctx.Err() != nil {
			return
		}
		if res.claimed > 0 {
			// Drain: more may be due. A batch whose marks failed left its events
			// leased, so they are not claimed again until the lease expires; a
			// claim that failed claimed nothing and waits for the poll interval.
			continue
		}
		t := time.NewTimer(hostclock.Jitter(r.cfg.PollInterval))
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

// RunOnce claims one batch, publishes it and records the outcomes. It returns how
// many events were marked published and how many failed (scheduled for retry,
// parked, or given back). A lost lease counts in neither. If ctx ends during the
// publish, the marks still run on a fresh context bounded by StopTimeout.
//
// The outcomes are recorded with one statement. If the database refuses it for a
// reason that retrying cannot fix (a constraint or a trigger that rejects one row,
// say), the batch is split until the refused outcome is alone, so every other
// outcome is recorded; the refused one is tried once more with a fixed, plain error
// text in place of the publisher's (the original is logged), and if that is refused
// too it is left unrecorded: the event keeps its lease until it expires and is then
// claimed again, as after a crash. RunOnce then reports the refused outcomes in err
// alongside the counts of the recorded ones. If the statement fails for a reason
// retrying can fix (the database is unreachable), nothing is recorded and the whole
// batch is claimed again once its lease expires.
func (r *Relay) RunOnce(ctx context.Context) (published, failed int, err error) {
	if err := r.usable(ctx); err != nil {
		return 0, 0, err
	}
	hard, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(r.cfg.StopTimeout, cancel) })()
	res, err := r.runOnce(ctx, hard)
	return res.published, res.failed, err
}

type batchResult struct {
	claimed, published, failed int
}

// The relay's repeating operations, as Operations reports them.
const (
	opClaim   = "relay:claim"
	opPublish = "relay:publish"
	opMark    = "relay:mark"
)

// runOnce claims, publishes and marks one batch, reporting each step's failure or
// success to the relay's failure reporter. The marks run detached from ctx (they
// record what already happened outside: a stop arriving now must not lose them) and
// are cancelled only when hard ends.
func (r *Relay) runOnce(ctx, hard context.Context) (batchResult, error) {
	var res batchResult
	evs, err := r.o.store.OutboxClaim(ctx, r.o.pool, r.o.now(), store.OutboxClaimParams{
		Limit: r.cfg.BatchSize, Lease: r.cfg.LeaseDuration, Ordered: r.cfg.OrderedByAggregate,
	})
	if err != nil {
		if ctx.Err() != nil {
			return res, nil
		}
		r.errs.Add(1)
		err = fmt.Errorf("claiming outbox events: %w", wrapDB(err, "outbox"))
		r.fails.Warn(opClaim, err, "retry_in", r.cfg.PollInterval)
		return res, err
	}
	r.fails.OK(opClaim)
	res.claimed = len(evs)
	if len(evs) == 0 {
		return res, nil
	}
	r.batches.Add(1)

	outs := make([]store.OutboxOutcome, 0, len(evs))
	msgs := make([]Message, 0, len(evs))
	// The relay's own record of what it handed out: a Publisher may modify msgs.
	sent := make([]store.OutboxOutcome, 0, len(evs))
	attempts := make([]int, 0, len(evs))
	for _, ev := range evs {
		token := *ev.RelayToken
		if ev.Attempts > ev.MaxAttempts {
			// The previous claim used the last attempt and its relay never reported
			// back (crashed or hung past its lease). Park without publishing again.
			outs = append(outs, store.OutboxOutcome{ID: ev.ID, Token: token, Key: ev.ConcurrencyKey, Action: store.OutboxDead,
				Error: fmt.Sprintf("relay lease expired on the last attempt (%d of %d)", ev.MaxAttempts, ev.MaxAttempts)})
			continue
		}
		msgs = append(msgs, Message{
			ID: ev.ID, AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, EventType: ev.EventType,
			Destination: ev.Destination, Payload: ev.Payload, Headers: ev.Headers, CreatedAt: ev.CreatedAt,
			Attempt: ev.Attempts,
		})
		sent = append(sent, store.OutboxOutcome{ID: ev.ID, Token: token, Key: ev.ConcurrencyKey})
		attempts = append(attempts, ev.Attempts)
	}
	if len(msgs) > 0 {
		errs := r.publish(ctx, msgs)
		stopping := ctx.Err() != nil
		for i, o := range sent {
			outs = append(outs, r.outcome(o, attempts[i], errs[i], stopping))
		}
		if !stopping {
			r.reportPublish(errs)
		}
	}

	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(hard, cancel)()
	if r.beforeMark != nil {
		if err := r.beforeMark(mctx); err != nil {
			r.errs.Add(1)
			err = fmt.Errorf("marking %d outbox event(s): %w", len(outs), err)
			r.fails.Warn(opMark, err)
			return res, err
		}
	}
	m, ferr := r.mark(mctx, outs)
	unrecorded := 0
	for _, o := range outs {
		if !m.settled[o.ID] {
			unrecorded++ // refused, or never sent because a statement failed
			continue
		}
		action, ok := m.done[o.ID]
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
			r.fails.Notice("relay:dead", "outbox relay: event parked as dead", "event_id", o.ID, "error", o.Error)
		case store.OutboxRetry:
			res.failed++
			r.retried.Add(1)
		case store.OutboxRelease:
			res.failed++
			r.released.Add(1)
		}
	}
	r.log.Debug("outbox relay: batch done", "claimed", res.claimed, "published", res.published, "failed", res.failed)
	switch {
	case ferr != nil:
		// The unrecorded events stay leased; after LeaseDuration another claim
		// retries them (republishing those that were published: at-least-once).
		r.errs.Add(1)
		err = fmt.Errorf("marking %d of %d outbox event(s): %w", unrecorded, len(outs), ferr)
	case unrecorded > 0:
		r.errs.Add(1)
		err = fmt.Errorf("marking outbox events: the database refused %d of %d outcome(s), left leased until their lease expires: %w",
			unrecorded, len(outs), errors.Join(m.refusals...))
	}
	if err != nil {
		r.fails.Warn(opMark, err, "events", len(outs))
		return res, err
	}
	r.fails.OK(opMark)
	return res, nil
}

// reportPublish reports a batch none of whose messages the broker accepted (it is
// down, or refuses everything) as a failure of relay:publish, and a batch with at
// least one accepted message as a success. Single refused messages are the events'
// business: they are retried or parked, not a failing relay.
func (r *Relay) reportPublish(errs []error) {
	for _, err := range errs {
		if err == nil {
			r.fails.OK(opPublish)
			return
		}
	}
	r.fails.Warn(opPublish, fmt.Errorf("publishing %d outbox event(s), none accepted: %s", len(errs), safetext.Error(errs[0])), "events", len(errs))
}

// publish calls the Publisher with a deadline of one lease (after it, another relay
// may own the events) and guards against a broken Publisher: a panic or a result of
// the wrong length fails the whole batch, to be retried.
func (r *Relay) publish(ctx context.Context, msgs []Message) (errs []error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseDuration)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			errs = FailAll(make([]error, len(msgs)), fmt.Errorf("outbox: publisher panicked: %v", p))
		}
	}()
	errs = r.pub.Publish(pctx, msgs)
	if len(errs) != len(msgs) {
		return FailAll(make([]error, len(msgs)), fmt.Errorf("outbox: publisher returned %d results for %d messages", len(errs), len(msgs)))
	}
	return errs
}
