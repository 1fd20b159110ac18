// Package faultproxy is a TCP proxy that injects network faults between a client and
// a server (the chaos harness puts it between worker processes and PostgreSQL):
//
//   - DropAll closes every open connection at once, as a crashed router or a killed
//     pooler would; new connections are accepted as before.
//   - Stall stops forwarding bytes in both directions on every connection, open or
//     new, without closing anything: a partition, or a network path that silently
//     swallows packets. Resume forwards what was held back and carries on.
//
// Each accepted connection is forwarded to Target by two pumps, one per direction.
// A pump reads a chunk, waits while the proxy is stalled, then writes it on, so a
// stall holds at most one chunk per direction in the proxy and the rest in the
// kernel's socket buffers, as a real partition would.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from a loopback port to a target address.
type Proxy struct {
	target string
	ln     net.Listener
	log    *slog.Logger

	mu      sync.Mutex
	links   map[*link]struct{}
	open    chan struct{} // closed while forwarding; a fresh, open channel during a stall
	stalled bool
	closed  bool

	accepted atomic.Int64
	dropped  atomic.Int64
	wg       sync.WaitGroup
}

type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
	})
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to target
// ("host:port"). Call Close when done.
func New(target string, log *slog.Logger) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listening: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{target: target, ln: ln, log: log, links: map[*link]struct{}{}, open: open}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's listening address ("127.0.0.1:port").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's listening port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Accepted counts the connections accepted since New.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Dropped counts the connections DropAll closed.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Active returns how many connections are open through the proxy.
func (p *Proxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.log.Warn("faultproxy: accept failed", "error", err)
			continue
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		p.log.Debug("faultproxy: dialing target failed", "target", p.target, "error", err)
		client.Close()
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(server, client, l) }()
	go func() { defer pumps.Done(); p.pump(client, server, l) }()
	pumps.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pump copies src to dst, holding each chunk while the proxy is stalled. Either
// direction ending closes the whole link (PostgreSQL's protocol has no half-close).
func (p *Proxy) pump(dst, src net.Conn, l *link) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitOpen(l) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				p.log.Debug("faultproxy: connection ended", "error", err)
			}
			return
		}
	}
}

// waitOpen blocks while the proxy is stalled; false means the link was closed.
func (p *Proxy) waitOpen(l *link) bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-l.done:
		return false
	}
}

// DropAll closes every open connection and returns how many it closed. The proxy
// keeps accepting new connections.
func (p *Proxy) DropAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	p.dropped.Add(int64(len(links)))
	p.log.Info("faultproxy: dropped all connections", "connections", len(links))
	return len(links)
}

// Stall stops forwarding on every connection, open or accepted later, until Resume.
// Connections stay open. Stalling a stalled proxy does nothing.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled || p.closed {
		return
	}
	p.stalled = true
	p.open = make(chan struct{})
	p.log.Info("faultproxy: stalled", "connections", len(p.links))
}

// Resume forwards again after Stall, starting with what was held back.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stalled {
		return
	}
	p.stalled = false
	close(p.open)
	p.log.Info("faultproxy: resumed", "connections", len(p.links))
}

// Stalled reports whether the proxy is stalled.
func (p *Proxy) Stalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.stalled {
		p.stalled = false
		close(p.open)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.DropAll()
	p.wg.Wait()
	return err
}
