package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a PostgreSQL server, so a test can cut
// the network between a store and a real database (an outage: connections
// reset, new ones refused) and restore it, without stopping a server that
// other tests share.
type Proxy struct {
	t      testing.TB
	addr   string // where the proxy listens, 127.0.0.1:PORT
	target string // the server's host:port

	mu    sync.Mutex
	ln    net.Listener // nil while cut
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to the server dsn names (a postgres:// URL) and
// returns it with dsn rewritten to connect through it. The proxy stops at
// cleanup.
func NewProxy(t testing.TB, dsn string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" || u.Host == "" {
		t.Fatalf("pgtest.NewProxy needs a postgres:// URL with a host, got a DSN of another form")
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.Cut()
		p.wg.Wait()
	})
	u.Host = p.addr
	return p, u.String()
}

// Cut closes every forwarded connection and stops listening: the store's
// connections are reset and new ones are refused until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// Restore listens again on the same address.
func (p *Proxy) Restore() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.serveLocked(ln)
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serveLocked(ln)
}

func (p *Proxy) serveLocked(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.forward(c)
		}
	}()
}

// forward connects c to the target and copies both ways until either side
// closes or Cut closes both.
func (p *Proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut while dialing
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var once sync.Once
	done := func() {
		once.Do(func() {
			c.Close()
			up.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, up)
			p.mu.Unlock()
		})
	}
	p.wg.Add(2)
	go func() { defer p.wg.Done(); io.Copy(up, c); done() }()
	go func() { defer p.wg.Done(); io.Copy(c, up); done() }()
}
