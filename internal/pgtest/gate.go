package pgtest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Gate is a TCP forwarder to a server that a test opens and closes: while closed it
// accepts connections and closes them at once, as a server that is down (or a
// primary being replaced) looks to a client; closing it also drops every connection
// it forwards. It starts closed.
type Gate struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	open   bool
	conns  map[net.Conn]struct{}
}

// NewGate listens on a free loopback port and forwards to target (host:port) while
// open. The test's cleanup closes it.
func NewGate(t testing.TB, target string) *Gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); g.SetOpen(false) })
	go g.serve()
	return g
}

// Addr is the gate's host:port.
func (g *Gate) Addr() string { return g.ln.Addr().String() }

// Port is the gate's port on 127.0.0.1.
func (g *Gate) Port() uint16 { return uint16(g.ln.Addr().(*net.TCPAddr).Port) }

// SetOpen opens the gate, or closes it and drops every connection it forwards.
func (g *Gate) SetOpen(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = open
	if !open {
		for c := range g.conns {
			c.Close()
		}
		g.conns = map[net.Conn]struct{}{}
	}
}

func (g *Gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if !g.open {
			g.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", g.target)
		if err != nil {
			g.mu.Unlock()
			c.Close()
			continue
		}
		g.conns[c], g.conns[up] = struct{}{}, struct{}{}
		g.mu.Unlock()
		go func() { io.Copy(up, c); up.Close() }()
		go func() { io.Copy(c, up); c.Close() }()
	}
}
