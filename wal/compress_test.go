package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

var allCodecs = []Compression{Uncompressed, Gzip, Snappy, LZ4, Zstd}

// changeEvent is a record value shaped like a change event: compressible
// as a batch, as real ones are.
func changeEvent(i int) string {
	return fmt.Sprintf(`{"before":null,"after":{"id":%d,"v":%d,"s":"row %d"},"source":{"connector":"postgresql","db":"inventory","schema":"public","table":"items","lsn":%d},"op":"c","ts_ms":%d}`,
		i, i%1000, i, 1000+i, 1_700_000_000_000+i)
}

// storedBatches returns the headers of every batch of a partition, as
// stored on disk.
func storedBatches(t *testing.T, l *Log, topic string, part int32) []batchHeader {
	t.Helper()
	p, err := l.partition(topic, part)
	if err != nil {
		t.Fatal(err)
	}
	var hs []batchHeader
	for _, s := range p.segs {
		if err := p.eachBatch(s, 0, s.size, func(h *batchHeader, _ []byte, _ int64) (bool, error) {
			hs = append(hs, *h)
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return hs
}

// checkStoredCodecs fails unless every batch of the partition with records
// is stored with codec, or uncompressed because codec would not shrink it.
func checkStoredCodecs(t *testing.T, l *Log, topic string, part int32, codec Compression) {
	t.Helper()
	p, err := l.partition(topic, part)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.segs {
		err := p.eachBatch(s, 0, s.size, func(h *batchHeader, b []byte, pos int64) (bool, error) {
			switch {
			case h.recordCount == 0:
			case h.codec() == Uncompressed:
				if _, ok := compressRecords(nil, codec, b[h.recordsAt:h.size()]); ok {
					t.Fatalf("%s at %d: %d records stored uncompressed, though %s makes them smaller", s.path, pos, h.recordCount, codec)
				}
			case h.codec() != codec:
				t.Fatalf("%s at %d: stored %s, want %s", s.path, pos, h.codec(), codec)
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestCompressionRoundTrip: with each compression.type, what is appended
// reads back the same (through fetch, after a reopen, by time), the
// compressible batches are stored compressed and smaller, and a batch that
// would not shrink is stored uncompressed.
func TestCompressionRoundTrip(t *testing.T) {
	for _, codec := range allCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			clk := newClock()
			l := mustOpen(t, "/d", memOpts(fs, clk))
			defer func() { l.Close() }()
			cfg := DefaultTopicConfig()
			cfg.SegmentBytes = 16 << 10 // several segments, with indexes
			cfg.IndexIntervalBytes = 512
			cfg.Compression = codec
			if err := l.CreateTopic("t", cfg); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, uint64(codec)))
			var want []Record
			raw := 0
			add := func(recs []Record) {
				clk.advance(time.Second)
				for i := range recs {
					recs[i].Timestamp = clk.now()
				}
				res := mustAppend(t, l, "t", 0, recs, AppendOptions{SourcePosition: []byte("pos")})
				for i, r := range recs {
					r.Offset = res.BaseOffset + int64(i)
					r.Timestamp = time.UnixMilli(r.Timestamp.UnixMilli())
					want = append(want, r)
					raw += len(r.Key) + len(r.Value)
				}
			}
			n := 0
			for b := 0; b < 40; b++ {
				recs := make([]Record, 1+b%50)
				for i := range recs {
					recs[i] = kv(fmt.Sprint("k", n), changeEvent(n))
					recs[i].Headers = []Header{{Key: "__sluice.version", Value: []byte(fmt.Sprint(n))}}
					if n%7 == 0 {
						recs[i].Value = nil // a tombstone
					}
					n++
				}
				add(recs)
			}
			noise := make([]byte, 4096) // does not compress
			for i := range noise {
				noise[i] = byte(rng.Uint32())
			}
			add([]Record{{Key: []byte("noise"), Value: noise}})

			check := func(l *Log) {
				t.Helper()
				if got := readAllRecords(t, l, "t", 0); !reflect.DeepEqual(want, got) { // cmp.Diff only to show it: slow
					t.Fatalf("records read back differ (-want +got):\n%s", cmp.Diff(want, got))
				}
				at := want[len(want)/2]
				off, err := l.OffsetForTime("t", 0, at.Timestamp)
				if err != nil {
					t.Fatal(err)
				}
				first := at.Offset
				for first > 0 && want[first-1].Timestamp.Equal(at.Timestamp) {
					first--
				}
				if off != first {
					t.Fatalf("offset for time %v: %d, want %d", at.Timestamp, off, first)
				}
			}
			check(l)

			hs := storedBatches(t, l, "t", 0)
			stored := 0
			for i, h := range hs {
				stored += h.size()
				wantCodec := codec
				switch {
				case i == len(hs)-1:
					wantCodec = Uncompressed // the noise
				case h.recordCount < 5:
					continue // one small event may not shrink
				}
				if h.codec() != wantCodec {
					t.Fatalf("batch %d (%d records) stored %s, want %s", i, h.recordCount, h.codec(), wantCodec)
				}
			}
			if codec != Uncompressed && stored*2 > raw {
				t.Fatalf("%s: %d bytes stored for %d bytes of keys and values: not compressed", codec, stored, raw)
			}
			t.Logf("%s: %d bytes of keys and values stored in %d bytes", codec, raw, stored)

			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, "/d", memOpts(fs, clk))
			check(l)
			// Recovery reads an unclean tail in full: crash, then reopen.
			l.Close()
			if err := fs.Remove("/d/topics/t/0/" + cleanMarker); err != nil {
				t.Fatalf("remove the clean-shutdown marker: %v", err)
			}
			l = mustOpen(t, "/d", memOpts(fs, clk))
			check(l)
		})
	}
}

// TestCompressedBatchDamaged: a compressed batch whose checksum matches but
// whose records do not inflate (or claim more than a batch may hold) is
// corrupt, not a source of garbage records or of a huge allocation.
func TestCompressedBatchDamaged(t *testing.T) {
	recs := []Record{kv("a", changeEvent(1)), kv("b", changeEvent(2)), kv("c", changeEvent(3))}
	for _, codec := range allCodecs[1:] {
		t.Run(codec.String(), func(t *testing.T) {
			var bb batchBuilder
			bb.encodeRecords(recs, nil, false, 1, codec)
			if bb.codec != codec {
				t.Fatalf("encoded as %s, want %s", bb.codec, codec)
			}
			h := batchHeader{lastOffsetDelta: 2, producerID: -1, producerEpoch: -1, baseSequence: -1, deleteHorizon: -1, recordCount: 3}
			good := append([]byte(nil), bb.finish(&h)...)
			if _, err := parseBatch(good, true); err != nil {
				t.Fatalf("intact batch: %v", err)
			}
			reseal := func(b []byte) []byte {
				binary.BigEndian.PutUint32(b[offLength:], uint32(len(b)-lengthPrefix))
				binary.BigEndian.PutUint32(b[offCRC:], batchCRC(b, batchFixedHeader))
				return b
			}
			_, sizeLen := binary.Uvarint(good[batchFixedHeader:])
			payload := good[batchFixedHeader+sizeLen:]
			// garbage in place of the codec's output, sealed with a valid checksum
			garbled := append([]byte(nil), good...)
			for i := batchFixedHeader + sizeLen; i < len(garbled); i++ {
				garbled[i] ^= 0x5a
			}
			// a size past what a batch may hold
			bomb := binary.AppendUvarint(append([]byte(nil), good[:batchFixedHeader]...), maxBatchBytes+1)
			bomb = append(bomb, payload...)
			// a size no machine could allocate
			huge := binary.AppendUvarint(append([]byte(nil), good[:batchFixedHeader]...), 1<<62)
			huge = append(huge, payload...)
			// the records of another size than the batch says
			size, _ := binary.Uvarint(good[batchFixedHeader:])
			short := binary.AppendUvarint(append([]byte(nil), good[:batchFixedHeader]...), 10)
			short = append(short, payload...)
			long := binary.AppendUvarint(append([]byte(nil), good[:batchFixedHeader]...), size+10)
			long = append(long, payload...)
			for name, b := range map[string][]byte{"garbled": garbled, "bomb": bomb, "huge": huge, "shorter size": short, "longer size": long} {
				b = reseal(b)
				if _, err := parseBatch(b, false); err != nil {
					t.Fatalf("%s: the framing check should pass: %v", name, err)
				}
				if _, err := parseBatch(b, true); !errors.Is(err, errBadRecords) {
					t.Fatalf("%s: full check: %v, want %v", name, err, errBadRecords)
				}
				if _, _, err := DecodeBatch(b, nil); err == nil {
					t.Fatalf("%s: DecodeBatch accepted it", name)
				}
			}
			// codec bits this log does not know
			unknown := append([]byte(nil), good...)
			binary.BigEndian.PutUint16(unknown[offAttributes:], 6)
			if _, err := parseBatch(reseal(unknown), false); !errors.Is(err, errBadCodec) {
				t.Fatalf("codec 6: %v, want %v", err, errBadCodec)
			}
			// a control batch is never compressed
			ctl := EncodeControlBatch(0, 1, 1, []byte("conf"), time.UnixMilli(1))
			binary.BigEndian.PutUint16(ctl[offAttributes:], uint16(attrControl|int16(codec)))
			binary.BigEndian.PutUint32(ctl[offCRC:], batchCRC(ctl, batchFixedHeader+4))
			if _, err := parseBatch(ctl, false); !errors.Is(err, errBadCodec) {
				t.Fatalf("compressed control batch: %v, want %v", err, errBadCodec)
			}
		})
	}
}

// TestCompressedBatchCorruptOnDisk: a flipped byte in a compressed batch on
// disk is reported as corruption by a fetch.
func TestCompressedBatchCorruptOnDisk(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer func() { l.Close() }()
	cfg := DefaultTopicConfig()
	cfg.Compression = Snappy
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for i := range 20 {
		recs = append(recs, kv(fmt.Sprint(i), changeEvent(i)))
	}
	mustAppend(t, l, "t", 0, recs, AppendOptions{})
	p, _ := l.partition("t", 0)
	seg := p.active()
	b := make([]byte, 1)
	at := int64(batchFixedHeader + 40)
	if _, err := seg.f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	if _, err := seg.f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	_, err := l.Fetch(context.Background(), "t", 0, 0, FetchOptions{MaxBytes: 1 << 20})
	var ce *CorruptionError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "checksum") {
		t.Fatalf("fetch of a damaged batch: %v, want a checksum CorruptionError", err)
	}
}

// TestCompressionConfig: compression.type is read and written under
// Kafka's name and values; an unknown codec is refused, naming the choices.
func TestCompressionConfig(t *testing.T) {
	c, err := ParseTopicConfig(DefaultTopicConfig(), map[string]string{"compression.type": "lz4"})
	if err != nil || c.Compression != LZ4 {
		t.Fatalf("lz4: %v, %v", c.Compression, err)
	}
	if got := c.Map()["compression.type"]; got != "lz4" {
		t.Fatalf("Map: compression.type=%q", got)
	}
	if got := DefaultTopicConfig().Map()["compression.type"]; got != "uncompressed" {
		t.Fatalf("default compression.type=%q, want uncompressed", got)
	}
	_, err = ParseTopicConfig(DefaultTopicConfig(), map[string]string{"compression.type": "brotli"})
	want := `compression.type: must be "uncompressed", "gzip", "snappy", "lz4" or "zstd" (got "brotli")`
	if err == nil || err.Error() != want {
		t.Fatalf("brotli: %v, want %s", err, want)
	}
}

// compressedGoldenRecords are the records of testdata/batch-v1-<codec>.bin.
func compressedGoldenRecords() []Record {
	var recs []Record
	for i := range 20 {
		r := kv(fmt.Sprint("key-", i), changeEvent(i))
		r.Offset = 500 + int64(i)
		r.Timestamp = time.UnixMilli(1_700_000_000_000 + int64(i))
		if i == 3 {
			r.Value = nil
		}
		r.Headers = []Header{{Key: "__sluice.version", Value: []byte(fmt.Sprint(i))}}
		recs = append(recs, r)
	}
	return recs
}

// TestGoldenCompressedBatches reads pinned batches of each codec: what was
// stored compressed must stay readable forever. (The encoders' output may
// change between library versions, so only the decoding is pinned.)
func TestGoldenCompressedBatches(t *testing.T) {
	want := compressedGoldenRecords()
	for _, codec := range allCodecs[1:] {
		path := filepath.Join("testdata", "batch-v1-"+codec.String()+".bin")
		if *updateGolden {
			var bb batchBuilder
			bb.encodeRecords(want, []byte("pos"), true, 0, codec)
			h := batchHeader{baseOffset: 500, lastOffsetDelta: 19, baseTimestamp: bb.baseTS, maxTimestamp: bb.maxTS,
				producerID: -1, producerEpoch: -1, baseSequence: -1, deleteHorizon: -1, recordCount: 20}
			if err := os.WriteFile(path, bb.finish(&h), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		h, err := parseBatch(b, true)
		if err != nil {
			t.Fatalf("%s: %v", codec, err)
		}
		if h.codec() != codec {
			t.Fatalf("%s: the pinned batch is %s", codec, h.codec())
		}
		got, _, err := DecodeBatch(b, nil)
		if err != nil {
			t.Fatalf("%s: %v", codec, err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s: records (-want +got):\n%s", codec, cmp.Diff(want, got))
		}
	}
}

// TestFetchOfCompressedBatchesBoundedByMaxBytes: MaxBytes bounds what a
// fetch inflates, not only what it reads from disk, so batches that
// compress a thousandfold cannot make a small fetch take gigabytes.
func TestFetchOfCompressedBatchesBoundedByMaxBytes(t *testing.T) {
	for _, codec := range allCodecs[1:] {
		t.Run(codec.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			l := mustOpen(t, "/d", memOpts(fs, newClock()))
			defer l.Close()
			cfg := DefaultTopicConfig()
			cfg.Compression = codec
			if err := l.CreateTopic("t", cfg); err != nil {
				t.Fatal(err)
			}
			zeros := make([]byte, 1<<20)
			for range 8 {
				mustAppend(t, l, "t", 0, []Record{{Key: []byte("k"), Value: zeros}, {Key: []byte("k"), Value: zeros}}, AppendOptions{})
			}
			if st := storedBatches(t, l, "t", 0); st[0].size() > 256<<10 {
				t.Fatalf("a batch of 2 MiB of zeros stored in %d bytes: not compressed", st[0].size())
			}
			for off, n := int64(0), 0; off < 16; off, n = off+int64(n), 0 {
				res, err := l.Fetch(context.Background(), "t", 0, off, FetchOptions{MaxBytes: 64 << 10})
				if err != nil {
					t.Fatal(err)
				}
				n = len(res.Records)
				if n != 2 || res.Records[0].Offset != off || len(res.Records[1].Value) != 1<<20 {
					t.Fatalf("fetch of 64 KiB at %d: %d records, want the one batch of 2 (the first batch comes whole)", off, n)
				}
			}
			res, err := l.Fetch(context.Background(), "t", 0, 0, FetchOptions{MaxBytes: 5 << 20})
			if err != nil || len(res.Records) != 4 {
				t.Fatalf("fetch of 5 MiB: %d records (%v), want the 2 batches that fit inflated", len(res.Records), err)
			}
		})
	}
}

// FuzzDecompressRecords feeds the decoders what no checksum guards here:
// they must refuse it, not panic or allocate past the bound.
func FuzzDecompressRecords(f *testing.F) {
	src := []byte(changeEvent(1) + changeEvent(2) + changeEvent(3))
	for _, c := range allCodecs[1:] {
		if z, ok := compressRecords(nil, c, src); ok {
			f.Add(byte(c), z)
			f.Add(byte(c), z[:len(z)-1])
		}
	}
	f.Fuzz(func(t *testing.T, c byte, b []byte) {
		out, err := decompressRecords(Compression(c%8), b)
		if err == nil {
			if size, _ := binary.Uvarint(b); uint64(len(out)) != size {
				t.Fatalf("inflated %d bytes, the batch says %d", len(out), size)
			}
		}
	})
}
