package runtime_test

import (
	"sync/atomic"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
)

// Under a steady stream a sink commits its consumer offsets at most every
// offset.flush.interval.ms, not after every Write (each commit is an fsync of the log); once
// nothing new arrives it commits what it wrote within moments. With offset.flush.interval.ms=0
// it commits after every Write.
func TestSinkCommitInterval(t *testing.T) {
	for _, tc := range []struct {
		interval string
		batched  bool
	}{{"60000", true}, {"0", false}} {
		t.Run("interval="+tc.interval, func(t *testing.T) {
			const events = 4000
			log := runtimetest.NewLog()
			var commits, writes atomic.Int64
			log.Hooks.BeforeCommit = func(group string, _ map[runtime.TopicPartition]int64) error {
				if group == runtime.SinkGroup("out") {
					commits.Add(1)
				}
				return nil
			}
			sink := runtimetest.NewSink()
			sink.Hook = func([]connect.Record) error {
				writes.Add(1)
				return nil
			}
			h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
			cfg := datagenConfig(events, 50, 20, "datagen.rate", "20000")
			h.add("gen", "datagen", cfg)
			h.add("out", "mem", map[string]string{"topics.regex": `gen\..*`,
				"consumer.override.max.poll.records": "20", "offset.flush.interval.ms": tc.interval})
			h.start()
			total := int64(expectedRecords(settings(t, cfg), events))
			// The last records arrive and then nothing more: their offsets are committed
			// without waiting for the interval (a minute here).
			waitFor(t, "the sink's committed offsets to reach the end of its topics", func() bool {
				offs, err := log.FetchOffsets(runtime.SinkGroup("out"))
				if err != nil {
					return false
				}
				var n int64
				for _, o := range offs {
					n += o
				}
				return n == total
			})
			w, c := writes.Load(), commits.Load()
			t.Logf("%d writes, %d commits", w, c)
			if w < 30 {
				t.Fatalf("%d writes: too few for the check below to prove anything", w)
			}
			switch {
			case tc.batched && c > w/3:
				t.Fatalf("%d commits for %d writes with a flush interval of a minute: offsets are committed after (nearly) every write", c, w)
			case !tc.batched && c < w:
				t.Fatalf("%d commits for %d writes with offset.flush.interval.ms=0: want one after every write", c, w)
			}
			if n := int64(len(sink.Records())); n != total {
				t.Fatalf("the sink stored %d records, want %d", n, total)
			}
		})
	}
}
