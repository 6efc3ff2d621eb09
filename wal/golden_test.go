package wal

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenBatch builds the batch pinned by testdata/batch-v1.bin.
func goldenBatch() []byte {
	var bb batchBuilder
	recs := []Record{
		{Timestamp: time.UnixMilli(1_700_000_000_000), Key: []byte("key-1"), Value: []byte(`{"after":{"id":1}}`),
			Headers: []Header{{Key: "op", Value: []byte("c")}, {Key: "null", Value: nil}}},
		{Timestamp: time.UnixMilli(1_700_000_000_005), Key: []byte("key-1"), Value: nil},
		{Timestamp: time.UnixMilli(1_699_999_999_999), Key: nil, Value: []byte{}},
	}
	bb.encodeRecords(recs, []byte("mysql-bin.000003:4711"), true, 0, Uncompressed)
	h := batchHeader{
		baseOffset: 1234, lastOffsetDelta: 2, baseTimestamp: bb.baseTS, maxTimestamp: bb.maxTS,
		producerID: 77, producerEpoch: 3, baseSequence: 40, term: 9, index: 4321,
		deleteHorizon: -1, recordCount: 3,
	}
	return append([]byte(nil), bb.finish(&h)...)
}

// TestGoldenBatch decodes the pinned batch bytes: the format must stay
// readable forever.
func TestGoldenBatch(t *testing.T) {
	path := filepath.Join("testdata", "batch-v1.bin")
	if *updateGolden {
		if err := os.WriteFile(path, goldenBatch(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, goldenBatch()) {
		t.Errorf("the encoder no longer produces the pinned bytes; a format change needs a new version byte")
	}
	h, err := parseBatch(b, true)
	if err != nil {
		t.Fatal(err)
	}
	type hdr struct {
		Base, TS, MaxTS, PID  int64
		Epoch                 int16
		Seq, Count, LastDelta int32
		Term, Index           uint64
		Horizon               int64
		SourcePos             string
	}
	got := hdr{h.baseOffset, h.baseTimestamp, h.maxTimestamp, h.producerID, h.producerEpoch, h.baseSequence,
		h.recordCount, h.lastOffsetDelta, h.term, h.index, h.deleteHorizon, string(h.sourcePos)}
	want := hdr{1234, 1_700_000_000_000, 1_700_000_000_005, 77, 3, 40, 3, 2, 9, 4321, -1, "mysql-bin.000003:4711"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("header (-want +got):\n%s", d)
	}
	var recs []Record
	err = eachRecord(&h, b, func(r *rawRecord, _ []byte) {
		recs = append(recs, Record{Offset: h.baseOffset + int64(r.offsetDelta), Timestamp: msTime(h.baseTimestamp + r.timestampDelta),
			Key: r.key, Value: r.value, Headers: r.decodeHeaders(nil)})
	})
	if err != nil {
		t.Fatal(err)
	}
	wantRecs := []Record{
		{Offset: 1234, Timestamp: time.UnixMilli(1_700_000_000_000), Key: []byte("key-1"), Value: []byte(`{"after":{"id":1}}`),
			Headers: []Header{{Key: "op", Value: []byte("c")}, {Key: "null", Value: nil}}},
		{Offset: 1235, Timestamp: time.UnixMilli(1_700_000_000_005), Key: []byte("key-1"), Value: nil},
		{Offset: 1236, Timestamp: time.UnixMilli(1_699_999_999_999), Key: nil, Value: []byte{}},
	}
	if d := cmp.Diff(wantRecs, recs); d != "" {
		t.Fatalf("records (-want +got):\n%s", d)
	}
	if recs[1].Value != nil || recs[2].Value == nil || recs[2].Key != nil {
		t.Fatal("null and empty are not told apart")
	}
}

// goldenLogDir is a whole log directory (segments, indexes, producer
// snapshots, topic config, internal topics) written by version 1.
var goldenLogDir = filepath.Join("testdata", "log-v1")

func writeGoldenLog(t *testing.T, dir string) {
	clk := newClock()
	l := mustOpen(t, dir, Options{Clock: clk.now})
	cfg := DefaultTopicConfig()
	cfg.Partitions = 2
	cfg.SegmentBytes = 1024
	cfg.IndexIntervalBytes = 128
	if err := l.CreateTopic("golden", cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, epoch, err := l.InitProducer(ctx, "golden-source")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		recs := []Record{{Key: []byte{byte('a' + i%5)}, Value: bytes.Repeat([]byte{byte(i)}, 40), Timestamp: clk.now(),
			Headers: []Header{{Key: "i", Value: []byte{byte(i)}}}}}
		mustAppend(t, l, "golden", int32(i%2), recs, AppendOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: int32(i / 2), SourcePosition: []byte{byte(i)}})
		clk.advance(time.Second)
	}
	if err := l.CommitOffsets(ctx, "views", map[TopicPartition]int64{{"golden", 0}: 7, {"golden", 1}: 9}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "LOCK"))
}

// TestGoldenLog opens a log directory written by format version 1 and
// checks every record, offset, producer state and committed offset.
func TestGoldenLog(t *testing.T) {
	if *updateGolden {
		os.RemoveAll(goldenLogDir)
		writeGoldenLog(t, goldenLogDir)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(goldenLogDir)); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, dir, Options{FS: vfs.OS, Clock: newClock().now})
	defer l.Close()
	for p := int32(0); p < 2; p++ {
		recs := readAllRecords(t, l, "golden", p)
		if len(recs) != 15 {
			t.Fatalf("partition %d: %d records, want 15", p, len(recs))
		}
		for j, r := range recs {
			i := 2*j + int(p)
			want := Record{Offset: int64(j), Key: []byte{byte('a' + i%5)}, Value: bytes.Repeat([]byte{byte(i)}, 40),
				Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i)*1000), Headers: []Header{{Key: "i", Value: []byte{byte(i)}}}}
			if d := cmp.Diff(want, r); d != "" {
				t.Fatalf("partition %d offset %d (-want +got):\n%s", p, j, d)
			}
		}
		ps, ok := l.ProducerState("golden", p, 1)
		if !ok || ps.LastSequence != 14 || ps.LastOffset != 14 || !bytes.Equal(ps.SourcePosition, []byte{byte(28 + p)}) {
			t.Fatalf("partition %d producer state %+v %v", p, ps, ok)
		}
	}
	got, _ := l.FetchOffsets("views")
	if want := map[TopicPartition]int64{{"golden", 0}: 7, {"golden", 1}: 9}; !cmp.Equal(want, got) {
		t.Fatalf("offsets %v, want %v", got, want)
	}
	off, err := l.OffsetForTime("golden", 1, time.UnixMilli(1_700_000_000_000+11_000))
	if err != nil || off != 5 {
		t.Fatalf("offset for time: %d %v, want 5", off, err)
	}
}
