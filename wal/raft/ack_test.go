package raft

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/vfs"
)

// fsyncHold holds, while armed, every fsync of a node's segment files
// under prefix until it is freed; the fsync then succeeds with what was
// written. Other files (the replica state) are not held, so that a held
// fsync is one of entries.
type fsyncHold struct {
	prefix  string
	on      atomic.Bool
	mu      sync.Mutex
	release chan struct{}
	blocked chan string // a held file's name, for each held fsync
}

func (h *fsyncHold) hook(name string) error {
	if !strings.HasPrefix(name, h.prefix) || !strings.HasSuffix(name, ".log") || !h.on.Load() {
		return nil
	}
	h.mu.Lock()
	rel := h.release
	h.mu.Unlock()
	select {
	case h.blocked <- name:
	default:
	}
	<-rel
	return nil
}

func (h *fsyncHold) arm() {
	h.mu.Lock()
	h.release = make(chan struct{})
	h.mu.Unlock()
	h.on.Store(true)
}

// free lets the held fsyncs through; a no-op unless armed.
func (h *fsyncHold) free() {
	if !h.on.Swap(false) {
		return
	}
	h.mu.Lock()
	close(h.release)
	h.mu.Unlock()
}

// TestAckWaitsForMajorityFsync holds the fsyncs of chosen replicas of a
// partition while an append is in flight, and checks that the append is
// not acknowledged while fewer than two of the three replicas can have
// it durable: the leader's own copy counts only once fsynced (its write
// runs in parallel with the followers'), and a follower acknowledges
// only after its fsync. Once the fsyncs are let through, the append is
// acknowledged.
func TestAckWaitsForMajorityFsync(t *testing.T) {
	addrs := freeAddrs(t, 3)
	nodes := testNodes(addrs)
	var ns []*memNode
	holds := map[uint64]*fsyncHold{}
	for _, nd := range nodes {
		n := &memNode{fs: vfs.NewMem()}
		// A long election timeout, so that no election (of a loaded
		// machine) moves the leadership during the checks; node 1 is
		// made to campaign at once.
		n.cfg = Config{Dir: "/node", NodeID: nd.ID, Nodes: nodes, TickInterval: 20 * time.Millisecond, ElectionTicks: 250,
			Logger: testLogger(t).With("node", nd.ID), WAL: wal.Options{FS: n.fs}}
		h := &fsyncHold{prefix: "/node/topics/h/", blocked: make(chan string, 64)}
		holds[nd.ID] = h
		n.fs.SetSyncError(h.hook)
		n.start(t)
		ns = append(ns, n)
	}
	defer func() {
		for _, h := range holds {
			h.free() // a failed check leaves fsyncs held
		}
		for _, n := range ns {
			n.halt()
		}
	}()
	ctx := ctxT(t, 2*time.Minute)
	campaign(t, ctx, ns[0].log.Load(), groupKey{topic: MetaTopic})
	created := make(chan error, 1)
	go func() { created <- ns[0].log.Load().CreateTopicReplicas(ctx, "h", smallTopic(1), 3) }()
	campaign(t, ctx, ns[0].log.Load(), groupKey{topic: "h"})
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	ld := ns[0].log.Load()
	if _, err := ld.Append(ctx, "h", 0, benchBatch(0, 0), wal.AppendOptions{}); err != nil {
		t.Fatalf("first append: %v", err)
	}
	for i, tc := range []struct {
		name string
		held []uint64 // nodes whose fsyncs are held; node 1 leads
	}{
		{name: "both followers held", held: []uint64{2, 3}},
		{name: "leader and one follower held", held: []uint64{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lead(t, ctx, ld, groupKey{topic: "h"}) // node 1 leads
			for _, id := range tc.held {
				for len(holds[id].blocked) > 0 {
					<-holds[id].blocked
				}
				holds[id].arm()
				defer holds[id].free() // if a check fails
			}
			res := make(chan error, 1)
			go func() {
				_, err := ld.Append(ctx, "h", 0, benchBatch(1, i), wal.AppendOptions{})
				res <- err
			}()
			// Each held replica is now fsyncing the batch: it has it
			// written, not durable.
			for _, id := range tc.held {
				select {
				case <-holds[id].blocked:
				case <-time.After(20 * time.Second):
					t.Fatalf("node %d: no fsync of the batch to hold", id)
				}
			}
			select {
			case err := <-res:
				t.Fatalf("append answered (err %v) while the fsyncs of nodes %v were held: at most one replica had it durable", err, tc.held)
			case <-time.After(time.Second):
			}
			for _, id := range tc.held {
				holds[id].free()
			}
			select {
			case err := <-res:
				if err != nil {
					t.Fatalf("append after the fsyncs were let through: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("append not acknowledged after the fsyncs were let through")
			}
		})
	}
}
