package runtime_test

import (
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/raft"
	"github.com/sluice-cdc/sluice/wal/raft/rafttest"
)

// The pipeline datagen → log runs on a node of a replicated log (3 nodes on loopback) as on a
// single node: every event lands once, in order per partition, and the last position commits.
// The runtime runs on a node that leads some of the topics' partitions: it appends to those on
// its own node (placed once proposed, the next batch following at once) and through it to the
// leaders of the others.
func TestPipelineIntoReplicatedLog(t *testing.T) {
	const events = 6000
	logs := rafttest.Cluster(t, 3, 10*time.Millisecond)
	cfg := datagenConfig(events, 40, 100)
	s := settings(t, cfg)
	tcfg := wal.DefaultTopicConfig()
	tcfg.Partitions = 3
	want := map[string]bool{}
	for _, table := range s.Tables {
		if err := logs[0].CreateTopicReplicas(t.Context(), s.Topic(table), tcfg, 3); err != nil {
			t.Fatal(err)
		}
		want[s.Topic(table)] = true
	}
	total := 3 * len(want)
	leads := func(l *raft.Log) int {
		n := 0
		for _, tp := range l.Leads() {
			if want[tp.Topic] {
				n++
			}
		}
		return n
	}
	var node *raft.Log
	waitFor(t, "a leader for every partition", func() bool {
		sum, most := 0, 0
		for _, l := range logs {
			n := leads(l)
			sum += n
			if n > most && n < total || node == nil && n > 0 {
				node, most = l, n
			}
		}
		return sum == total
	})
	local := leads(node)
	t.Logf("the runtime's node leads %d of the %d partitions", local, total)
	if local == 0 {
		t.Fatal("setup: the runtime's node leads none of the partitions")
	}
	h := newHarness(t, node, newRegistry(t), func(o *runtime.Options) { o.TopicDefaults.Partitions = 3 })
	h.add("gen", "datagen", cfg)
	h.start()
	h.waitCommitted(events)
	h.stop()
	checkExactlyOnce(t, node, s, events)
}
