package raft

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/raft/linktest"
)

// TestNetworkFaults runs three in-process nodes whose connections go
// through proxies, with writers and readers going through the nodes'
// forwarding, and repeatedly isolates the leader (by resets or by
// stalling its links) or cuts single links, then heals. No acknowledged
// write may be lost, and no two nodes may accept writes in the same term.
func TestNetworkFaults(t *testing.T) {
	addrs, release := linktest.Reserve(t, 3)
	nodes := testNodes(addrs)
	proxies := map[[2]uint64]*linktest.Proxy{} // (dialer, listener)
	for _, a := range nodes {
		for _, b := range nodes {
			if a.ID < b.ID {
				proxies[[2]uint64{a.ID, b.ID}] = linktest.New(t, b.Addr)
			}
		}
	}
	release() // only now: a proxy cannot have taken a node's port
	dir := t.TempDir()
	var ns []*testNode
	for _, self := range nodes {
		var view []Node
		for _, n := range nodes {
			addr := n.Addr
			if self.ID < n.ID {
				addr = proxies[[2]uint64{self.ID, n.ID}].Addr()
			}
			view = append(view, Node{ID: n.ID, Addr: addr})
		}
		tn := &testNode{cfg: Config{Dir: filepath.Join(dir, fmt.Sprint("node", self.ID)), NodeID: self.ID, Nodes: view,
			TickInterval: 50 * time.Millisecond, Logger: testLogger(t).With("node", self.ID)}}
		tn.start(t)
		ns = append(ns, tn)
	}
	defer func() {
		for _, n := range ns {
			n.stop(t)
		}
	}()
	byID := func(id uint64) *testNode { return ns[id-1] }
	link := func(a, b uint64, mode linktest.Mode) {
		if a > b {
			a, b = b, a
		}
		proxies[[2]uint64{a, b}].Set(mode)
	}
	status := func(_ context.Context, id uint64) []PartitionStatus { return byID(id).l.Partitions() }
	leaderOf := func(part int32) uint64 {
		var best, term uint64
		for _, n := range ns {
			for _, st := range n.l.Partitions() {
				if st.Topic == "k" && st.Partition == part && st.Serving && st.Term > term {
					best, term = n.cfg.NodeID, st.Term
				}
			}
		}
		return best
	}

	if err := ns[0].l.CreateTopicReplicas(ctxT(t, 30*time.Second), "k", smallTopic(2), 3); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w := newWorkload(t, "k", 2)
	any := func() *testNode { return ns[rand.IntN(len(ns))] }
	w.start(ctx, 3, func(ctx context.Context, topic string, part int32, recs []wal.Record, opts wal.AppendOptions) (wal.AppendResult, AppendInfo, error) {
		return any().l.AppendInfo(ctx, topic, part, recs, opts)
	}, func(ctx context.Context, txn string) (int64, int16, error) {
		return any().l.InitProducer(ctx, txn)
	}, func(ctx context.Context, topic string, part int32, off int64) (wal.FetchResult, error) {
		return any().l.Fetch(ctx, topic, part, off, wal.FetchOptions{MaxWait: 200 * time.Millisecond})
	})
	// Sample who serves: never two nodes in one term of a partition.
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		serving := map[[2]uint64]uint64{}
		for ctx.Err() == nil {
			for _, n := range ns {
				for _, st := range n.l.Partitions() {
					if !st.Serving {
						continue
					}
					k := [2]uint64{uint64(st.Partition), st.Term}
					if st.Topic == "k" {
						if prev, ok := serving[k]; ok && prev != n.cfg.NodeID {
							w.violate("partition %d term %d: nodes %d and %d both served", st.Partition, st.Term, prev, n.cfg.NodeID)
						}
						serving[k] = n.cfg.NodeID
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	for i, n := 0, iterations("SLUICE_RAFT_NETFAULT_ITERATIONS", 6); i < n; i++ {
		pause(300*time.Millisecond, time.Second)
		part := int32(i % 2)
		ld := leaderOf(part)
		for j := 0; ld == 0 && j < 200; j++ {
			time.Sleep(20 * time.Millisecond)
			ld = leaderOf(part)
		}
		if ld == 0 {
			t.Fatalf("iteration %d: no leader for k-%d", i, part)
		}
		before := w.acks.Load()
		var what string
		var cut [][2]uint64
		switch i % 3 {
		case 0, 1:
			mode := linktest.Reset
			what = "isolated leader %d (reset)"
			if i%3 == 1 {
				mode, what = linktest.Stall, "isolated leader %d (stall)"
			}
			for _, n := range nodes {
				if n.ID != ld {
					link(ld, n.ID, mode)
					cut = append(cut, [2]uint64{ld, n.ID})
				}
			}
			what = fmt.Sprintf(what, ld)
		case 2:
			a := nodes[rand.IntN(3)].ID
			b := a%3 + 1
			link(a, b, linktest.Reset)
			cut = append(cut, [2]uint64{a, b})
			what = fmt.Sprintf("cut link %d-%d", a, b)
		}
		pause(1500*time.Millisecond, 2500*time.Millisecond)
		during := w.acks.Load() - before
		for _, c := range cut {
			link(c[0], c[1], linktest.Up)
		}
		t.Logf("iteration %d: %s; %d appends acknowledged meanwhile", i, what, during)
	}
	pause(time.Second, time.Second)
	stop()
	w.wait()
	sampler.Wait()
	qctx := ctxT(t, 60*time.Second)
	var ids []uint64
	for _, n := range nodes {
		ids = append(ids, n.ID)
	}
	quiesce(t, qctx, ids, status, "k", 2)
	logs := map[uint64]map[int32][]logRec{}
	for _, n := range ns {
		logs[n.cfg.NodeID] = map[int32][]logRec{}
		for p := int32(0); p < 2; p++ {
			recs, err := readLocal(qctx, func(ctx context.Context, off int64) (wal.FetchResult, error) {
				return n.l.WAL().Fetch(ctx, "k", p, off, wal.FetchOptions{})
			})
			if err != nil {
				t.Fatal(err)
			}
			logs[n.cfg.NodeID][p] = recs
		}
	}
	w.check(logs)
}
