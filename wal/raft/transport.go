package raft

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The transport: one TCP connection (TLS optional) per node pair, dialed
// by the node with the smaller id and used both ways, carrying the Raft
// messages of every group and the requests between nodes (forwarded
// appends and reads, snapshot segment chunks). Clients dial any node as
// node 0 and send requests only.
//
// Frames: length u32 (of what follows) | kind u8 | payload.
//
//	hello    version u16 | cluster string | from u64 | to u64
//	raft     topic string | partition i32 | raftpb.Message (protobuf)
//	request  id u64 | op u8 | body
//	response id u64 | status u8 (0 ok, 1 error) | body or error
//	ping     (empty)
const (
	frameHello    = 1
	frameRaft     = 2
	frameRequest  = 3
	frameResponse = 4
	framePing     = 5

	protoVersion = 1
	maxFrame     = 256 << 20

	pingInterval = time.Second
	idleTimeout  = 10 * time.Second
	dialTimeout  = 3 * time.Second
)

// errUnreachable is returned by a call to a node with no connection, or
// whose connection broke before the request was written. Retriable.
var errUnreachable = errors.New("node unreachable")

// errConnLost is returned by a call whose connection broke after the
// request was written: the other node may have served it.
var errConnLost = errors.New("connection lost while waiting for the answer")

// handler serves what arrives on connections.
type handler interface {
	// raftMessage takes a message for a group; it must not block.
	raftMessage(from uint64, key groupKey, m *pb.Message)
	// request serves a request; the returned error is sent back.
	request(ctx context.Context, from uint64, op uint8, body []byte) ([]byte, error)
}

// conn is one connection to a node or client.
type conn struct {
	nc     net.Conn
	peer   uint64
	out    chan []byte // frames to write
	closed chan struct{}
	once   sync.Once
	err    error

	callsMu sync.Mutex
	calls   map[uint64]chan callResult
	nextID  uint64
}

type callResult struct {
	body []byte
	err  error
}

func newConn(nc net.Conn, peer uint64) *conn {
	return &conn{nc: nc, peer: peer, out: make(chan []byte, 4096), closed: make(chan struct{}), calls: map[uint64]chan callResult{}}
}

func (c *conn) close(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.closed)
		c.nc.Close()
		c.callsMu.Lock()
		for id, ch := range c.calls {
			ch <- callResult{err: fmt.Errorf("%v: %w", err, errConnLost)}
			delete(c.calls, id)
		}
		c.callsMu.Unlock()
	})
}

// frameHeader is the length and kind before a frame's payload.
const frameHeader = 5

// frame builds a frame of kind with payload.
func frame(kind byte, payload []byte) []byte {
	b := make([]byte, frameHeader, frameHeader+len(payload))
	return sealFrame(append(b, payload...), kind)
}

// framePool holds frame buffers for reuse: a Raft message is marshalled
// into one and the writer puts it back once it copied it, so a steady
// stream of appends does not leave a frame of garbage per message per
// follower.
var framePool sync.Pool

// maxPooledFrame bounds the frames kept for reuse (a large one goes to the
// collector).
const maxPooledFrame = 64 << 10

// getFrame returns an empty buffer with room for n bytes.
func getFrame(n int) []byte {
	if p, _ := framePool.Get().(*[]byte); p != nil && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]byte, 0, max(n, 512))
}

// putFrame keeps b for a later getFrame.
func putFrame(b []byte) {
	if c := cap(b); c > 0 && c <= maxPooledFrame {
		b = b[:0]
		framePool.Put(&b)
	}
}

// sealFrame fills in the header of b, a frame whose payload was appended
// after frameHeader bytes.
func sealFrame(b []byte, kind byte) []byte {
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	b[4] = kind
	return b
}

// trySend queues a frame without blocking.
func (c *conn) trySend(f []byte) bool {
	select {
	case <-c.closed:
		return false
	default:
	}
	select {
	case c.out <- f:
		return true
	default:
		return false
	}
}

// sendCtx queues a frame, waiting for room.
func (c *conn) sendCtx(ctx context.Context, f []byte) error {
	select {
	case c.out <- f:
		return nil
	case <-c.closed:
		return fmt.Errorf("%v: %w", c.err, errUnreachable)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeLoop writes queued frames, flushing when the queue is empty, and a
// ping when idle.
func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, 256<<10)
	ping := time.NewTicker(pingInterval)
	defer ping.Stop()
	for {
		var f []byte
		select {
		case f = <-c.out:
		case <-ping.C:
			f = frame(framePing, nil)
		case <-c.closed:
			return
		}
		for more := true; more; {
			if _, err := bw.Write(f); err != nil {
				c.close(err)
				return
			}
			putFrame(f) // copied: no one holds a frame once it is queued
			select {
			case f = <-c.out:
			default:
				more = false
			}
		}
		if err := bw.Flush(); err != nil {
			c.close(err)
			return
		}
	}
}

// readFrame reads one frame.
func readFrame(r *bufio.Reader) (byte, []byte, error) {
	kind, p, _, err := readFrameInto(r, nil)
	return kind, p, err
}

// maxReuse bounds the read buffer a connection keeps between frames.
const maxReuse = 1 << 20

// readFrameInto reads one frame into buf if it fits, else into a new
// buffer, and returns the buffer used.
func readFrameInto(r *bufio.Reader, buf []byte) (byte, []byte, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, buf, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > maxFrame {
		return 0, nil, buf, fmt.Errorf("frame length %d out of range", n)
	}
	if uint32(cap(buf)) < n {
		buf = make([]byte, n)
	}
	b := buf[:n]
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, buf, err
	}
	return b[0], b[1:], buf, nil
}

// call sends a request and waits for its answer.
func (c *conn) call(ctx context.Context, op uint8, body []byte) ([]byte, error) {
	ch := make(chan callResult, 1)
	c.callsMu.Lock()
	select {
	case <-c.closed:
		c.callsMu.Unlock()
		return nil, fmt.Errorf("%v: %w", c.err, errUnreachable)
	default:
	}
	c.nextID++
	id := c.nextID
	c.calls[id] = ch
	c.callsMu.Unlock()
	e := enc{b: make([]byte, 0, 9+len(body))}
	e.u64(id)
	e.u8(op)
	e.b = append(e.b, body...)
	if err := c.sendCtx(ctx, frame(frameRequest, e.b)); err != nil {
		c.callsMu.Lock()
		delete(c.calls, id)
		c.callsMu.Unlock()
		return nil, err
	}
	select {
	case r := <-ch:
		return r.body, r.err
	case <-ctx.Done():
		c.callsMu.Lock()
		delete(c.calls, id)
		c.callsMu.Unlock()
		return nil, fmt.Errorf("%w: %w", ctx.Err(), errConnLost)
	}
}

// readLoop reads frames until the connection breaks, dispatching them to
// h (nil for a client's connection).
func (c *conn) readLoop(ctx context.Context, br *bufio.Reader, h handler, sem chan struct{}, wg *sync.WaitGroup) {
	// buf is reused for the next frame when this one's payload is not
	// kept: a ping, or a Raft message (decoding copies what it keeps).
	var buf []byte
	for {
		c.nc.SetReadDeadline(time.Now().Add(idleTimeout))
		kind, p, b, err := readFrameInto(br, buf)
		if err != nil {
			c.close(err)
			return
		}
		buf = nil
		if (kind == frameRaft || kind == framePing) && cap(b) <= maxReuse {
			buf = b
		}
		switch kind {
		case framePing:
		case frameRaft:
			if h == nil || c.peer == 0 {
				continue
			}
			d := dec{b: p}
			key := groupKey{topic: d.str(), part: int32(d.u32())}
			if d.err != nil {
				c.close(d.err)
				return
			}
			m := &pb.Message{}
			if err := proto.Unmarshal(d.b, m); err != nil {
				c.close(fmt.Errorf("decode raft message: %w", err))
				return
			}
			h.raftMessage(c.peer, key, m)
		case frameRequest:
			if h == nil {
				continue
			}
			d := dec{b: p}
			id, op := d.u64(), d.u8()
			if d.err != nil {
				c.close(d.err)
				return
			}
			select {
			case sem <- struct{}{}:
			case <-c.closed:
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				body, err := h.request(ctx, c.peer, op, d.b)
				e := enc{}
				e.u64(id)
				if err != nil {
					e.u8(1)
					encodeError(&e, err)
				} else {
					e.u8(0)
					e.b = append(e.b, body...)
				}
				_ = c.sendCtx(ctx, frame(frameResponse, e.b))
			}()
		case frameResponse:
			d := dec{b: p}
			id, status := d.u64(), d.u8()
			if d.err != nil {
				c.close(d.err)
				return
			}
			c.callsMu.Lock()
			ch := c.calls[id]
			delete(c.calls, id)
			c.callsMu.Unlock()
			if ch == nil {
				continue
			}
			if status == 0 {
				ch <- callResult{body: d.b}
			} else {
				ch <- callResult{err: decodeError(d.b)}
			}
		default:
			c.close(fmt.Errorf("unknown frame kind %d", kind))
			return
		}
	}
}

func helloFrame(cluster string, from, to uint64) []byte {
	e := enc{}
	e.u16(protoVersion)
	e.str(cluster)
	e.u64(from)
	e.u64(to)
	return frame(frameHello, e.b)
}

func readHello(br *bufio.Reader) (cluster string, from, to uint64, err error) {
	kind, p, err := readFrame(br)
	if err != nil {
		return "", 0, 0, err
	}
	if kind != frameHello {
		return "", 0, 0, fmt.Errorf("expected hello, got frame kind %d", kind)
	}
	d := dec{b: p}
	v := d.u16()
	cluster, from, to = d.str(), d.u64(), d.u64()
	if d.err != nil {
		return "", 0, 0, d.err
	}
	if v != protoVersion {
		return "", 0, 0, fmt.Errorf("protocol version %d, want %d", v, protoVersion)
	}
	return cluster, from, to, nil
}

// dialNode connects to addr and says hello as from to node to (0: any
// node, for a client). It returns the node's id.
func dialNode(ctx context.Context, addr string, tlsConf *tls.Config, cluster string, from, to uint64) (net.Conn, *bufio.Reader, uint64, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 15 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, 0, err
	}
	if tlsConf != nil {
		tc := tlsConf.Clone()
		if tc.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			tc.ServerName = host
		}
		tcn := tls.Client(nc, tc)
		hctx, cancel := context.WithTimeout(ctx, dialTimeout)
		err := tcn.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, nil, 0, fmt.Errorf("tls handshake with %s: %w", addr, err)
		}
		nc = tcn
	}
	nc.SetDeadline(time.Now().Add(dialTimeout))
	if _, err := nc.Write(helloFrame(cluster, from, to)); err != nil {
		nc.Close()
		return nil, nil, 0, err
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	c, got, _, err := readHello(br)
	if err != nil {
		nc.Close()
		return nil, nil, 0, fmt.Errorf("hello from %s: %w", addr, err)
	}
	if c != cluster || (to != 0 && got != to) {
		nc.Close()
		return nil, nil, 0, fmt.Errorf("hello from %s: node %d of cluster %q, want node %d of %q", addr, got, c, to, cluster)
	}
	nc.SetDeadline(time.Time{})
	return nc, br, got, nil
}

// peer is another node.
type peer struct {
	id   uint64
	addr string

	mu      sync.Mutex
	conn    *conn
	changed chan struct{}
}

func (p *peer) current() *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn
}

func (p *peer) set(c *conn) {
	p.mu.Lock()
	old := p.conn
	p.conn = c
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	if old != nil && old != c {
		old.close(errors.New("replaced by a new connection"))
	}
}

func (p *peer) clear(c *conn) {
	p.mu.Lock()
	if p.conn == c {
		p.conn = nil
		close(p.changed)
		p.changed = make(chan struct{})
	}
	p.mu.Unlock()
}

// transport connects this node to the others.
type transport struct {
	self    uint64
	cluster string
	listen  string
	tls     *tls.Config
	logger  *slog.Logger
	peers   map[uint64]*peer
	h       handler
	sem     chan struct{}
	dropped atomic.Uint64

	wg sync.WaitGroup
}

func newTransport(cfg *Config, h handler) *transport {
	t := &transport{self: cfg.NodeID, cluster: cfg.ClusterName, tls: cfg.TLS, logger: cfg.Logger,
		peers: map[uint64]*peer{}, h: h, sem: make(chan struct{}, 1024)}
	for _, n := range cfg.Nodes {
		if n.ID == cfg.NodeID {
			t.listen = n.Addr
			continue
		}
		t.peers[n.ID] = &peer{id: n.ID, addr: n.Addr, changed: make(chan struct{})}
	}
	if cfg.ListenAddr != "" {
		t.listen = cfg.ListenAddr
	}
	return t
}

// run listens and keeps a connection to each peer until ctx ends, then
// closes everything and returns once every goroutine it started exited.
func (t *transport) run(ctx context.Context) error {
	lc := net.ListenConfig{}
	ln, err := lc.Listen(ctx, "tcp", t.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", t.listen, err)
	}
	var conns sync.Map // *conn → struct{}
	serve := func(c *conn, br *bufio.Reader) {
		conns.Store(c, struct{}{})
		defer conns.Delete(c)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			c.writeLoop()
		}()
		c.readLoop(ctx, br, t.h, t.sem, &t.wg)
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				if ctx.Err() == nil {
					t.logger.Error("accept failed; not accepting connections any more", "err", err)
				}
				return
			}
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				t.accept(ctx, nc, serve)
			}()
		}
	}()
	for _, p := range t.peers {
		if t.self < p.id {
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				t.maintain(ctx, p, serve)
			}()
		}
	}
	<-ctx.Done()
	ln.Close()
	conns.Range(func(k, _ any) bool {
		k.(*conn).close(errors.New("shutting down"))
		return true
	})
	t.wg.Wait()
	return nil
}

// accept handles a connection from a node with a smaller id or a client.
func (t *transport) accept(ctx context.Context, nc net.Conn, serve func(*conn, *bufio.Reader)) {
	if t.tls != nil {
		tcn := tls.Server(nc, t.tls)
		hctx, cancel := context.WithTimeout(ctx, dialTimeout)
		err := tcn.HandshakeContext(hctx)
		cancel()
		if err != nil {
			t.logger.Warn("tls handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
			nc.Close()
			return
		}
		nc = tcn
	}
	nc.SetDeadline(time.Now().Add(dialTimeout))
	br := bufio.NewReaderSize(nc, 64<<10)
	cluster, from, to, err := readHello(br)
	if err == nil && (cluster != t.cluster || (to != 0 && to != t.self)) {
		err = fmt.Errorf("hello for node %d of cluster %q; this is node %d of %q", to, cluster, t.self, t.cluster)
	}
	var p *peer
	if err == nil && from != 0 {
		if p = t.peers[from]; p == nil || from > t.self {
			err = fmt.Errorf("hello from node %d, which is not a node that dials this one", from)
		}
	}
	if err == nil {
		_, err = nc.Write(helloFrame(t.cluster, t.self, from))
	}
	if err != nil {
		t.logger.Warn("refused a connection", "remote", nc.RemoteAddr().String(), "err", err)
		nc.Close()
		return
	}
	nc.SetDeadline(time.Time{})
	c := newConn(nc, from)
	if p != nil {
		p.set(c)
		defer p.clear(c)
	}
	serve(c, br)
}

// maintain keeps a connection to a node with a larger id, redialing with
// backoff (50ms doubling to 2s, jittered) while it is down.
func (t *transport) maintain(ctx context.Context, p *peer, serve func(*conn, *bufio.Reader)) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		nc, br, _, err := dialNode(ctx, p.addr, t.tls, t.cluster, t.self, p.id)
		if err == nil {
			c := newConn(nc, p.id)
			p.set(c)
			serve(c, br)
			p.clear(c)
			if time.Since(start) > 5*time.Second {
				backoff = 50 * time.Millisecond
			}
		} else if ctx.Err() == nil {
			t.logger.Debug("dial failed", "node", p.id, "addr", p.addr, "err", err)
		}
		d := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, 2*time.Second)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// send queues Raft messages without blocking; see sender.
func (t *transport) send(key groupKey, msgs []*pb.Message) []uint64 {
	var failed []uint64
	for _, m := range msgs {
		to := m.GetTo()
		if to == t.self {
			continue
		}
		p := t.peers[to]
		var c *conn
		if p != nil {
			c = p.current()
		}
		ok := false
		if c != nil {
			// The frame is built in place: header, key, message.
			// in a pooled buffer, which the writer hands back once it wrote it
			e := enc{b: getFrame(frameHeader + binary.MaxVarintLen64 + len(key.topic) + 4 + proto.Size(m))}
			e.b = e.b[:frameHeader]
			e.str(key.topic)
			e.u32(uint32(key.part))
			b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(e.b, m)
			if err == nil {
				ok = c.trySend(sealFrame(b, frameRaft))
			}
			if !ok {
				putFrame(b)
			}
		}
		if !ok {
			t.dropped.Add(1)
			failed = append(failed, to)
		}
	}
	return failed
}

// call sends a request to a node.
func (t *transport) call(ctx context.Context, node uint64, op uint8, body []byte) ([]byte, error) {
	p := t.peers[node]
	if p == nil {
		return nil, fmt.Errorf("node %d is not in the cluster: %w", node, errUnreachable)
	}
	c := p.current()
	if c == nil {
		return nil, fmt.Errorf("node %d: %w", node, errUnreachable)
	}
	return c.call(ctx, op, body)
}
