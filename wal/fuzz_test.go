package wal

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseBatch feeds arbitrary bytes to the batch decoder: it must never
// panic, and whatever it accepts must iterate cleanly within its bounds.
func FuzzParseBatch(f *testing.F) {
	f.Add(goldenBatch())
	for _, name := range []string{"batch-v1.bin", "batch-v1-gzip.bin", "batch-v1-snappy.bin", "batch-v1-lz4.bin", "batch-v1-zstd.bin"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(b)
			f.Add(b[:len(b)-1])
		}
	}
	var bb batchBuilder
	bb.encodeRecords([]Record{{Key: []byte("k")}}, nil, false, 5, Uncompressed)
	h := batchHeader{lastOffsetDelta: 0, producerID: -1, producerEpoch: -1, baseSequence: -1, deleteHorizon: -1, recordCount: 1}
	f.Add(append([]byte(nil), bb.finish(&h)...))
	f.Add([]byte{})
	f.Add(make([]byte, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseBatch(b, true)
		if err != nil {
			return
		}
		if h.size() > len(b) || h.recordsAt > h.size() {
			t.Fatalf("accepted batch claims %d bytes, has %d", h.size(), len(b))
		}
		n := int32(0)
		if err := eachRecord(&h, b, func(r *rawRecord, _ []byte) {
			r.decodeHeaders(nil)
			n++
		}); err != nil {
			t.Fatalf("accepted batch has bad records: %v", err)
		}
		if n != h.recordCount {
			t.Fatalf("%d records, header says %d", n, h.recordCount)
		}
	})
}

// FuzzDecodeIndex and FuzzDecodeSnapshot check the other persisted
// decoders never panic.
func FuzzDecodeIndex(f *testing.F) {
	f.Add(encodeIndex(indexKindOffset, 0, 100, []offsetEntry{{1, 2}}, nil), byte(indexKindOffset))
	f.Add(encodeIndex(indexKindTime, 0, 100, nil, []timeEntry{{5, 1}}), byte(indexKindTime))
	f.Fuzz(func(t *testing.T, b []byte, kind byte) {
		decodeIndex(b, kind, 0, 100)
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(encodeSnapshot(10, map[int64]*producerEntry{3: {epoch: 1, n: 1, sourcePos: []byte("x")}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeSnapshot(b)
	})
}
