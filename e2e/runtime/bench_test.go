package runtime

import (
	"context"
	"os"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/wal"
)

const benchBatch = 100

// nullSink counts what it is given.
type nullSink struct{ n *atomic.Int64 }

func (s nullSink) Open(context.Context) error { return nil }
func (s nullSink) Write(_ context.Context, batch []connect.Record) error {
	s.n.Add(int64(len(batch)))
	return nil
}
func (s nullSink) Close(context.Context) error { return nil }

func mallocs() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// BenchmarkPipeline measures datagen → log → null sink end to end (one topic, one partition,
// datagen batches of 100 events, fsync with group commit) against the bare log appending the
// same encoded records in batches of 100 in the same run. Reported: events/s of both, their
// ratio (goal >= 0.8) and heap allocations per event of the pipeline (datagen's generation
// and the sink side's decoding included).
func BenchmarkPipeline(b *testing.B) {
	events := max(b.N, 2*benchBatch)
	s := datagen.Settings{Prefix: "bench", Database: "inventory", Tables: []string{"customers"}, Keys: 10000, Seed: 1}

	// Baseline: the same records, pre-encoded, appended by one producer.
	dir := b.TempDir()
	log, err := wal.Open(dir+"/bare", walOpts())
	if err != nil {
		b.Fatal(err)
	}
	cfg := wal.DefaultTopicConfig()
	if err := log.CreateTopic("bare", cfg); err != nil {
		b.Fatal(err)
	}
	var batches [][]wal.Record
	var bytes int
	for i := 0; i < events; i += benchBatch {
		var batch []wal.Record
		for e := i; e < min(i+benchBatch, events); e++ {
			r := s.Records(int64(e))[0]
			k, _ := connect.AppendJSON(nil, r.Key)
			v, _ := connect.AppendJSON(nil, r.Value)
			bytes += len(k) + len(v)
			batch = append(batch, wal.Record{Key: k, Value: v, Timestamp: r.Timestamp,
				Headers: []wal.Header{{Key: connect.HeaderVersion, Value: strconv.AppendInt(nil, r.Version, 10)}}})
		}
		batches = append(batches, batch)
	}
	ctx := context.Background()
	id, epoch, err := log.InitProducer(ctx, "bare")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	seq := int32(0)
	for _, batch := range batches {
		if _, err := log.Append(ctx, "bare", 0, batch, wal.AppendOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq, SourcePosition: []byte("0123456789abcdef")}); err != nil {
			b.Fatal(err)
		}
		seq += int32(len(batch))
	}
	bare := time.Since(start)
	b.StopTimer()
	log.Close()

	// The pipeline.
	log, err = wal.Open(dir+"/pipeline", walOpts())
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	var got atomic.Int64
	sink := connect.Plugin{Name: "null", Kind: connect.KindSink,
		NewSink: func(connect.Config, connect.Env) (connect.Sink, error) { return nullSink{&got}, nil }}
	reg, err := connect.NewRegistry(datagen.Plugin(), sink)
	if err != nil {
		b.Fatal(err)
	}
	rt, err := runtime.New(runtime.Options{Log: log, Registry: reg, TopicDefaults: cfg})
	if err != nil {
		b.Fatal(err)
	}
	add := func(name, class string, c map[string]string) {
		if err := rt.Add(runtime.ConnectorSpec{Name: name, Class: class, Config: c}); err != nil {
			b.Fatal(err)
		}
	}
	add("gen", "datagen", map[string]string{
		"topic.prefix": "bench", "datagen.tables": "customers", "datagen.keys": "10000",
		"datagen.batch.size": strconv.Itoa(benchBatch), "datagen.max.events": strconv.Itoa(events),
		"tombstones.on.delete": "false",
	})
	add("null", "null", map[string]string{"topics": "bench.inventory.customers"})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	allocs := mallocs()
	b.StartTimer()
	start = time.Now()
	go func() { done <- rt.Run(runCtx) }()
	for got.Load() < int64(events) {
		time.Sleep(200 * time.Microsecond)
	}
	pipeline := time.Since(start)
	b.StopTimer()
	allocs = mallocs() - allocs
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	bareRate := float64(events) / bare.Seconds()
	pipeRate := float64(events) / pipeline.Seconds()
	b.ReportMetric(bareRate, "wal_events/s")
	b.ReportMetric(pipeRate, "pipeline_events/s")
	b.ReportMetric(pipeRate/bareRate, "ratio")
	b.ReportMetric(float64(allocs)/float64(events), "allocs/event")
	b.ReportMetric(float64(bytes)/float64(events), "B/event")
}

// walOpts returns the log options of the benchmark: fsync with group commit, or no fsync
// with SLUICE_BENCH_NOSYNC=1 (to see the CPU-bound ceiling).
func walOpts() wal.Options {
	if os.Getenv("SLUICE_BENCH_NOSYNC") == "1" {
		return wal.Options{Fsync: wal.UnsafeFsyncNever}
	}
	return wal.Options{}
}
