package runtime_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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

// A graceful stop commits what the sink wrote, however long the flush interval: the next
// start resumes right after it.
func TestSinkCommitsAtGracefulStop(t *testing.T) {
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	// A steady stream (a batch a millisecond) that is still flowing when the stop comes, so
	// the sink is never idle long enough to commit on its own.
	h.add("gen", "datagen", datagenConfig(1_000_000, 50, 20, "datagen.rate", "20000", "datagen.tables", "customers"))
	h.add("out", "mem", map[string]string{"topics": "gen.inventory.customers",
		"consumer.override.max.poll.records": "20", "offset.flush.interval.ms": "3600000"})
	h.start()
	waitFor(t, "the sink to write 2000 records", func() bool { return len(sink.Records()) >= 2000 })
	h.stop()
	written := map[runtime.TopicPartition]int64{}
	for _, r := range sink.Records() {
		tp := runtime.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		written[tp] = max(written[tp], r.Offset+1)
	}
	offs, err := log.FetchOffsets(runtime.SinkGroup("out"))
	if err != nil {
		t.Fatal(err)
	}
	for tp, w := range written {
		if offs[tp] != w {
			t.Fatalf("after a graceful stop %s-%d is committed at %d, but the sink wrote up to %d", tp.Topic, tp.Partition, offs[tp], w)
		}
	}
}

// A read-your-writes wait wakes when the sink commits, not at its next poll (once a second).
func TestWaitForWakesOnCommit(t *testing.T) {
	const events = 20
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	cfg := datagenConfig(events, 1000, 5, "datagen.tables", "customers")
	total := expectedRecords(settings(t, cfg), events)
	release := make(chan struct{})
	var written atomic.Int64
	sink.Hook = func(batch []connect.Record) error {
		if written.Load()+int64(len(batch)) >= int64(total) {
			<-release
		}
		written.Add(int64(len(batch)))
		return nil
	}
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	h.add("gen", "datagen", cfg)
	h.add("out", "mem", map[string]string{"topics": "gen.inventory.customers", "consumer.override.max.poll.records": "1"})
	h.start()
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	waitFor(t, "the sink to hold all but the last record", func() bool { return len(sink.Records()) == total-1 })
	// The wait starts while the last record is held back, then the write goes through: the
	// wait must end with the commit that follows (20 ms after the write), well before the
	// second that a poll would take.
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.rt.WaitFor(ctx, "out", "", strconv.Itoa(events))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("wait for the last record: %v (the wait did not wake on the sink's commit)", err)
	}
}
