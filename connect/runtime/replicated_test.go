package runtime_test

import (
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/wal/raft/rafttest"
)

// The pipeline datagen → log runs on a node of a replicated log (3 nodes on loopback) as on a
// single node: every event lands once, in order per partition, and the last position commits.
// The runtime appends to a partition's leader on its own node (placed once proposed, the next
// batch following at once) or through it to a leader on another node.
func TestPipelineIntoReplicatedLog(t *testing.T) {
	const events = 6000
	logs := rafttest.Cluster(t, 3, 10*time.Millisecond)
	h := newHarness(t, logs[0], newRegistry(t), func(o *runtime.Options) { o.TopicDefaults.Partitions = 3 })
	cfg := datagenConfig(events, 40, 100)
	h.add("gen", "datagen", cfg)
	h.start()
	h.waitCommitted(events)
	h.stop()
	checkExactlyOnce(t, logs[0], settings(t, cfg), events)
	var local int
	for _, tp := range logs[0].Leads() {
		if tp.Topic == "gen.inventory.customers" {
			local++
		}
	}
	t.Logf("node 1 leads %d of the topic's 3 partitions", local)
}
