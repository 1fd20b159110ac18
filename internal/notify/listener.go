// Package notify keeps one dedicated PostgreSQL connection LISTENing on a set of
// channels, reconnecting with jittered backoff when it breaks.
//
// Notifications only shorten latency; they are never the source of truth. A dropped
// connection loses the notifications sent while it was down, so after every
// (re)connect the listener calls OnConnect, and callers treat that as "something may
// have arrived": producers poll at once. Callers keep polling on a timer regardless.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/backoff"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// Config configures a Listener.
type Config struct {
	// ConnConfig is where to connect; the listener opens its own connection (one
	// per Listener) outside any pool. Required.
	ConnConfig *pgx.ConnConfig
	// Channels to LISTEN on. Required.
	Channels []string
	// OnNotify is called for each notification, from the listener's goroutine; it
	// must not block. Required.
	OnNotify func(channel, payload string)
	// OnConnect is called after each successful (re)connect and LISTEN. Optional.
	OnConnect func()
	// Logger. Default: discard.
	Logger *slog.Logger
	// MaxBackoff caps the wait between reconnect attempts. Default 5s.
	MaxBackoff time.Duration
}

// heard is the process's notification observer (SetHeard), or nil.
var heard atomic.Pointer[func(channel, payload string)]

// SetHeard makes f hear every notification that any Listener of this process
// receives, from that listener's goroutine, just before its OnNotify; nil removes it.
// f must not block.
//
// It exists for the bench, which times each notification's arrival at the library's
// own listener. A probe that LISTENed on a connection of its own would be one more
// backend for every notifying commit to signal and wake, a cost the peers' harnesses
// do not add (docs/benchmarks-archive.md, "W6 heard at the library's own listener");
// and the stage it times is the one the claim follows from.
func SetHeard(f func(channel, payload string)) {
	if f == nil {
		heard.Store(nil)
		return
	}
	heard.Store(&f)
}

// Listener is a reconnecting LISTEN connection.
type Listener struct {
	cfg       Config
	connected atomic.Bool
	pid       atomic.Uint32
	reconnect atomic.Int64
}

// New validates cfg and returns a Listener; call Run to start it.
func New(cfg Config) (*Listener, error) {
	if cfg.ConnConfig == nil || len(cfg.Channels) == 0 || cfg.OnNotify == nil {
		return nil, errors.New("notify: ConnConfig, Channels and OnNotify are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	return &Listener{cfg: cfg}, nil
}

// Connected reports whether the listener currently holds a LISTENing connection.
func (l *Listener) Connected() bool { return l.connected.Load() }

// PID returns the server process id of the current connection (0 when disconnected).
func (l *Listener) PID() uint32 { return l.pid.Load() }

// Reconnects counts successful connects after the first.
func (l *Listener) Reconnects() int64 { return l.reconnect.Load() }

// Run listens until ctx ends, reconnecting as needed. It returns nil when ctx ends.
//
// An outage is logged twice, whatever its length: once at Warn when the connection
// is lost (or the first connect fails), once at Warn when it is back, with how long
// it was down and how many attempts it took. The attempts in between log at Debug:
// a failover of tens of seconds is two lines, not one per retry.
func (l *Listener) Run(ctx context.Context) error {
	retry := backoff.Backoff{Initial: 50 * time.Millisecond, Max: l.cfg.MaxBackoff, Jitter: reconnectJitter}
	first := true
	var downSince time.Time // zero while connected (or before the first attempt)
	attempts := 0
	for ctx.Err() == nil {
		err := l.session(ctx, func() {
			if !first {
				l.reconnect.Add(1)
			}
			first = false
			retry.Reset()
			if !downSince.IsZero() {
				l.cfg.Logger.Warn("notify: listener reconnected", "down_for", hostclock.Since(downSince).Round(time.Millisecond), "attempts", attempts)
				downSince, attempts = time.Time{}, 0
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		wait := retry.Next()
		attempts++
		if downSince.IsZero() {
			downSince = hostclock.Now()
			l.cfg.Logger.Warn("notify: listener connection lost; reconnecting", "error", err, "retry_in", wait)
		} else {
			l.cfg.Logger.Debug("notify: listener reconnect failed", "error", err, "attempt", attempts, "retry_in", wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return nil
}

// reconnectJitter is the listener's spread of a reconnect's wait: between half of
// the delay and all of it, wider than hostclock.Jitter's ±10%.
func reconnectJitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// session runs one connection until it fails or ctx ends.
func (l *Listener) session(ctx context.Context, onUp func()) error {
	conn, err := pgx.ConnectConfig(ctx, l.cfg.ConnConfig)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer func() {
		l.connected.Store(false)
		l.pid.Store(0)
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(closeCtx)
		cancel()
	}()
	for _, ch := range l.cfg.Channels {
		if err := store.Listen(ctx, conn, ch); err != nil {
			return fmt.Errorf("LISTEN %s: %w", ch, err)
		}
	}
	l.pid.Store(conn.PgConn().PID())
	l.connected.Store(true)
	onUp()
	if l.cfg.OnConnect != nil {
		l.cfg.OnConnect()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if h := heard.Load(); h != nil {
			(*h)(n.Channel, n.Payload)
		}
		l.cfg.OnNotify(n.Channel, n.Payload)
	}
}
