// Package linktest is a TCP proxy for tests of nodes on loopback: put one between two nodes and
// cut the link between them, by resets or by stalling it, and heal it again.
package linktest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Mode is the state of a link.
type Mode int

const (
	// Up forwards every byte.
	Up Mode = iota
	// Reset closes every connection and refuses new ones, as a node that is down does.
	Reset
	// Stall holds every byte until the link is up again, as a partition without resets does
	// (TCP then delivers it late).
	Stall
)

// Reserve returns n free loopback addresses, held until release is called: proxies made
// meanwhile cannot take one of them, as they could once the addresses were let go.
func Reserve(t testing.TB, n int) (addrs []string, release func()) {
	t.Helper()
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
}

// Proxy forwards the TCP connections it accepts to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	mode  Mode
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// New starts a proxy to target on a free loopback port; t's cleanup closes it.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address to dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.mode == Reset {
			p.mu.Unlock()
			in.Close()
			continue
		}
		p.mu.Unlock()
		out, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		src.Close()
		dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.mode == Stall {
				p.cond.Wait()
			}
			reset := p.mode == Reset
			p.mu.Unlock()
			if reset {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Set puts the link in mode m.
func (p *Proxy) Set(m Mode) {
	p.mu.Lock()
	p.mode = m
	if m == Reset {
		for c := range p.conns {
			c.Close()
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close resets the link for good and waits for its goroutines. It may be called more than once.
func (p *Proxy) Close() {
	p.Set(Reset)
	p.ln.Close()
	p.wg.Wait()
}
