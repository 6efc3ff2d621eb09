package raft

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/wal"
)

// TestTopicMetaGolden pins the format of the cluster's topic records,
// which stay in the meta topic forever.
func TestTopicMetaGolden(t *testing.T) {
	cfg := wal.DefaultTopicConfig()
	cfg.Partitions = 3
	cfg.Compact, cfg.Delete = true, false
	cfg.Compression = wal.LZ4
	tm := &topicMeta{name: "db.inventory.orders", cfg: cfg, rf: 3, replicas: assign("db.inventory.orders", 3, 3, []uint64{1, 2, 3})}
	rec := encodeTopicMeta(tm)
	golden := filepath.Join("testdata", "topic-meta-v1.bin")
	if os.Getenv("SLUICE_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, append(append([]byte(nil), rec.Key...), append([]byte{0}, rec.Value...)...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), rec.Key...), append([]byte{0}, rec.Value...)...)
	if !cmp.Equal(data, want) {
		t.Fatal("encoding changed: the golden file no longer matches what is written")
	}
	got, err := decodeTopicMeta(wal.Record{Key: data[:len(rec.Key)], Value: data[len(rec.Key)+1:]})
	if err != nil {
		t.Fatal(err)
	}
	if got.name != tm.name || got.rf != 3 || got.cfg != cfg || !cmp.Equal(got.replicas, tm.replicas) {
		t.Fatalf("decoded %+v, want %+v", got, tm)
	}

	// A record written before compression.type existed reads as uncompressed.
	old, err := os.ReadFile(filepath.Join("testdata", "topic-meta-v1-before-compression.bin"))
	if err != nil {
		t.Fatal(err)
	}
	got, err = decodeTopicMeta(wal.Record{Key: old[:len(rec.Key)], Value: old[len(rec.Key)+1:]})
	cfg.Compression = wal.Uncompressed
	if err != nil || got.name != tm.name || got.cfg != cfg {
		t.Fatalf("record of the previous release: decoded %+v, %v; want the config %+v", got, err, cfg)
	}
}

func FuzzTopicMeta(f *testing.F) {
	rec := encodeTopicMeta(&topicMeta{name: "t", cfg: wal.DefaultTopicConfig(), rf: 1, replicas: [][]uint64{{1}}})
	f.Add(rec.Value)
	f.Fuzz(func(t *testing.T, b []byte) {
		tm, err := decodeTopicMeta(wal.Record{Key: []byte("tx"), Value: b})
		if err != nil {
			return
		}
		again, err := decodeTopicMeta(encodeTopicMeta(tm))
		if err != nil || again.cfg != tm.cfg || !cmp.Equal(again.replicas, tm.replicas) {
			t.Fatalf("re-encoded record decodes differently: %v", err)
		}
	})
}

// FuzzWire feeds arbitrary bytes to the decoders of what arrives from
// the network: they must fail cleanly, never panic or allocate wildly.
func FuzzWire(f *testing.F) {
	e := enc{}
	encodeFetch(&e, &wal.FetchResult{NextOffset: 3, HighWatermark: 3, Records: []wal.Record{
		{Offset: 2, Timestamp: time.UnixMilli(5), Key: []byte("k"), Value: []byte("v"), Headers: []wal.Header{{Key: "h", Value: nil}}}}})
	f.Add(e.b)
	e = enc{}
	encodeError(&e, &NotLeaderError{Topic: "t", Partition: 1, Leader: 2})
	f.Add(e.b)
	e = enc{}
	encodeStatus(&e, []PartitionStatus{{Topic: "t", Role: "leader", Followers: []FollowerStatus{{Node: 2}}}})
	f.Add(e.b)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeFetch(b)
		_ = decodeError(b)
		d := dec{b: b}
		_ = decodeStatus(&d)
		_, _ = decodeSnapData(b)
	})
}

func TestWireRoundTrip(t *testing.T) {
	in := wal.FetchResult{NextOffset: 9, HighWatermark: 10, LogStartOffset: 1, Records: []wal.Record{
		{Offset: 7, Timestamp: time.UnixMilli(1_700_000_000_123), Key: nil, Value: []byte{}, Headers: []wal.Header{{Key: "a", Value: []byte("b")}, {Key: "n"}}},
		{Offset: 8, Timestamp: time.UnixMilli(1_700_000_000_124), Key: []byte("k"), Value: nil},
	}}
	e := enc{}
	encodeFetch(&e, &in)
	out, err := decodeFetch(e.b)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in, out, cmp.AllowUnexported(wal.FetchResult{})); d != "" {
		t.Fatalf("fetch round trip (-in +out):\n%s", d)
	}
	for _, err := range []error{
		&NotLeaderError{Topic: "t", Partition: 3, Leader: 2},
		&wal.OffsetOutOfRangeError{Topic: "t", Partition: 1, Offset: 5, LogStart: 0, HighWatermark: 4},
		wal.ErrProducerFenced, wal.ErrOutOfOrderSequence, ErrOutcomeUnknown, ErrLost, wal.ErrTopicExists,
	} {
		e := enc{}
		encodeError(&e, err)
		got := decodeError(e.b)
		if got.Error() != err.Error() || !errors.Is(got, err) && !errors.As(got, new(*NotLeaderError)) && !errors.As(got, new(*wal.OffsetOutOfRangeError)) {
			t.Errorf("error %q came back as %q (%T)", err, got, got)
		}
	}
}
