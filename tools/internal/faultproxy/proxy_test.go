package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// echoServer echoes every line back until the connection closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(echoServer(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{Conn: c, r: bufio.NewReader(c)}
}

// roundTrip sends a line and returns the echo, or an error if none arrives within wait.
func (c *client) roundTrip(line string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	return c.readLine(wait)
}

func (c *client) readLine(wait time.Duration) (string, error) {
	c.SetReadDeadline(time.Now().Add(wait))
	s, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return s[:len(s)-1], nil
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-time.After(2 * time.Millisecond)
	}
}

func TestForwards(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	c := dial(t, p)
	for _, msg := range []string{"hello", "world"} {
		got, err := c.roundTrip(msg, 5*time.Second)
		if err != nil || got != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	if p.Accepted() != 1 || p.Active() != 1 {
		t.Fatalf("accepted %d active %d, want 1 and 1", p.Accepted(), p.Active())
	}
}

func TestDropAllClosesOpenConnectionsAndKeepsAccepting(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	a, b := dial(t, p), dial(t, p)
	for _, c := range []*client{a, b} {
		if _, err := c.roundTrip("up", 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.DropAll(); n != 2 {
		t.Fatalf("DropAll closed %d connections, want 2", n)
	}
	for _, c := range []*client{a, b} {
		if _, err := c.readLine(5 * time.Second); !errors.Is(err, io.EOF) && !isReset(err) {
			t.Fatalf("read after drop: %v, want EOF or reset", err)
		}
	}
	waitFor(t, "no active connections", func() bool { return p.Active() == 0 })
	c := dial(t, p)
	if got, err := c.roundTrip("again", 5*time.Second); err != nil || got != "again" {
		t.Fatalf("new connection after drop: %q, %v", got, err)
	}
	if p.Dropped() != 2 {
		t.Fatalf("Dropped() = %d, want 2", p.Dropped())
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func TestStallHoldsBytesUntilResume(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	open := dial(t, p)
	if _, err := open.roundTrip("before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	if !p.Stalled() {
		t.Fatal("Stalled() is false after Stall")
	}
	// Nothing may come through during the stall, on an open connection or on one
	// accepted during it. The read deadline is the observation window.
	late := dial(t, p)
	for _, c := range []*client{open, late} {
		if got, err := c.roundTrip("held", 150*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("during stall: got %q, %v; want a read timeout", got, err)
		}
	}
	p.Resume()
	for _, c := range []*client{open, late} {
		if got, err := c.readLine(5 * time.Second); err != nil || got != "held" {
			t.Fatalf("after resume: %q, %v; want the held line", got, err)
		}
		if got, err := c.roundTrip("after", 5*time.Second); err != nil || got != "after" {
			t.Fatalf("after resume: %q, %v", got, err)
		}
	}
}

func TestDropAllDuringStall(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	c := dial(t, p)
	if _, err := c.roundTrip("x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	if _, err := c.Write([]byte("stuck\n")); err != nil {
		t.Fatal(err)
	}
	p.DropAll()
	if _, err := c.readLine(5 * time.Second); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("read after drop during stall: %v", err)
	}
	p.Resume()
	fresh := dial(t, p)
	if got, err := fresh.roundTrip("ok", 5*time.Second); err != nil || got != "ok" {
		t.Fatalf("after drop and resume: %q, %v", got, err)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	p, err := New(echoServer(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	if _, err := c.roundTrip("x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Stall() // Close must also release stalled pumps
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.readLine(5 * time.Second); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("read after Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("dial after Close succeeded")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestUnreachableTargetClosesClient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p, err := New(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p)
	if _, err := c.readLine(5 * time.Second); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("read through a proxy to nowhere: %v", err)
	}
}
