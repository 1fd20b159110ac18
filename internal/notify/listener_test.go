package notify

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestSetHeardHearsBeforeOnNotify: the observer hears each notification the listener
// receives, before its OnNotify, and nothing once removed.
func TestSetHeardHearsBeforeOnNotify(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	const channel = "skiplock_notify_heard_test"
	events := make(chan string, 16)
	defer SetHeard(nil)
	SetHeard(func(ch, payload string) {
		if ch == channel {
			events <- "heard " + payload
		}
	})
	up := make(chan struct{}, 1)
	l, err := New(Config{ConnConfig: pool.Config().ConnConfig.Copy(), Channels: []string{channel},
		OnNotify:  func(_, payload string) { events <- "notified " + payload },
		OnConnect: func() { up <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-up
	next := func() string {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no notification within 10 s")
			return ""
		}
	}
	if _, err := pool.Exec(ctx, "SELECT pg_notify($1, 'a')", channel); err != nil {
		t.Fatal(err)
	}
	if a, b := next(), next(); a != "heard a" || b != "notified a" {
		t.Fatalf("got %q then %q; want the observer first, then OnNotify", a, b)
	}
	SetHeard(nil)
	if _, err := pool.Exec(ctx, "SELECT pg_notify($1, 'b')", channel); err != nil {
		t.Fatal(err)
	}
	if e := next(); e != "notified b" {
		t.Fatalf("got %q after SetHeard(nil); want only OnNotify", e)
	}
}
