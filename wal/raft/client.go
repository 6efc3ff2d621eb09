package raft

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

// Client talks to a cluster from outside it, over the nodes' transport
// (as node 0). A node that does not lead a partition answers with a
// *NotLeaderError naming the leader, and the client goes there
// (redirection), where Log forwards instead. For tools and tests.
type Client struct {
	nodes   map[uint64]string
	order   []uint64
	tls     *tls.Config
	cluster string

	mu     sync.Mutex
	conns  map[uint64]*conn
	closed bool
	wg     sync.WaitGroup
}

// NewClient returns a client of the cluster of nodes. It connects lazily.
func NewClient(nodes []Node, cluster string, tlsConf *tls.Config) *Client {
	if cluster == "" {
		cluster = "sluice"
	}
	c := &Client{nodes: map[uint64]string{}, tls: tlsConf, cluster: cluster, conns: map[uint64]*conn{}}
	for _, n := range nodes {
		c.nodes[n.ID] = n.Addr
		c.order = append(c.order, n.ID)
	}
	return c
}

// Close closes the connections and waits for their goroutines.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	for _, cn := range c.conns {
		cn.close(errors.New("client closed"))
	}
	c.mu.Unlock()
	c.wg.Wait()
}

func (c *Client) conn(ctx context.Context, node uint64) (*conn, error) {
	c.mu.Lock()
	if cn := c.conns[node]; cn != nil {
		select {
		case <-cn.closed:
			delete(c.conns, node)
		default:
			c.mu.Unlock()
			return cn, nil
		}
	}
	closed := c.closed
	c.mu.Unlock()
	addr, ok := c.nodes[node]
	if !ok || closed {
		return nil, fmt.Errorf("node %d: %w", node, errUnreachable)
	}
	nc, br, _, err := dialNode(ctx, addr, c.tls, c.cluster, 0, node)
	if err != nil {
		return nil, fmt.Errorf("node %d: %v: %w", node, err, errUnreachable)
	}
	cn := newConn(nc, node)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return nil, fmt.Errorf("client closed: %w", errUnreachable)
	}
	if old := c.conns[node]; old != nil {
		old.close(errors.New("replaced"))
	}
	c.conns[node] = cn
	c.wg.Add(2)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		cn.writeLoop()
	}()
	go func(br *bufio.Reader) {
		defer c.wg.Done()
		cn.readLoop(context.Background(), br, nil, nil, nil)
	}(br)
	return cn, nil
}

// Call sends one request to one node (no redirection).
func (c *Client) call(ctx context.Context, node uint64, op uint8, body []byte) ([]byte, error) {
	cn, err := c.conn(ctx, node)
	if err != nil {
		return nil, err
	}
	return cn.call(ctx, op, body)
}

// redirect runs f at node (0: any), then wherever NotLeaderError points,
// trying the other nodes while no leader is known, until ctx ends.
func (c *Client) redirect(ctx context.Context, node uint64, f func(node uint64) error) error {
	next := 0
	backoff := 5 * time.Millisecond
	var lastErr error
	for {
		if node == 0 {
			node = c.order[next%len(c.order)]
			next++
		}
		err := f(node)
		if err == nil {
			return nil
		}
		lastErr = err
		var nl *NotLeaderError
		switch {
		case errors.As(err, &nl) && nl.Leader != 0 && nl.Leader != node:
			node = nl.Leader
			continue
		case errors.As(err, &nl), errors.Is(err, errUnreachable), errors.Is(err, ErrNotReplica), errors.Is(err, wal.ErrClosed), errors.Is(err, ErrLost):
			node = 0
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%v: %w", ctx.Err(), lastErr)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// Append appends at the partition's leader, starting at node (0: any).
func (c *Client) Append(ctx context.Context, node uint64, topic string, part int32, recs []wal.Record, opts wal.AppendOptions) (wal.AppendResult, AppendInfo, error) {
	b, err := wal.PrepareBatch(recs, opts, time.Now())
	if err != nil {
		return wal.AppendResult{}, AppendInfo{}, err
	}
	var res wal.AppendResult
	var info AppendInfo
	err = c.redirect(ctx, node, func(node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(topic)
		e.u32(uint32(part))
		e.bytes(b.Bytes())
		body, err := c.call(ctx, node, opAppend, e.b)
		if errors.Is(err, errConnLost) {
			return fmt.Errorf("append at node %d: %w: %w", node, err, ErrOutcomeUnknown)
		}
		if err != nil {
			return err
		}
		d := dec{b: body}
		info = AppendInfo{Term: d.u64(), Node: d.u64()}
		res = wal.AppendResult{BaseOffset: d.i64(), LastOffset: d.i64(), Duplicate: d.bool(), LogAppendTime: time.UnixMilli(d.i64())}
		return d.err
	})
	return res, info, err
}

// Fetch reads committed records at the partition's leader.
func (c *Client) Fetch(ctx context.Context, node uint64, topic string, part int32, offset int64, opts wal.FetchOptions) (wal.FetchResult, error) {
	var res wal.FetchResult
	err := c.redirect(ctx, node, func(node uint64) error {
		body, err := c.call(ctx, node, opFetch, fetchBody(ctx, topic, part, offset, opts))
		if err != nil {
			return err
		}
		res, err = decodeFetch(body)
		return err
	})
	return res, err
}

// LocalRead reads committed records from one node's own copy of a
// partition (below that node's high watermark), without redirection.
func (c *Client) LocalRead(ctx context.Context, node uint64, topic string, part int32, offset int64, maxBytes int) (wal.FetchResult, error) {
	body, err := c.call(ctx, node, opLocalRead, fetchBody(ctx, topic, part, offset, wal.FetchOptions{MaxBytes: maxBytes}))
	if err != nil {
		return wal.FetchResult{}, err
	}
	return decodeFetch(body)
}

func fetchBody(ctx context.Context, topic string, part int32, offset int64, opts wal.FetchOptions) []byte {
	e := enc{}
	putTimeout(&e, ctx)
	e.str(topic)
	e.u32(uint32(part))
	e.i64(offset)
	e.u32(uint32(opts.MaxBytes))
	e.u32(uint32(opts.MaxWait.Milliseconds()))
	return e.b
}

// InitProducer allocates a producer id and epoch.
func (c *Client) InitProducer(ctx context.Context, transactionalID string) (int64, int16, error) {
	var id int64
	var epoch int16
	err := c.redirect(ctx, 0, func(node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(transactionalID)
		body, err := c.call(ctx, node, opInitProducer, e.b)
		if err != nil {
			return err
		}
		d := dec{b: body}
		id, epoch = d.i64(), int16(d.u16())
		return d.err
	})
	return id, epoch, err
}

// CreateTopic creates a topic with rf replicas per partition.
func (c *Client) CreateTopic(ctx context.Context, name string, cfg wal.TopicConfig, rf int) error {
	return c.redirect(ctx, 0, func(node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(name)
		e.u8(uint8(rf))
		m := cfg.Map()
		e.u16(uint16(len(m)))
		for k, v := range m {
			e.str(k)
			e.str(v)
		}
		_, err := c.call(ctx, node, opCreateTopic, e.b)
		return err
	})
}

// Status returns a node's partitions' replication state.
func (c *Client) Status(ctx context.Context, node uint64) ([]PartitionStatus, error) {
	e := enc{}
	putTimeout(&e, ctx)
	body, err := c.call(ctx, node, opStatus, e.b)
	if err != nil {
		return nil, err
	}
	d := dec{b: body}
	st := decodeStatus(&d)
	return st, d.err
}

// Offsets returns a partition's log start and high watermark at its
// leader.
func (c *Client) Offsets(ctx context.Context, topic string, part int32) (start, hw int64, err error) {
	err = c.redirect(ctx, 0, func(node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(topic)
		e.u32(uint32(part))
		body, err := c.call(ctx, node, opOffsets, e.b)
		if err != nil {
			return err
		}
		d := dec{b: body}
		start, hw = d.i64(), d.i64()
		return d.err
	})
	return start, hw, err
}
