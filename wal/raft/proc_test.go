package raft

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

// procCluster runs cluster nodes as child processes of this test binary
// on loopback, each in its own directory, and kills them with SIGKILL.
type procCluster struct {
	t      testing.TB
	dir    string
	nodes  []Node
	tick   time.Duration
	mu     sync.Mutex
	cmds   map[uint64]*exec.Cmd
	client *Client
}

func newProcCluster(t testing.TB, n int, tick time.Duration) *procCluster {
	c := &procCluster{t: t, dir: t.TempDir(), nodes: testNodes(freeAddrs(t, n)), tick: tick, cmds: map[uint64]*exec.Cmd{}}
	c.client = NewClient(c.nodes, "", nil)
	for _, nd := range c.nodes {
		c.start(nd.ID)
	}
	t.Cleanup(func() {
		c.client.Close()
		c.mu.Lock()
		defer c.mu.Unlock()
		for id, cmd := range c.cmds {
			cmd.Process.Kill()
			cmd.Wait()
			delete(c.cmds, id)
		}
		if t.Failed() {
			for _, nd := range c.nodes {
				c.dumpLog(nd.ID)
			}
		}
	})
	return c
}

func (c *procCluster) logPath(id uint64) string {
	return filepath.Join(c.dir, fmt.Sprintf("node%d.log", id))
}

func (c *procCluster) dumpLog(id uint64) {
	f, err := os.Open(c.logPath(id))
	if err != nil {
		return
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	c.t.Logf("node %d log (last lines):\n%s", id, strings.Join(lines, "\n"))
}

func (c *procCluster) start(id uint64) {
	c.t.Helper()
	out, err := os.OpenFile(c.logPath(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		nodeChildEnv+"="+fmt.Sprint(id),
		nodeDirEnv+"="+filepath.Join(c.dir, fmt.Sprintf("node%d", id)),
		nodeListEnv+"="+formatNodeList(c.nodes),
		nodeTickEnv+"="+c.tick.String(),
	)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	out.Close()
	c.mu.Lock()
	c.cmds[id] = cmd
	c.mu.Unlock()
}

// kill SIGKILLs a node and reaps it.
func (c *procCluster) kill(id uint64) {
	c.mu.Lock()
	cmd := c.cmds[id]
	delete(c.cmds, id)
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

func (c *procCluster) alive(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmds[id] != nil
}

// status returns a live node's partitions, or nil.
func (c *procCluster) status(ctx context.Context, id uint64) []PartitionStatus {
	if !c.alive(id) {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := c.client.Status(sctx, id)
	if err != nil {
		return nil
	}
	return st
}

// leader returns the node serving a partition (0 if none now).
func (c *procCluster) leader(ctx context.Context, topic string, part int32) uint64 {
	var best, term uint64
	for _, nd := range c.nodes {
		for _, st := range c.status(ctx, nd.ID) {
			if st.Topic == topic && st.Partition == part && st.Serving && st.Term > term {
				best, term = nd.ID, st.Term
			}
		}
	}
	return best
}

// waitLeader waits until the partition has a serving leader.
func (c *procCluster) waitLeader(ctx context.Context, topic string, part int32) uint64 {
	c.t.Helper()
	for ctx.Err() == nil {
		if id := c.leader(ctx, topic, part); id != 0 {
			return id
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader for %s-%d", topic, part)
	return 0
}

// quiesce waits until every node holds and has committed the leader's
// whole log of each of the topic's partitions.
func quiesce(t testing.TB, ctx context.Context, ids []uint64, status func(context.Context, uint64) []PartitionStatus, topic string, parts int32) {
	t.Helper()
	for ctx.Err() == nil {
		ok := true
		for p := int32(0); p < parts && ok; p++ {
			var lead *PartitionStatus
			var all []PartitionStatus
			for _, id := range ids {
				for _, st := range status(ctx, id) {
					if st.Topic == topic && st.Partition == p {
						all = append(all, st)
						if st.Serving {
							lead = &st
						}
					}
				}
			}
			if lead == nil || len(all) != len(ids) {
				ok = false
				break
			}
			for _, st := range all {
				if st.LastIndex != lead.LastIndex || st.CommitIndex != lead.LastIndex || st.HighWatermark != lead.HighWatermark {
					ok = false
				}
			}
		}
		if ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	var lines []string
	for _, id := range ids {
		for _, st := range status(context.Background(), id) {
			if st.Topic == topic {
				lines = append(lines, fmt.Sprintf("node %d: %+v", id, st))
			}
		}
	}
	t.Fatalf("replicas did not converge:\n%s", strings.Join(lines, "\n"))
}

// readLocal reads a node's own committed copy of a partition.
func readLocal(ctx context.Context, read func(ctx context.Context, off int64) (wal.FetchResult, error)) ([]logRec, error) {
	var out []logRec
	var off int64
	for {
		res, err := read(ctx, off)
		if err != nil {
			return nil, err
		}
		for _, r := range res.Records {
			out = append(out, logRec{r.Offset, string(r.Value)})
		}
		if res.NextOffset >= res.HighWatermark {
			return out, nil
		}
		off = res.NextOffset
	}
}

// finalLogs reads every node's committed copy of the topic.
func (c *procCluster) finalLogs(ctx context.Context, topic string, parts int32) map[uint64]map[int32][]logRec {
	c.t.Helper()
	out := map[uint64]map[int32][]logRec{}
	for _, nd := range c.nodes {
		out[nd.ID] = map[int32][]logRec{}
		for p := int32(0); p < parts; p++ {
			recs, err := readLocal(ctx, func(ctx context.Context, off int64) (wal.FetchResult, error) {
				return c.client.LocalRead(ctx, nd.ID, topic, p, off, 1<<20)
			})
			if err != nil {
				c.t.Fatalf("read node %d's %s-%d: %v", nd.ID, topic, p, err)
			}
			out[nd.ID][p] = recs
		}
	}
	return out
}

func (c *procCluster) ids() []uint64 {
	var out []uint64
	for _, nd := range c.nodes {
		out = append(out, nd.ID)
	}
	return out
}

func (c *procCluster) workload(ctx context.Context, topic string, parts int32) *workload {
	c.t.Helper()
	if err := c.client.CreateTopic(ctxT(c.t, 30*time.Second), topic, smallTopic(parts), 3); err != nil {
		c.t.Fatal(err)
	}
	w := newWorkload(c.t, topic, parts)
	w.start(ctx, 3, func(ctx context.Context, topic string, part int32, recs []wal.Record, opts wal.AppendOptions) (wal.AppendResult, AppendInfo, error) {
		return c.client.Append(ctx, 0, topic, part, recs, opts)
	}, c.client.InitProducer, func(ctx context.Context, topic string, part int32, off int64) (wal.FetchResult, error) {
		return c.client.Fetch(ctx, 0, topic, part, off, wal.FetchOptions{MaxWait: 200 * time.Millisecond})
	})
	return w
}

// finish stops the workload, waits for the replicas to converge and
// checks them.
func (c *procCluster) finish(stop context.CancelFunc, w *workload, topic string, parts int32) {
	c.t.Helper()
	stop()
	w.wait()
	ctx := ctxT(c.t, 60*time.Second)
	quiesce(c.t, ctx, c.ids(), c.status, topic, parts)
	w.check(c.finalLogs(ctx, topic, parts))
}

func pause(min, max time.Duration) {
	time.Sleep(min + rand.N(max-min+1))
}

// TestProcessKillLeader SIGKILLs the leader of a partition at random
// moments while writers and readers run, restarts it, and checks that
// nothing acknowledged or seen was lost or duplicated on any replica.
func TestProcessKillLeader(t *testing.T) {
	c := newProcCluster(t, 3, 50*time.Millisecond)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w := c.workload(ctx, "k", 2)
	for i, n := 0, iterations("SLUICE_RAFT_KILL_ITERATIONS", 4); i < n; i++ {
		pause(300*time.Millisecond, 1500*time.Millisecond)
		ld := c.waitLeader(ctxT(t, 20*time.Second), "k", int32(i%2))
		before := w.acks.Load()
		c.kill(ld)
		pause(0, time.Second)
		c.start(ld)
		t.Logf("iteration %d: killed leader %d of k-%d after %d acks", i, ld, i%2, before)
	}
	pause(time.Second, time.Second)
	c.finish(stop, w, "k", 2)
}

// TestProcessKillFollower is TestProcessKillLeader killing a follower.
func TestProcessKillFollower(t *testing.T) {
	c := newProcCluster(t, 3, 50*time.Millisecond)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w := c.workload(ctx, "k", 2)
	for i, n := 0, iterations("SLUICE_RAFT_KILL_ITERATIONS", 4); i < n; i++ {
		pause(300*time.Millisecond, 1500*time.Millisecond)
		ld := c.waitLeader(ctxT(t, 20*time.Second), "k", 0)
		f := c.nodes[rand.IntN(len(c.nodes))].ID
		for f == ld {
			f = c.nodes[rand.IntN(len(c.nodes))].ID
		}
		c.kill(f)
		pause(0, time.Second)
		c.start(f)
	}
	pause(time.Second, time.Second)
	c.finish(stop, w, "k", 2)
}

// TestProcessKillMajority kills two of three nodes: the partitions stop
// acknowledging writes (no majority), then recover when they return.
func TestProcessKillMajority(t *testing.T) {
	c := newProcCluster(t, 3, 50*time.Millisecond)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w := c.workload(ctx, "k", 2)
	for i, n := 0, iterations("SLUICE_RAFT_KILL_ITERATIONS", 2); i < n; i++ {
		pause(500*time.Millisecond, 1500*time.Millisecond)
		ld := c.waitLeader(ctxT(t, 20*time.Second), "k", 0)
		other := ld%3 + 1
		c.kill(ld)
		c.kill(other)
		// An acknowledgement in flight may still arrive; none after that.
		time.Sleep(300 * time.Millisecond)
		frozen := w.acks.Load()
		time.Sleep(2 * time.Second)
		if got := w.acks.Load(); got != frozen {
			t.Fatalf("iteration %d: %d appends acknowledged with two of three nodes dead", i, got-frozen)
		}
		c.start(ld)
		c.start(other)
		deadline := time.Now().Add(20 * time.Second)
		for w.acks.Load() == frozen {
			if time.Now().After(deadline) {
				t.Fatalf("iteration %d: writes did not resume after the nodes returned", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("iteration %d: killed %d and %d; writes stopped at %d acks and resumed", i, ld, other, frozen)
	}
	pause(time.Second, time.Second)
	c.finish(stop, w, "k", 2)
}
