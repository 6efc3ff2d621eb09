package wal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

const sweepSeg = "/d/topics/t/0/00000000000000000000.log"

// sweepSetup writes batches of varied records and closes cleanly. It
// returns the file system, the records and the byte ranges of the batches
// in the single segment.
func sweepSetup(t *testing.T, batches int, clean bool, codec Compression) (*vfs.Mem, []Record, [][2]int64) {
	fs := vfs.NewMem()
	clk := newClock()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	cfg := DefaultTopicConfig()
	cfg.Compression = codec
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	var ranges [][2]int64
	var pos int64
	for i := 0; i < batches; i++ {
		v := fmt.Sprint("value-", i)
		if codec != Uncompressed {
			v = strings.Repeat(changeEvent(i), 3) // compresses
		}
		recs := []Record{kv(fmt.Sprint("k", i), v), {Key: []byte("h"), Value: nil, Headers: []Header{{Key: "x", Value: []byte("y")}}}}
		mustAppend(t, l, "t", 0, recs, AppendOptions{ProducerID: 1, ProducerEpoch: 0, BaseSequence: int32(2 * i), SourcePosition: []byte(fmt.Sprint("pos", i))})
		st, err := fs.Stat(sweepSeg)
		if err != nil {
			t.Fatal(err)
		}
		ranges = append(ranges, [2]int64{pos, st.Size})
		pos = st.Size
	}
	recs := readAllRecords(t, l, "t", 0)
	for i, h := range storedBatches(t, l, "t", 0) {
		if h.codec() != codec {
			t.Fatalf("batch %d stored %s, want %s", i, h.codec(), codec)
		}
	}
	if clean {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	} else {
		// A crash after the last acknowledged append: every batch is
		// durable, and there is no clean-shutdown marker.
		fs.Crash(vfs.CrashOptions{})
		l.Close()
	}
	return fs, recs, ranges
}

func cloneMem(t *testing.T, src *vfs.Mem) *vfs.Mem {
	t.Helper()
	dst := vfs.NewMem()
	var walk func(dir string)
	walk = func(dir string) {
		names, err := src.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			p := filepath.Join(dir, n)
			st, _ := src.Stat(p)
			if st.IsDir {
				dst.MkdirAll(p)
				walk(p)
				continue
			}
			b, err := readFile(src, p)
			if err != nil {
				t.Fatal(err)
			}
			f, _ := dst.Create(p)
			f.Write(b)
			f.Sync()
			f.Close()
			dst.SyncDir(dir)
		}
	}
	dst.MkdirAll("/d")
	walk("/d")
	return dst
}

// TestTailCorruptionSweep truncates the segment at, and flips the byte at,
// every position of the last batch: each must recover by truncating to the
// batches before it. Flipping any byte of an earlier batch must fail the
// open with a CorruptionError naming the file and the batch's position.
// Compressed batches (inflated by the recovery scan) recover the same.
func TestTailCorruptionSweep(t *testing.T) {
	for _, codec := range []Compression{Uncompressed, Snappy} {
		t.Run(codec.String(), func(t *testing.T) { testTailCorruptionSweep(t, codec) })
	}
}

func testTailCorruptionSweep(t *testing.T, codec Compression) {
	const batches = 3
	base, want, ranges := sweepSetup(t, batches, false, codec)
	last := ranges[batches-1]
	wantBefore := want[:2*(batches-1)]
	check := func(t *testing.T, fs *vfs.Mem, what string) {
		t.Helper()
		l, err := Open("/d", Options{FS: fs, Clock: newClock().now})
		if err != nil {
			t.Fatalf("%s: open: %v", what, err)
		}
		defer l.Close()
		got := readAllRecords(t, l, "t", 0)
		if d := cmp.Diff(wantBefore, got); d != "" {
			t.Fatalf("%s: records (-want +got):\n%s", what, d)
		}
		// The torn bytes are gone from the file, not just ignored.
		if st, err := fs.Stat(sweepSeg); err != nil || st.Size != last[0] {
			t.Fatalf("%s: segment file is %d bytes after recovery (%v), want the valid end %d", what, st.Size, err, last[0])
		}
		// The producer state and source position come from the batch
		// before the torn one.
		ps, ok := l.ProducerState("t", 0, 1)
		if !ok || string(ps.SourcePosition) != fmt.Sprint("pos", batches-2) || ps.LastSequence != int32(2*(batches-1)-1) {
			t.Fatalf("%s: producer state %+v %v", what, ps, ok)
		}
		// The log takes appends where the torn batch was.
		res := mustAppend(t, l, "t", 0, []Record{kv("n", "new")}, AppendOptions{})
		if res.BaseOffset != int64(len(wantBefore)) {
			t.Fatalf("%s: next append at %d, want %d", what, res.BaseOffset, len(wantBefore))
		}
	}
	for pos := last[0]; pos < last[1]; pos++ {
		fs := cloneMem(t, base)
		fs.Corrupt(sweepSeg, func(b []byte) []byte { return b[:pos] })
		check(t, fs, fmt.Sprintf("truncate at %d", pos))

		fs = cloneMem(t, base)
		fs.Corrupt(sweepSeg, func(b []byte) []byte { b[pos] ^= 0x5a; return b })
		check(t, fs, fmt.Sprintf("flip byte %d", pos))
	}
	for bi := 0; bi < batches-1; bi++ {
		r := ranges[bi]
		for pos := r[0]; pos < r[1]; pos++ {
			fs := cloneMem(t, base)
			fs.Corrupt(sweepSeg, func(b []byte) []byte { b[pos] ^= 0x01; return b })
			_, err := Open("/d", Options{FS: fs})
			var ce *CorruptionError
			if !errors.As(err, &ce) {
				t.Fatalf("flip byte %d of batch %d: open returned %v, want a CorruptionError", pos, bi, err)
			}
			if ce.File != sweepSeg || ce.Offset != r[0] {
				t.Fatalf("flip byte %d of batch %d: error names %s at %d, want %s at %d", pos, bi, ce.File, ce.Offset, sweepSeg, r[0])
			}
		}
	}
}

// TestUnsafeTruncateCorruptTail: damage followed by valid batches fails
// the open, and opens only when the operator asks for the truncation.
func TestUnsafeTruncateCorruptTail(t *testing.T) {
	base, want, ranges := sweepSetup(t, 3, false, Uncompressed)
	fs := cloneMem(t, base)
	fs.Corrupt(sweepSeg, func(b []byte) []byte { b[ranges[1][0]+20] ^= 1; return b })
	var ce *CorruptionError
	if _, err := Open("/d", Options{FS: fs}); !errors.As(err, &ce) {
		t.Fatalf("open: %v, want CorruptionError", err)
	}
	l, err := Open("/d", Options{FS: fs, UnsafeTruncateCorruptTail: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := readAllRecords(t, l, "t", 0)
	if d := cmp.Diff(want[:2], got); d != "" {
		t.Fatalf("after repair (-want +got):\n%s", d)
	}
}

// TestCleanShutdownTailCorruption flips a byte of the last batch after a
// clean close: that batch was durable, so this is damage, not a torn
// write, and must be reported, at open or at read.
func TestCleanShutdownTailCorruption(t *testing.T) {
	base, _, ranges := sweepSetup(t, 3, true, Uncompressed)
	last := ranges[2]
	for pos := last[0]; pos < last[1]; pos += 7 {
		fs := cloneMem(t, base)
		fs.Corrupt(sweepSeg, func(b []byte) []byte { b[pos] ^= 0x10; return b })
		l, err := Open("/d", Options{FS: fs})
		if err == nil {
			_, err = tryReadAll(l, "t", 0)
			l.Close()
		}
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.File != sweepSeg || ce.Offset != last[0] {
			t.Fatalf("flip byte %d after a clean close: %v, want CorruptionError at %d", pos, err, last[0])
		}
	}
}

// TestSealedSegmentCorruption flips a byte in a sealed segment: with its
// indexes gone the open scans it and reports the corruption; with its
// indexes intact the open trusts them and the fetch reports it.
func TestSealedSegmentCorruption(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	cfg := DefaultTopicConfig()
	cfg.SegmentBytes = 1024
	cfg.IndexIntervalBytes = 256
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		mustAppend(t, l, "t", 0, []Record{kv("k", strings.Repeat("v", 100))}, AppendOptions{})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg := "/d/topics/t/0/00000000000000000000.log"

	// Damage before the last index entry: the indexes check out, the open
	// trusts them and the fetch reports it. Damage in the batches from the
	// last entry on: the open checks those, and reports it.
	for _, at := range []int{100, 900} {
		fs := cloneMem(t, fs)
		fs.Corrupt(seg, func(b []byte) []byte { b[at] ^= 0xff; return b })
		l, err := Open("/d", memOpts(fs, clk))
		if at == 900 {
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.File != seg {
				t.Fatalf("open with the last indexed batch of a sealed segment damaged: %v, want CorruptionError in %s", err, seg)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		_, err = tryReadAll(l, "t", 0)
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.File != seg {
			t.Fatalf("fetch over a corrupt sealed segment: %v, want CorruptionError in %s", err, seg)
		}
		l.Close()
	}
	fs.Corrupt(seg, func(b []byte) []byte { b[300] ^= 0xff; return b })

	fs.Remove("/d/topics/t/0/00000000000000000000.index")
	_, err := Open("/d", memOpts(fs, clk))
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != seg {
		t.Fatalf("open with a corrupt sealed segment and no index: %v, want CorruptionError in %s", err, seg)
	}
	if !strings.Contains(err.Error(), "corrupt log file "+seg+" at byte") {
		t.Fatalf("error text: %v", err)
	}
}

// TestIndexRebuild removes or damages index files: the reopened log must
// answer fetches and time lookups as before.
func TestIndexRebuild(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	cfg := DefaultTopicConfig()
	cfg.SegmentBytes = 4096
	cfg.IndexIntervalBytes = 256
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		mustAppend(t, l, "t", 0, []Record{kv(fmt.Sprint(i), strings.Repeat("v", i%50)), kv("x", "y")}, AppendOptions{})
		clk.advance(time.Second)
	}
	type answers struct {
		Fetch []int64
		Times []int64
	}
	ask := func(l *Log) answers {
		var a answers
		for off := int64(0); off < 400; off += 37 {
			res, err := l.Fetch(context.Background(), "t", 0, off, FetchOptions{MaxBytes: 1})
			if err != nil {
				t.Fatal(err)
			}
			a.Fetch = append(a.Fetch, res.Records[0].Offset)
		}
		for s := 0; s < 210; s += 13 {
			off, err := l.OffsetForTime("t", 0, time.UnixMilli(1_700_000_000_000).Add(time.Duration(s)*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			a.Times = append(a.Times, off)
		}
		return a
	}
	want := ask(l)
	l.Close()
	names, _ := fs.ReadDir("/d/topics/t/0")
	n := 0
	for i, name := range names {
		full := "/d/topics/t/0/" + name
		switch {
		case strings.HasSuffix(name, ".index") && i%2 == 0:
			fs.Remove(full)
			n++
		case strings.HasSuffix(name, ".timeindex") && i%3 == 0:
			fs.Corrupt(full, func(b []byte) []byte { b[len(b)/2] ^= 1; return b })
			n++
		case strings.HasSuffix(name, ".index"):
			fs.Corrupt(full, func(b []byte) []byte { return b[:len(b)-3] })
			n++
		}
	}
	if n < 4 {
		t.Fatalf("only %d index files touched", n)
	}
	l = mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	if d := cmp.Diff(want, ask(l)); d != "" {
		t.Fatalf("answers after index rebuild (-want +got):\n%s", d)
	}
}
