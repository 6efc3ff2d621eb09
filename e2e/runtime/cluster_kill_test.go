package runtime

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/wal/raft"
)

// clusterRate is datagen's rate in the cluster kill loop, in events per second.
const clusterRate = 2500

// clusterEvents is how many events datagen makes in a cluster kill loop of n kills: enough
// for the source to run through all the kills (about 1.3 s each).
func clusterEvents(n int) int { return max(30000, 4000*n) }

// clusterPipeline is node id's pipeline file: the node of a 3-node replicated log at addrs,
// and on node 1 only, datagen making events events.
func clusterPipeline(dir string, id int, addrs []string, events int) string {
	p := fmt.Sprintf(`log:
  dir: %s
  partitions: %d
  cluster:
    node_id: %d
    nodes: [1=%s, 2=%s, 3=%s]
    tick: 20ms
rest:
  listeners: []
`, filepath.Join(dir, fmt.Sprintf("node%d", id)), killPartitions, id, addrs[0], addrs[1], addrs[2])
	if id != 1 {
		return p + "connectors: []\n"
	}
	return p + "connectors:\n" + genConnector(events, clusterRate)
}

// TestClusterKillLoop runs datagen on node 1 of a 3-node replicated log (three sluice
// processes on loopback), kills a random node with SIGKILL at random moments, the datagen
// node and the leaders included, and restarts it; at the end every generated record is in
// the log exactly once, in Kafka's partition, in source order. The source task appends with
// its idempotent producer, placed once the leader proposed a batch, through leader changes.
func TestClusterKillLoop(t *testing.T) {
	n := kills(t)
	events := clusterEvents(n)
	dir := t.TempDir()
	bin := buildSluice(t, dir)
	addrs := freeAddrs(t, 3)
	pipelines := make([]string, 3)
	for i := range pipelines {
		pipelines[i] = filepath.Join(dir, fmt.Sprintf("pipeline%d.yaml", i+1))
		if err := os.WriteFile(pipelines[i], []byte(clusterPipeline(dir, i+1, addrs, events)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("kills %d, seed %d", n, seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	procs := make([]*proc, 3)
	runs := 0
	startNode := func(i int) {
		runs++
		procs[i] = start(t, bin, pipelines[i], filepath.Join(dir, fmt.Sprintf("node%d-run%03d.log", i+1, runs)))
	}
	for i := range procs {
		startNode(i)
	}
	s := datagen.Settings{Prefix: "kill", Database: "inventory", Tables: datagen.Tables, Keys: killKeys, Seed: 1, Tombstones: true}
	total := int64(0)
	for e := range int64(events) {
		total += int64(len(s.Records(e)))
	}
	var nodes []raft.Node
	for i, a := range addrs {
		nodes = append(nodes, raft.Node{ID: uint64(i + 1), Addr: a})
	}
	client := raft.NewClient(nodes, "", nil)
	defer client.Close()
	// committed is how many records the topics hold (-1: a partition did not answer).
	committed := func() int64 {
		have := int64(0)
		for _, table := range s.Tables {
			for p := int32(0); p < killPartitions; p++ {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, hw, err := client.Offsets(ctx, s.Topic(table), p)
				cancel()
				if err != nil {
					return -1
				}
				have += hw
			}
		}
		return have
	}
	for k := range n {
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		i := rng.IntN(3)
		if k == 0 {
			i = 0 // the node running the source, at least once
		}
		select {
		case <-procs[i].exited:
			t.Fatalf("kill %d: node %d exited before the kill: %v\n%s", k, i+1, procs[i].err, tail(procs[i].log))
		default:
		}
		procs[i].cmd.Process.Signal(syscall.SIGKILL)
		procs[i].wait()
		if k == n-1 {
			t.Logf("the last kill (node %d) came with %d of %d records in the log", i+1, committed(), total)
		}
		time.Sleep(time.Duration(rng.IntN(800)) * time.Millisecond)
		startNode(i)
	}

	// The three nodes run until datagen's last event is committed, then stop together.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		have := committed()
		if have >= total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log holds %d of %d records after 3 minutes\n%s", have, total, tail(procs[0].log))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, p := range procs {
		waitLog(t, p, `"msg":"sluice running"`, time.Minute)
	}
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, p := range procs {
		if err := p.wait(); err != nil {
			t.Fatalf("node %d: graceful stop: %v\n%s", i+1, err, tail(p.log))
		}
	}

	// The nodes again, in this process, to read the log.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	var logs []*raft.Log
	defer func() {
		cancel()
		for range logs {
			<-done
		}
		for _, l := range logs {
			l.Close()
		}
	}()
	for i := range nodes {
		l, err := raft.Open(raft.Config{Dir: filepath.Join(dir, fmt.Sprintf("node%d", i+1)), NodeID: nodes[i].ID,
			Nodes: nodes, TickInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
		go func() { done <- l.Run(ctx) }()
	}
	verifyLog(t, logs[0], s, int64(events))
}
