package raft

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

// freeAddrs returns n loopback addresses free right now.
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SLUICE_RAFT_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testNode is an in-process node.
type testNode struct {
	cfg    Config
	l      *Log
	cancel context.CancelFunc
	done   chan error
}

func (n *testNode) start(t testing.TB) {
	t.Helper()
	l, err := Open(n.cfg)
	if err != nil {
		t.Fatalf("open node %d: %v", n.cfg.NodeID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.l, n.cancel, n.done = l, cancel, make(chan error, 1)
	go func() { n.done <- l.Run(ctx) }()
}

// stop stops the node cleanly.
func (n *testNode) stop(t testing.TB) {
	t.Helper()
	if n.l == nil {
		return
	}
	n.cancel()
	if err := <-n.done; err != nil {
		t.Errorf("run node %d: %v", n.cfg.NodeID, err)
	}
	n.l.Close()
	n.l = nil
}

func testNodes(addrs []string) []Node {
	var nodes []Node
	for i, a := range addrs {
		nodes = append(nodes, Node{ID: uint64(i + 1), Addr: a})
	}
	return nodes
}

// startCluster starts n in-process nodes on loopback, each in its own
// directory under a test temp dir, stopped when the test ends.
func startCluster(t testing.TB, n int, mod func(c *Config)) []*testNode {
	t.Helper()
	nodes := testNodes(freeAddrs(t, n))
	dir := t.TempDir()
	var out []*testNode
	for i := range nodes {
		cfg := Config{
			Dir: filepath.Join(dir, fmt.Sprintf("node%d", i+1)), NodeID: nodes[i].ID, Nodes: nodes,
			TickInterval: 20 * time.Millisecond, Logger: testLogger(t).With("node", i+1),
		}
		if mod != nil {
			mod(&cfg)
		}
		tn := &testNode{cfg: cfg}
		tn.start(t)
		out = append(out, tn)
	}
	t.Cleanup(func() {
		for _, tn := range out {
			tn.stop(t)
		}
	})
	return out
}

func smallTopic(partitions int32) wal.TopicConfig {
	c := wal.DefaultTopicConfig()
	c.Partitions = partitions
	return c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lead makes l serve the group of key. Another node, whose election
// timer fired first on a slow machine, may have taken the group; with
// PreVote and CheckQuorum the followers of a live leader refuse l's
// campaign, so l asks that leader to hand the group over instead.
func lead(t testing.TB, ctx context.Context, l *Log, key groupKey) {
	t.Helper()
	for ctx.Err() == nil {
		var st PartitionStatus
		g := l.group(key)
		if g != nil {
			g.mu.Lock()
			st = g.status
			g.mu.Unlock()
		}
		if g != nil && st.Leader != 0 && st.Leader != l.self {
			if err := g.do(ctx, func() { g.rn.TransferLeader(l.self) }); err != nil {
				t.Fatal(err)
			}
		} else {
			campaign(t, ctx, l, key)
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		for wctx.Err() == nil {
			if l.group(key).serving(wctx) == nil {
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}
	t.Fatalf("node %d does not lead %s", l.self, key)
}

// campaign makes l's replica of a group campaign at once, once the group
// exists there, instead of waiting for an election timeout.
func campaign(t testing.TB, ctx context.Context, l *Log, key groupKey) {
	t.Helper()
	for ctx.Err() == nil {
		if g := l.group(key); g != nil {
			if err := g.do(ctx, func() { _ = g.rn.Campaign() }); err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no group %s on node %d", key, l.self)
}
