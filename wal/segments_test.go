package wal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

const segDir = "/d/topics/t/0"

// writeSegments fills partition t-0 with 60 records over several 1 KiB
// segments and closes the log cleanly. It returns the records and the
// segment bases.
func writeSegments(t *testing.T, fs *vfs.Mem, cfg TopicConfig) ([]Record, []int64) {
	t.Helper()
	clk := newClock()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		mustAppend(t, l, "t", 0, []Record{kv(fmt.Sprint("k", i%7), fmt.Sprint("value-", i, strings.Repeat("x", 80)))}, AppendOptions{})
	}
	recs := readAllRecords(t, l, "t", 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for _, n := range mustReadDir(t, fs, segDir) {
		if b, ok := parseSegmentName(n); ok {
			bases = append(bases, b)
		}
	}
	if len(bases) < 4 {
		t.Fatalf("%d segments, want at least 4", len(bases))
	}
	return recs, bases
}

func removeIndexes(t *testing.T, fs vfs.FS) {
	t.Helper()
	for _, n := range mustReadDir(t, fs, segDir) {
		if strings.HasSuffix(n, ".index") || strings.HasSuffix(n, ".timeindex") || n == cleanMarker {
			if err := fs.Remove(filepath.Join(segDir, n)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestMissingSegmentIsCorruption deletes a middle segment (with its index
// files, as an operator's mistake or a lost directory entry would): the
// open must fail with a CorruptionError naming the segment before the gap,
// whether that segment's end comes from its indexes or from a scan, never
// read on across the hole.
func TestMissingSegmentIsCorruption(t *testing.T) {
	cfg := DefaultTopicConfig()
	cfg.SegmentBytes = 1024
	for _, rebuild := range []bool{false, true} {
		for _, victim := range []int{1, 2} { // a middle segment, the last sealed one
			fs := vfs.NewMem()
			_, bases := writeSegments(t, fs, cfg)
			if victim == 2 {
				victim = len(bases) - 2
			}
			stem := strings.TrimSuffix(segmentName(bases[victim]), ".log")
			for _, ext := range []string{".log", ".index", ".timeindex"} {
				if err := fs.Remove(filepath.Join(segDir, stem+ext)); err != nil {
					t.Fatal(err)
				}
			}
			if rebuild {
				removeIndexes(t, fs)
			}
			_, err := Open("/d", Options{FS: fs})
			var ce *CorruptionError
			prev := filepath.Join(segDir, segmentName(bases[victim-1]))
			if !errors.As(err, &ce) || ce.File != prev {
				t.Fatalf("rebuild=%v, segment %d removed: open returned %v, want a CorruptionError naming %s", rebuild, bases[victim], err, prev)
			}
			want := fmt.Sprintf("segment ends at offset %d but the next segment, %s, starts at %d",
				bases[victim], segmentName(bases[victim+1]), bases[victim+1])
			if ce.Reason != want {
				t.Fatalf("reason %q, want %q", ce.Reason, want)
			}
		}
	}
}

// TestCompactedSegmentsStayContiguous compacts segments whose last records
// are all superseded: each keeps its last batch (emptied), so that the log
// reopens, with its indexes and without them, and reads as before.
func TestCompactedSegmentsStayContiguous(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	cfg := compactConfig()
	cfg.SegmentBytes = 1024
	l := mustOpen(t, "/d", memOpts(fs, clk))
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	// One key rewritten over and over: every sealed batch is superseded.
	for i := range 60 {
		mustAppend(t, l, "t", 0, []Record{kv("k", fmt.Sprint("value-", i, strings.Repeat("x", 80)))}, AppendOptions{})
	}
	if err := l.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := readAllRecords(t, l, "t", 0)
	p, _ := l.partition("t", 0)
	for i, s := range p.segs[:len(p.segs)-1] {
		if s.next != p.segs[i+1].base {
			t.Fatalf("segment %d ends at %d in memory, next starts at %d", s.base, s.next, p.segs[i+1].base)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, rebuild := range []bool{false, true} {
		if rebuild {
			removeIndexes(t, fs)
		}
		l, err := Open("/d", memOpts(fs, clk))
		if err != nil {
			t.Fatalf("rebuild=%v: reopen after compaction: %v", rebuild, err)
		}
		if d := cmp.Diff(want, readAllRecords(t, l, "t", 0)); d != "" {
			t.Fatalf("rebuild=%v: records (-want +got):\n%s", rebuild, d)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStaleIndexWithValidChecksum replaces a sealed segment's offset index
// by a well-formed one (right base, size and checksum) whose last entry
// points at the wrong batch, or into the middle of one: the open must
// notice, rebuild it, and every fetch must start at the offset asked for.
func TestStaleIndexWithValidChecksum(t *testing.T) {
	cfg := DefaultTopicConfig()
	cfg.SegmentBytes = 1024
	cfg.IndexIntervalBytes = 200
	for _, shift := range []string{"wrong batch", "mid batch"} {
		fs := vfs.NewMem()
		want, bases := writeSegments(t, fs, cfg)
		seg := filepath.Join(segDir, segmentName(bases[1]))
		idxPath := strings.TrimSuffix(seg, ".log") + ".index"
		b, err := readFile(fs, idxPath)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := fs.Stat(seg)
		offs, _, err := decodeIndex(b, indexKindOffset, bases[1], st.Size)
		if err != nil || len(offs) < 2 {
			t.Fatalf("index: %v entries, %v", len(offs), err)
		}
		last := &offs[len(offs)-1]
		if shift == "wrong batch" {
			// The entry names the offset before its batch's: a fetch
			// of that offset would start one batch late.
			last.rel--
		} else {
			last.pos += 10
		}
		if err := fs.Corrupt(idxPath, func([]byte) []byte { return encodeIndex(indexKindOffset, bases[1], st.Size, offs, nil) }); err != nil {
			t.Fatal(err)
		}
		l, err := Open("/d", Options{FS: fs})
		if err != nil {
			t.Fatalf("%s: open: %v", shift, err)
		}
		for _, r := range want {
			res, err := l.Fetch(context.Background(), "t", 0, r.Offset, FetchOptions{MaxBytes: 1})
			if err != nil || len(res.Records) == 0 || res.Records[0].Offset != r.Offset {
				first := int64(-1)
				if len(res.Records) > 0 {
					first = res.Records[0].Offset
				}
				t.Fatalf("%s: fetch at %d: %v, first record at %d", shift, r.Offset, err, first)
			}
		}
		l.Close()
	}
}

// TestCreatedTopicSurvivesLostDirectoryEntries crashes a file system that
// loses every directory entry not made durable by an fsync of its parent:
// a topic created, written to and acknowledged must come back whole.
func TestCreatedTopicSurvivesLostDirectoryEntries(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	// The operator's directory exists; the log's is made by Open.
	if err := fs.MkdirAll("/data"); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, "/data/log", memOpts(fs, clk))
	cfg := DefaultTopicConfig()
	cfg.Partitions = 3
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	var want [3][]Record
	for i := range 9 {
		p := int32(i % 3)
		r := kv(fmt.Sprint("k", i), fmt.Sprint("v", i))
		res := mustAppend(t, l, "t", p, []Record{r}, AppendOptions{})
		r.Offset, r.Timestamp = res.BaseOffset, clk.now()
		want[p] = append(want[p], r)
	}
	fs.Crash(vfs.CrashOptions{DropUnsyncedDirs: true})
	l.Close()
	l = mustOpen(t, "/data/log", memOpts(fs, clk))
	defer l.Close()
	info, err := l.Describe("t")
	if err != nil || len(info.Partitions) != 3 {
		t.Fatalf("topic after the crash: %+v, %v", info, err)
	}
	for p := range int32(3) {
		if d := cmp.Diff(want[p], readAllRecords(t, l, "t", p)); d != "" {
			t.Fatalf("partition %d after the crash (-acknowledged +got):\n%s", p, d)
		}
	}
}
