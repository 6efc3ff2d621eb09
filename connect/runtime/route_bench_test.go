package runtime

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/wal"
)

// benchConnector returns a datagen connector of a runtime over an in-memory log.
func benchConnector(b *testing.B) *connector {
	reg, err := connect.NewRegistry(datagen.Plugin())
	if err != nil {
		b.Fatal(err)
	}
	rt, err := New(Options{Log: stubLog{}, Registry: reg, TopicDefaults: wal.TopicConfig{Partitions: 3}})
	if err != nil {
		b.Fatal(err)
	}
	chk, errs := rt.Check("gen", "datagen", map[string]string{"topic.prefix": "b"})
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	return &connector{rt: rt, Checked: chk, gate: newGate()}
}

// BenchmarkSourceRoute measures the runtime's own work per source record between Read and
// Append: transforms (none), partitioning, replay check, JSON encoding into the batch arena.
// Allocations are the runtime's alone (the records are generated before the timer).
// In "rendered", keys and values come as the JSON the source rendered (connect.RawJSON), as the
// snapshots' rows do.
func BenchmarkSourceRoute(b *testing.B) {
	b.Run("rows", func(b *testing.B) { benchSourceRoute(b, false) })
	b.Run("rendered", func(b *testing.B) { benchSourceRoute(b, true) })
}

func benchSourceRoute(b *testing.B, rendered bool) {
	c := benchConnector(b)
	prod, err := newProducer(b.Context(), c.rt.opts.Log, "gen")
	if err != nil {
		b.Fatal(err)
	}
	t := &sourceTask{c: c, log: c.rt.opts.Log, prod: prod, floor: map[TopicPartition]*floorOrder{}, topicNames: map[string]string{}, policy: newErrorPolicy("gen", c.Config, c.rt.logger, &c.rejected)}
	s := datagen.Settings{Prefix: "b", Database: "inventory", Tables: datagen.Tables, Keys: 1000, Seed: 1, Tombstones: true}
	const batches = 64
	var in []connect.Batch
	n := 0
	for i := range batches {
		var recs []connect.Record
		for e := i * 100; e < (i+1)*100; e++ {
			recs = append(recs, s.Records(int64(e))...)
		}
		for j := range recs {
			if rendered {
				recs[j].Key, recs[j].Value = render(b, recs[j].Key), render(b, recs[j].Value)
			}
		}
		n += len(recs)
		in = append(in, connect.Batch{Records: recs, Position: recs[len(recs)-1].Position})
	}
	sb := &sourceBatch{index: map[TopicPartition]*partBatch{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		batch := in[i%batches]
		if i%batches == 0 {
			clear(t.floor) // route the same records again
			t.lastFloor = nil
		}
		sb.reset()
		if err := t.route(b.Context(), batch, sb); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*n/batches)/b.Elapsed().Seconds(), "records/s")
}

// render returns v as the RawJSON a source would render for it (nil stays nil).
func render(b *testing.B, v any) any {
	if v == nil {
		return nil
	}
	j, err := connect.AppendJSON(nil, v)
	if err != nil {
		b.Fatal(err)
	}
	return connect.RawJSON(j)
}

// BenchmarkSinkPrepare measures decoding fetched records into connect.Records (the sink side's
// per-record work before Write), which connect.ParseJSON dominates. Allocations per op are
// per chunk of chunkRecords records.
func BenchmarkSinkPrepare(b *testing.B) {
	c := benchConnector(b)
	t := &sinkTask{c: c}
	s := datagen.Settings{Prefix: "b", Database: "inventory", Tables: datagen.Tables, Keys: 1000, Seed: 1, Tombstones: true}
	var a arena
	var recs []LogRecord
	var hs []LogHeader
	for e := range int64(chunkRecords) {
		r := s.Records(e)[0]
		k, _ := a.encodeKey(r.Key, nil)
		v, _ := a.encodeValue(r.Value, nil)
		var h []LogHeader
		hs, h = a.encodeHeaders(hs, &r)
		recs = append(recs, LogRecord{Offset: e, Key: k, Value: v, Headers: h})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := &chunk{tp: TopicPartition{Topic: "t"}, recs: recs}
		t.prepare(c)
		c.release() // as the writer does once the chunk is in a batch
	}
	b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
}

// stubLog has every topic with three partitions and nothing in them.
type stubLog struct{}

func (stubLog) CreateTopic(string, wal.TopicConfig) error { return nil }
func (stubLog) Describe(name string) (wal.TopicInfo, error) {
	return wal.TopicInfo{Name: name, Partitions: make([]wal.PartitionInfo, 3)}, nil
}
func (stubLog) Topics() []string                            { return nil }
func (stubLog) EarliestOffset(string, int32) (int64, error) { return 0, nil }
func (stubLog) LatestOffset(string, int32) (int64, error)   { return 0, nil }
func (stubLog) Append(context.Context, string, int32, []wal.Record, wal.AppendOptions) (wal.AppendResult, error) {
	return wal.AppendResult{}, nil
}
func (stubLog) InitProducer(context.Context, string) (int64, int16, error) { return 1, 1, nil }
func (stubLog) ProducerState(string, int32, int64) (wal.ProducerState, bool) {
	return wal.ProducerState{}, false
}
func (stubLog) Fetch(context.Context, string, int32, int64, wal.FetchOptions) (wal.FetchResult, error) {
	return wal.FetchResult{}, nil
}
func (stubLog) CommitOffsets(context.Context, string, map[wal.TopicPartition]int64) error {
	return nil
}
func (stubLog) FetchOffsets(string) (map[wal.TopicPartition]int64, error) { return nil, nil }
