package raft

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/vfs"
)

// memNode is an in-process node on an in-memory file system whose fsyncs
// a test can hold and then crash through.
type memNode struct {
	cfg  Config
	fs   *vfs.Mem
	log  atomic.Pointer[Log]
	stop context.CancelFunc
	done chan error

	armed   atomic.Bool
	blocked chan string   // the name of the file whose fsync is held
	release chan struct{} // closed to let the held fsync fail
}

var errPowerLoss = errors.New("power lost during fsync")

// halt stops the node (if running) and closes its log.
func (n *memNode) halt() {
	if n.stop == nil {
		return
	}
	n.stop()
	<-n.done
	n.stop = nil
	n.log.Load().Close() // after a crash, fails on the dead handles
}

func (n *memNode) start(t testing.TB) {
	t.Helper()
	l, err := Open(n.cfg)
	if err != nil {
		t.Fatalf("open node %d: %v", n.cfg.NodeID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.stop, n.done = cancel, make(chan error, 1)
	n.log.Store(l)
	go func() { n.done <- l.Run(ctx) }()
}

// crashMidFsync holds the node's next fsync of a file of topic, cuts the
// power while it is held (unsynced bytes are lost or torn) on it and on
// the nodes also, lets the fsync fail, stops the nodes and starts them
// again on what survived.
func (n *memNode) crashMidFsync(t testing.TB, topic string, also ...*memNode) string {
	t.Helper()
	n.blocked, n.release = make(chan string, 1), make(chan struct{})
	n.armed.Store(true)
	var held string
	select {
	case held = <-n.blocked:
	case <-time.After(10 * time.Second):
		// disarmed and released first: an fsync held later would block the shutdown
		n.armed.Store(false)
		close(n.release)
		t.Fatalf("node %d: no fsync of %s to hold", n.cfg.NodeID, topic)
	}
	n.fs.Crash(vfs.CrashOptions{Tear: true, Rand: rand.New(rand.NewPCG(rand.Uint64(), 1))})
	for _, o := range also {
		o.fs.Crash(vfs.CrashOptions{Tear: true, Rand: rand.New(rand.NewPCG(rand.Uint64(), 2))})
	}
	close(n.release)
	for _, c := range append([]*memNode{n}, also...) {
		c.halt()
	}
	for _, c := range append([]*memNode{n}, also...) {
		c.start(t)
	}
	return held
}

// TestCrashMidFsync cuts the power of a node (the leader, then a
// follower, in turns) while one of its fsyncs is in flight, and restarts
// it on the surviving bytes: no acknowledged write may be lost, since an
// append is acknowledged only once fsynced on a majority.
func TestCrashMidFsync(t *testing.T) {
	addrs := freeAddrs(t, 3)
	nodes := testNodes(addrs)
	var ns []*memNode
	for _, nd := range nodes {
		n := &memNode{fs: vfs.NewMem()}
		n.cfg = Config{Dir: "/node", NodeID: nd.ID, Nodes: nodes, TickInterval: 50 * time.Millisecond,
			Logger: testLogger(t).With("node", nd.ID), WAL: wal.Options{FS: n.fs}}
		topicDir := "/node/topics/k/"
		n.fs.SetSyncError(func(name string) error {
			if !strings.HasPrefix(name, topicDir) || !n.armed.CompareAndSwap(true, false) {
				return nil
			}
			n.blocked <- name
			<-n.release
			return errPowerLoss
		})
		n.start(t)
		ns = append(ns, n)
	}
	defer func() {
		for _, n := range ns {
			n.halt()
		}
	}()
	if err := ns[0].log.Load().CreateTopicReplicas(ctxT(t, 30*time.Second), "k", smallTopic(2), 3); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w := newWorkload(t, "k", 2)
	pick := func() *Log { return ns[rand.IntN(len(ns))].log.Load() }
	w.start(ctx, 3, func(ctx context.Context, topic string, part int32, recs []wal.Record, opts wal.AppendOptions) (wal.AppendResult, AppendInfo, error) {
		return pick().AppendInfo(ctx, topic, part, recs, opts)
	}, func(ctx context.Context, txn string) (int64, int16, error) {
		return pick().InitProducer(ctx, txn)
	}, func(ctx context.Context, topic string, part int32, off int64) (wal.FetchResult, error) {
		return pick().Fetch(ctx, topic, part, off, wal.FetchOptions{MaxWait: 200 * time.Millisecond})
	})
	leaderOf := func(part int32) *memNode {
		for i := 0; i < 500; i++ {
			for _, n := range ns {
				for _, st := range n.log.Load().Partitions() {
					if st.Topic == "k" && st.Partition == part && st.Serving {
						return n
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no leader for k-%d", part)
		return nil
	}
	var mu sync.Mutex
	for i, n := 0, iterations("SLUICE_RAFT_FSYNC_ITERATIONS", 6); i < n; i++ {
		pause(300*time.Millisecond, time.Second)
		victim := leaderOf(int32(i % 2))
		role := "leader"
		if i%2 == 1 {
			role = "follower"
			for _, c := range ns {
				if c != victim {
					victim = c
					break
				}
			}
		}
		var also []*memNode
		if i%3 == 2 {
			// Two of three nodes lose power at once: acknowledged writes
			// survive only if each was fsynced on a majority.
			role = "leader (and a follower at the same instant)"
			for _, c := range ns {
				if c != victim {
					also = append(also, c)
					break
				}
			}
		}
		before := w.acks.Load()
		mu.Lock()
		held := victim.crashMidFsync(t, "k", also...)
		mu.Unlock()
		t.Logf("iteration %d: power cut on %s node %d during the fsync of %s (after %d acks)", i, role, victim.cfg.NodeID, held, before)
	}
	pause(time.Second, time.Second)
	stop()
	w.wait()
	qctx := ctxT(t, 60*time.Second)
	var ids []uint64
	for _, nd := range nodes {
		ids = append(ids, nd.ID)
	}
	quiesce(t, qctx, ids, func(_ context.Context, id uint64) []PartitionStatus { return ns[id-1].log.Load().Partitions() }, "k", 2)
	logs := map[uint64]map[int32][]logRec{}
	for _, n := range ns {
		logs[n.cfg.NodeID] = map[int32][]logRec{}
		for p := int32(0); p < 2; p++ {
			recs, err := readLocal(qctx, func(ctx context.Context, off int64) (wal.FetchResult, error) {
				return n.log.Load().WAL().Fetch(ctx, "k", p, off, wal.FetchOptions{})
			})
			if err != nil {
				t.Fatal(fmt.Errorf("node %d: %w", n.cfg.NodeID, err))
			}
			logs[n.cfg.NodeID][p] = recs
		}
	}
	w.check(logs)
}
