package notify

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// records is a slog handler that sends each record's level and message.
type records chan string

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	r <- rec.Level.String() + " " + rec.Message
	return nil
}
func (r records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r records) WithGroup(string) slog.Handler      { return r }

// TestOutageLoggedOnce: an outage that takes many reconnect attempts is two Warn
// lines — lost, then reconnected — and the attempts in between are Debug; the
// listener is LISTENing again afterwards.
func TestOutageLoggedOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	cc := pool.Config().ConnConfig
	g := pgtest.NewGate(t, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	g.SetOpen(true)
	cfg := cc.Copy()
	cfg.Host, cfg.Port, cfg.Fallbacks = "127.0.0.1", g.Port(), nil
	cfg.ConnectTimeout = 2 * time.Second
	const channel = "skiplock_notify_outage_test"
	logs := make(records, 1024)
	up := make(chan struct{}, 16)
	got := make(chan string, 16)
	l, err := New(Config{ConnConfig: cfg, Channels: []string{channel}, MaxBackoff: 20 * time.Millisecond,
		Logger:    slog.New(logs),
		OnNotify:  func(_, payload string) { got <- payload },
		OnConnect: func() { up <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait := func(what string, ch chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing within 10 s", what)
		}
	}
	wait("first connect", up)

	g.SetOpen(false)
	var seen []string
	for failed := 0; failed < 10; {
		select {
		case line := <-logs:
			seen = append(seen, line)
			if strings.HasPrefix(line, "DEBUG notify: listener reconnect failed") {
				failed++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("fewer than 10 failed reconnects within 10 s; logged: %q", seen)
		}
	}
	g.SetOpen(true)
	wait("reconnect", up)
	for {
		select {
		case line := <-logs:
			seen = append(seen, line)
			continue
		default:
		}
		break
	}
	var warns []string
	for _, line := range seen {
		if strings.HasPrefix(line, "WARN") {
			warns = append(warns, line)
		}
	}
	want := []string{"WARN notify: listener connection lost; reconnecting", "WARN notify: listener reconnected"}
	if len(warns) != 2 || warns[0] != want[0] || warns[1] != want[1] {
		t.Fatalf("warnings over an outage of more than 10 attempts: %q; want %q", warns, want)
	}
	if l.Reconnects() != 1 {
		t.Fatalf("Reconnects() = %d; want 1", l.Reconnects())
	}
	if _, err := pool.Exec(ctx, "SELECT pg_notify($1, 'after')", channel); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != "after" {
			t.Fatalf("got %q; want the notification sent after the outage", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after the reconnect")
	}
}
