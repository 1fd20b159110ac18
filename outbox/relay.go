package outbox

// The relay: Relay, its constructor and Run's claim/publish/mark loop. A batch is
// claimed under a lease, published with one Publish call, and its outcomes are
// recorded by the marker (relay_mark.go).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/notify"
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
	return &Relay{o: o, pub: pub, cfg: c, log: c.Logger}, nil
}

// Wake makes every waiting loop of Run poll now. It is what the LISTEN connection
// calls on a notification; call it yourself if you learn of new events another way.
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

// Run relays until ctx ends, then finishes the marks of the batches in flight and
// returns nil. Claim and mark errors (the database is down, say) are logged and
// retried at the poll interval; they do not stop Run. A schema that is reachable
// but not migrated for this build (a misspelt schema name, most often) does: Run
// returns skiplock.ErrNotMigrated or skiplock.ErrSchemaNewer at once, instead of
// logging the same failed claim at every poll.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.usable(ctx); err != nil {
		return err
	}
	// Bounded: a connection that stalls must not hold Run before its loops start
	// (they time their statements out and retry).
	cctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseDuration)
	err := r.o.client.CheckSchema(cctx)
	cancel()
	if errors.Is(err, skiplock.ErrNotMigrated) || errors.Is(err, skiplock.ErrSchemaNewer) {
		return fmt.Errorf("outbox: relay: %w", err)
	}
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
			ConnConfig: r.o.pool.Config().ConnConfig.Copy(),
			Channels:   []string{Channel(r.o.schema)},
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
			r.log.Warn("outbox relay: batch failed", "error", err)
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
	res, err := r.runOnce(ctx)
	return res.published, res.failed, err
}

type batchResult struct {
	claimed, published, failed int
}

func (r *Relay) runOnce(ctx context.Context) (batchResult, error) {
	var res batchResult
	evs, err := r.o.store.OutboxClaim(ctx, r.o.pool, r.o.now(), store.OutboxClaimParams{
		Limit: r.cfg.BatchSize, Lease: r.cfg.LeaseDuration, Ordered: r.cfg.OrderedByAggregate,
	})
	if err != nil {
		if ctx.Err() != nil {
			return res, nil
		}
		r.errs.Add(1)
		return res, fmt.Errorf("claiming outbox events: %w", wrapDB(err, "outbox"))
	}
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
			outs = append(outs, store.OutboxOutcome{ID: ev.ID, Token: token, Action: store.OutboxDead,
				Error: fmt.Sprintf("relay lease expired on the last attempt (%d of %d)", ev.MaxAttempts, ev.MaxAttempts)})
			continue
		}
		msgs = append(msgs, Message{
			ID: ev.ID, AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, EventType: ev.EventType,
			Destination: ev.Destination, Payload: ev.Payload, Headers: ev.Headers, CreatedAt: ev.CreatedAt,
			Attempt: ev.Attempts,
		})
		sent = append(sent, store.OutboxOutcome{ID: ev.ID, Token: token})
		attempts = append(attempts, ev.Attempts)
	}
	if len(msgs) > 0 {
		errs := r.publish(ctx, msgs)
		stopping := ctx.Err() != nil
		for i, o := range sent {
			outs = append(outs, r.outcome(o, attempts[i], errs[i], stopping))
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
	m := &marker{r: r, ctx: mctx, done: make(map[string]store.OutboxAction, len(outs)),
		settled: make(map[string]bool, len(outs)), budget: 8*bits.Len(uint(len(outs))) + 8}
	ferr := m.finish(outs)
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
	switch {
	case ferr != nil:
		// The unrecorded events stay leased; after LeaseDuration another claim
		// retries them (republishing those that were published: at-least-once).
		r.errs.Add(1)
		return res, fmt.Errorf("marking %d of %d outbox event(s): %w", unrecorded, len(outs), ferr)
	case unrecorded > 0:
		r.errs.Add(1)
		return res, fmt.Errorf("marking outbox events: the database refused %d of %d outcome(s), left leased until their lease expires: %w",
			unrecorded, len(outs), errors.Join(m.errs...))
	}
	return res, nil
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
