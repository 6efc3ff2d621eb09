package runtime_test

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/raft"
	"github.com/sluice-cdc/sluice/wal/raft/linktest"
	"github.com/sluice-cdc/sluice/wal/raft/rafttest"
)

// The pipeline datagen → log runs on a node of a replicated log (3 nodes on loopback) as on a
// single node: every event lands once, in order per partition, and the last position commits.
// The runtime runs on a node that leads some of the topics' partitions: it appends to those on
// its own node (placed once proposed, the next batch following at once) and through it to the
// leaders of the others. A second runtime, on another node, runs a pipeline of its own at the
// same time, into topics of its own: the two share the cluster's internal topics (producer
// ids, source offsets).
func TestPipelineIntoReplicatedLog(t *testing.T) {
	const events = 6000
	logs := rafttest.Cluster(t, 3, 10*time.Millisecond)
	cfg := datagenConfig(events, 40, 100)
	s := settings(t, cfg)
	cfg2 := datagenConfig(events, 40, 100, "topic.prefix", "other", "datagen.seed", "2")
	s2 := settings(t, cfg2)
	tcfg := wal.DefaultTopicConfig()
	tcfg.Partitions = 3
	want := map[string]bool{}
	for _, table := range s.Tables {
		for _, topic := range []string{s.Topic(table), s2.Topic(table)} {
			if err := logs[0].CreateTopicReplicas(t.Context(), topic, tcfg, 3); err != nil {
				t.Fatal(err)
			}
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
	other := logs[0]
	if other == node {
		other = logs[1]
	}
	h2 := newHarness(t, other, newRegistry(t), func(o *runtime.Options) { o.TopicDefaults.Partitions = 3 })
	h2.add("other", "datagen", cfg2)
	h.start()
	h2.start()
	h.waitCommittedBy("gen", events)
	h2.waitCommittedBy("other", events)
	h.stop()
	h2.stop()
	checkExactlyOnce(t, node, s, events)
	checkExactlyOnce(t, node, s2, events)
}

// A pipeline into one replicated partition through network partitions. The source is
// unthrottled, so that its appends are always in flight, pipelined as a task does on the
// partition's leader (the next batch proposed once the last is placed). Again and again the
// partition's leader is cut off from the two other nodes until they have elected a new one
// and it has stepped down, then healed, its links reset or stalled (delivering late what was
// sent): the runtime's own node first, then whichever node leads. The task rides through the
// leader changes (restarting when an append fails). When the runtime stops, the log holds the
// events from the first on, each once and in order, at least up to the committed source
// position. SLUICE_RUNTIME_NETFAULT_ITERATIONS sets the number of cuts (SLUICE_SOAK=1: ten
// times as many).
func TestPipelineIntoReplicatedLogThroughPartitions(t *testing.T) {
	cuts := 10
	if v, err := strconv.Atoi(os.Getenv("SLUICE_RUNTIME_NETFAULT_ITERATIONS")); err == nil && v > 0 {
		cuts = v
	}
	if os.Getenv("SLUICE_SOAK") == "1" {
		cuts *= 10
	}
	logs, links := rafttest.ProxiedCluster(t, 3, 10*time.Millisecond)
	cfg := datagenConfig(1<<40, 40, 200, "datagen.tables", "orders") // until stopped
	s := settings(t, cfg)
	topic := s.Topic("orders")
	tcfg := wal.DefaultTopicConfig()
	tcfg.Partitions = 1
	if err := logs[0].CreateTopicReplicas(t.Context(), topic, tcfg, 3); err != nil {
		t.Fatal(err)
	}
	// leader returns the node that serves the partition in the newest term, or -1; leads
	// whether node i takes itself for its leader.
	leader := func() int {
		best, term := -1, uint64(0)
		for i, l := range logs {
			for _, st := range l.Partitions() {
				if st.Topic == topic && st.Serving && st.Term > term {
					best, term = i, st.Term
				}
			}
		}
		return best
	}
	leads := func(i int) bool {
		for _, tp := range logs[i].Leads() {
			if tp.Topic == topic {
				return true
			}
		}
		return false
	}
	var self int
	waitFor(t, "a leader", func() bool { self = leader(); return self >= 0 })
	node := logs[self]
	h := newHarness(t, node, newRegistry(t), func(o *runtime.Options) { o.TopicDefaults.Partitions = 1 })
	h.add("gen", "datagen", cfg)
	h.start()
	committed := func() (int64, error) {
		pos, err := h.rt.SourceOffset(t.Context(), "gen")
		if err != nil || pos.IsZero() {
			return 0, err
		}
		var st struct{ Next int64 }
		if err := json.Unmarshal(pos.State, &st); err != nil {
			t.Fatalf("source offset %s: %v", pos.State, err)
		}
		return st.Next, nil
	}
	var before int64
	waitFor(t, "the first events to be committed", func() bool {
		n, err := committed()
		before = n
		return err == nil && n > 0
	})
	for i := range cuts {
		mode := linktest.Reset
		if i%2 == 1 {
			mode = linktest.Stall
		}
		cut := self
		if i > 0 {
			waitFor(t, "a leader", func() bool { cut = leader(); return cut >= 0 })
		}
		links.Isolate(uint64(cut+1), mode)
		waitFor(t, "another node to lead, and the cut one to step down", func() bool {
			l := leader()
			return l >= 0 && l != cut && !leads(cut)
		})
		links.Isolate(uint64(cut+1), linktest.Up)
		t.Logf("cut %d: leader %d cut off (the runtime's node: %v, stalled: %v); events committed: %d before",
			i, cut+1, cut == self, mode == linktest.Stall, before)
		waitFor(t, "the source to go on committing", func() bool {
			n, err := committed()
			if err != nil || n <= before {
				return false
			}
			before = n
			return true
		})
	}
	h.stop()
	final, err := committed()
	if err != nil {
		t.Fatalf("committed source position: %v", err)
	}
	var events int64
	for _, lr := range readAll(t, node, topic) {
		if seq := eventSeq(lr.rec); seq >= events {
			events = seq + 1
		}
	}
	st, _ := h.rt.Status("gen")
	t.Logf("%d events in the log, %d committed; the task restarted %d times, dropped %d replayed records",
		events, final, st.Tasks[0].Restarts, st.Tasks[0].Replayed)
	if events < final {
		t.Fatalf("the source position commits %d events, the log holds %d", final, events)
	}
	checkExactlyOnce(t, node, s, events)
}
