// Package rafttest starts replicated logs on loopback for the tests of the packages that run
// on one (the runtime, the admin API).
package rafttest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/raft"
	"github.com/sluice-cdc/sluice/wal/raft/linktest"
)

// Cluster starts n nodes of a replicated log in this process, each in a temporary directory
// of t and on a free loopback port, ticking every tick, and stops them when t ends (an error
// a node's Run returned fails t). The nodes are returned in the order of their ids (1 to n).
func Cluster(t testing.TB, n int, tick time.Duration) []*raft.Log {
	t.Helper()
	nodes, release := freeNodes(t, n)
	release()
	return start(t, nodes, tick, func(self uint64) []raft.Node { return nodes })
}

// Links are the connections between the nodes of a ProxiedCluster: every node reaches every
// other through a proxy of its own, for Raft and for forwarded requests alike.
type Links struct {
	proxies map[[2]uint64]*linktest.Proxy // (from, to)
	ids     []uint64
}

// Set puts the link between nodes a and b, both ways, in mode m.
func (l *Links) Set(a, b uint64, m linktest.Mode) {
	l.proxies[[2]uint64{a, b}].Set(m)
	l.proxies[[2]uint64{b, a}].Set(m)
}

// Isolate puts every link of node id in mode m (linktest.Up heals them).
func (l *Links) Isolate(id uint64, m linktest.Mode) {
	for _, o := range l.ids {
		if o != id {
			l.Set(id, o, m)
		}
	}
}

// ProxiedCluster is Cluster with the nodes' connections going through proxies whose links the
// test cuts and heals.
func ProxiedCluster(t testing.TB, n int, tick time.Duration) ([]*raft.Log, *Links) {
	t.Helper()
	nodes, release := freeNodes(t, n)
	links := &Links{proxies: map[[2]uint64]*linktest.Proxy{}}
	for _, a := range nodes {
		links.ids = append(links.ids, a.ID)
		for _, b := range nodes {
			if a.ID != b.ID {
				links.proxies[[2]uint64{a.ID, b.ID}] = linktest.New(t, b.Addr)
			}
		}
	}
	release() // only now: a proxy cannot have taken a node's port
	logs := start(t, nodes, tick, func(self uint64) []raft.Node {
		var view []raft.Node
		for _, nd := range nodes {
			if nd.ID != self {
				nd.Addr = links.proxies[[2]uint64{self, nd.ID}].Addr()
			}
			view = append(view, nd)
		}
		return view
	})
	return logs, links
}

// freeNodes returns n nodes (ids 1 to n) on free loopback ports, held until release.
func freeNodes(t testing.TB, n int) ([]raft.Node, func()) {
	t.Helper()
	addrs, release := linktest.Reserve(t, n)
	var nodes []raft.Node
	for i, a := range addrs {
		nodes = append(nodes, raft.Node{ID: uint64(i + 1), Addr: a})
	}
	return nodes, release
}

// start opens and runs the nodes, each seeing the cluster as view(its id) says and listening
// on its own address.
func start(t testing.TB, nodes []raft.Node, tick time.Duration, view func(self uint64) []raft.Node) []*raft.Log {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, len(nodes))
	var logs []*raft.Log
	t.Cleanup(func() {
		cancel()
		for range logs {
			if err := <-done; err != nil {
				t.Errorf("a node of the cluster stopped with %v", err)
			}
		}
		for _, l := range logs {
			l.Close()
		}
	})
	for _, nd := range nodes {
		l, err := raft.Open(raft.Config{Dir: filepath.Join(dir, fmt.Sprint(nd.ID)), NodeID: nd.ID, Nodes: view(nd.ID),
			ListenAddr: nd.Addr, TickInterval: tick})
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
		go func() { done <- l.Run(ctx) }()
	}
	return logs
}
