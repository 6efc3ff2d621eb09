package runtime

import (
	"context"
	"fmt"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/wal"
)

const benchBatch = 100 // datagen events per batch = records per bare append

// benchRounds is how many rounds of each loader a benchmark runs: SLUICE_BENCH_ROUNDS, else 5.
func benchRounds(b *testing.B) int {
	if v := os.Getenv("SLUICE_BENCH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SLUICE_BENCH_ROUNDS=%q: want a positive integer", v)
		}
		return n
	}
	return 5
}

// cpuTime is the CPU time this process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

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

// walOpts returns the log options of the benchmark: fsync with group commit, or no fsync
// with SLUICE_BENCH_NOSYNC=1 (to see the CPU-bound ceiling).
func walOpts() wal.Options {
	if os.Getenv("SLUICE_BENCH_NOSYNC") == "1" {
		return wal.Options{Fsync: wal.UnsafeFsyncNever}
	}
	return wal.Options{}
}

var benchSettings = datagen.Settings{Prefix: "bench", Database: "inventory", Tables: []string{"customers"}, Keys: 10000, Seed: 1}

// bareRound appends events datagen records, pre-encoded as the runtime encodes them, to one
// partition in batches of benchBatch with one idempotent producer, each append carrying a
// source position: the log's own cost of what the pipeline does.
func bareRound(b *testing.B, dir string, events int) (time.Duration, time.Duration) {
	log, err := wal.Open(dir, walOpts())
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	if err := log.CreateTopic("bare", wal.DefaultTopicConfig()); err != nil {
		b.Fatal(err)
	}
	var batches [][]wal.Record
	for i := 0; i < events; i += benchBatch {
		var batch []wal.Record
		for e := i; e < min(i+benchBatch, events); e++ {
			r := benchSettings.Records(int64(e))[0]
			k, _ := connect.AppendJSON(nil, r.Key)
			v, _ := connect.AppendJSON(nil, r.Value)
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
	pos := []byte("\x01\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	cpu := cpuTime(b)
	start := time.Now()
	seq := int32(0)
	for _, batch := range batches {
		if _, err := log.Append(ctx, "bare", 0, batch, wal.AppendOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq, SourcePosition: pos}); err != nil {
			b.Fatal(err)
		}
		seq += int32(len(batch))
	}
	return time.Since(start), cpuTime(b) - cpu
}

// pipelineRound runs datagen → log → null sink until the sink has every event (withSink) or
// until the log has every event, and returns the time from start, the heap allocations per
// event and the process's CPU time.
func pipelineRound(b *testing.B, dir string, events int, withSink bool) (time.Duration, float64, time.Duration) {
	log, err := wal.Open(dir, walOpts())
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
	rt, err := runtime.New(runtime.Options{Log: log, Registry: reg})
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
	if withSink {
		add("null", "null", map[string]string{"topics": "bench.inventory.customers"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	allocs := mallocs()
	cpu := cpuTime(b)
	start := time.Now()
	go func() { done <- rt.Run(ctx) }()
	for {
		if withSink && got.Load() >= int64(events) {
			break
		}
		if n, _ := log.LatestOffset("bench.inventory.customers", 0); !withSink && n >= int64(events) {
			break
		}
		time.Sleep(200 * time.Microsecond)
	}
	elapsed := time.Since(start)
	allocs = mallocs() - allocs
	cpu = cpuTime(b) - cpu
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return elapsed, float64(allocs) / float64(events), cpu
}

// BenchmarkPipeline measures datagen → log → null sink end to end (one topic, one partition,
// datagen batches of 100 events, fsync with group commit) and datagen → log alone against the
// bare log appending the same encoded records in batches of 100, alternating the three in
// rounds of the same run (SLUICE_BENCH_ROUNDS, default 5) so that all see the same disk and
// CPU. Reported: the median events/s of each, the medians of the per-round ratios to the bare
// log (goal >= 0.8), heap allocations per event (datagen's generation and, end to end, the
// sink side's decoding included), and the process's CPU microseconds per event (less
// disturbed by other processes than the rates: the machine is shared). One op is one event.
func BenchmarkPipeline(b *testing.B) {
	runtime.SetGCDefaults() // the collector target of `sluice run`, for baseline and subject alike
	rounds := benchRounds(b)
	events := max(b.N/rounds, 20*benchBatch)
	var bare, pipe, src, ratios, srcRatios, allocs, srcAllocs, bareCPU, srcCPU, pipeCPU []float64
	perEvent := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(events) }
	for r := range rounds {
		dir := b.TempDir()
		bd, bc := bareRound(b, fmt.Sprintf("%s/bare-%d", dir, r), events)
		sd, sa, sc := pipelineRound(b, fmt.Sprintf("%s/src-%d", dir, r), events, false)
		pd, pa, pc := pipelineRound(b, fmt.Sprintf("%s/pipe-%d", dir, r), events, true)
		bare = append(bare, float64(events)/bd.Seconds())
		src = append(src, float64(events)/sd.Seconds())
		pipe = append(pipe, float64(events)/pd.Seconds())
		srcRatios = append(srcRatios, bd.Seconds()/sd.Seconds())
		ratios = append(ratios, bd.Seconds()/pd.Seconds())
		srcAllocs = append(srcAllocs, sa)
		allocs = append(allocs, pa)
		bareCPU = append(bareCPU, perEvent(bc))
		srcCPU = append(srcCPU, perEvent(sc))
		pipeCPU = append(pipeCPU, perEvent(pc))
	}
	b.ReportMetric(median(bare), "wal_events/s")
	b.ReportMetric(median(src), "source_events/s")
	b.ReportMetric(median(srcRatios), "source_ratio")
	b.ReportMetric(median(srcAllocs), "source_allocs/event")
	b.ReportMetric(median(pipe), "pipeline_events/s")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(median(allocs), "allocs/event")
	b.ReportMetric(median(bareCPU), "wal_cpu_us/event")
	b.ReportMetric(median(srcCPU), "source_cpu_us/event")
	b.ReportMetric(median(pipeCPU), "pipeline_cpu_us/event")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
