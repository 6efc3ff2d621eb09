// Package rafttest starts replicated logs on loopback for the tests of the packages that run
// on one (the runtime, the admin API).
package rafttest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/raft"
)

// Cluster starts n nodes of a replicated log in this process, each in a temporary directory
// of t and on a free loopback port, ticking every tick, and stops them when t ends (an error
// a node's Run returned fails t). The nodes are returned in the order of their ids (1 to n).
func Cluster(t testing.TB, n int, tick time.Duration) []*raft.Log {
	t.Helper()
	var lns []net.Listener
	var nodes []raft.Node
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		nodes = append(nodes, raft.Node{ID: uint64(i + 1), Addr: ln.Addr().String()})
	}
	for _, ln := range lns {
		ln.Close()
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, n)
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
		l, err := raft.Open(raft.Config{Dir: filepath.Join(dir, fmt.Sprint(nd.ID)), NodeID: nd.ID, Nodes: nodes,
			ListenAddr: nd.Addr, TickInterval: tick})
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
		go func() { done <- l.Run(ctx) }()
	}
	return logs
}
