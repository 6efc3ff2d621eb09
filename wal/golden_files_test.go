package wal

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The cache files (indexes, producer snapshots, the clean-shutdown marker)
// are rebuilt when unreadable, so a change of their format would not fail
// any test that only opens a log. These pin each format directly: the
// encoder must produce the pinned bytes, and the decoder must read them
// back to the pinned values.

func goldenOffsetIndex() []offsetEntry {
	return []offsetEntry{{rel: 0, pos: 0}, {rel: 7, pos: 4100}, {rel: 1 << 30, pos: 1<<31 + 5}}
}

func goldenTimeIndex() []timeEntry {
	return []timeEntry{{ts: 1_700_000_000_000, rel: 0}, {ts: 1_700_000_000_500, rel: 7}, {ts: 1_700_000_009_999, rel: 1<<30 + 2}}
}

func goldenProducers() map[int64]*producerEntry {
	a := &producerEntry{epoch: 3, lastTS: 1_700_000_000_900, n: 2, sourcePos: []byte("mysql-bin.000003:4711")}
	a.recent[0] = batchMeta{firstSeq: 0, lastSeq: 4, firstOffset: 100, lastOffset: 104, timestamp: 1_700_000_000_800}
	a.recent[1] = batchMeta{firstSeq: 5, lastSeq: 5, firstOffset: 230, lastOffset: 230, timestamp: 1_700_000_000_900}
	b := &producerEntry{epoch: 0, lastTS: 1_600_000_000_000, n: 1, sourcePos: nil}
	b.recent[0] = batchMeta{firstSeq: 2147483647, lastSeq: 1, firstOffset: 7, lastOffset: 9, timestamp: 1_600_000_000_000}
	c := &producerEntry{epoch: 1, lastTS: 5, n: 1, sourcePos: []byte{}}
	c.recent[0] = batchMeta{firstSeq: 0, lastSeq: 0, firstOffset: 1, lastOffset: 1, timestamp: 5}
	return map[int64]*producerEntry{42: a, 7: b, 9_000_000_000: c}
}

// checkGolden compares b with the pinned file, rewriting it under -update.
func checkGolden(t *testing.T, name string, b []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pinned, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pinned, b) {
		t.Errorf("%s: the encoder no longer produces the pinned bytes; a format change needs a new version byte", name)
	}
	return pinned
}

func TestGoldenIndexFiles(t *testing.T) {
	const base, covered = 1_000_000, 3 << 30
	b := checkGolden(t, "index-v1.bin", encodeIndex(indexKindOffset, base, covered, goldenOffsetIndex(), nil))
	offs, _, err := decodeIndex(b, indexKindOffset, base, covered)
	if err != nil {
		t.Fatalf("decode offset index: %v", err)
	}
	if d := cmp.Diff(goldenOffsetIndex(), offs, cmp.AllowUnexported(offsetEntry{})); d != "" {
		t.Fatalf("offset index (-want +got):\n%s", d)
	}
	if string(b[:6]) != "SLIX\x01\x01" {
		t.Fatalf("offset index header %q", b[:6])
	}

	b = checkGolden(t, "timeindex-v1.bin", encodeIndex(indexKindTime, base, covered, nil, goldenTimeIndex()))
	_, times, err := decodeIndex(b, indexKindTime, base, covered)
	if err != nil {
		t.Fatalf("decode time index: %v", err)
	}
	if d := cmp.Diff(goldenTimeIndex(), times, cmp.AllowUnexported(timeEntry{})); d != "" {
		t.Fatalf("time index (-want +got):\n%s", d)
	}
	if string(b[:6]) != "SLIX\x01\x02" {
		t.Fatalf("time index header %q", b[:6])
	}
}

func TestGoldenProducerSnapshot(t *testing.T) {
	b := checkGolden(t, "producer-snapshot-v1.bin", encodeSnapshot(231, goldenProducers()))
	off, prods, err := decodeSnapshot(b)
	if err != nil || off != 231 {
		t.Fatalf("decode: offset %d, %v", off, err)
	}
	if d := cmp.Diff(goldenProducers(), prods, cmp.AllowUnexported(producerEntry{}, batchMeta{})); d != "" {
		t.Fatalf("producers (-want +got):\n%s", d)
	}
	if prods[7].sourcePos != nil || prods[9_000_000_000].sourcePos == nil {
		t.Fatal("a missing source position and an empty one are not told apart")
	}
}

func TestGoldenCleanShutdownMarker(t *testing.T) {
	b := checkGolden(t, "clean-shutdown-v1.bin", encodeCleanMarker(4096, 1<<33+17, 1<<40))
	base, size, next, ok := decodeCleanMarker(b)
	if !ok || base != 4096 || size != 1<<33+17 || next != 1<<40 {
		t.Fatalf("decode: %d %d %d %v", base, size, next, ok)
	}
}

// TestGoldenLogCacheFiles decodes every cache file of the pinned log
// directory with its own decoder: opening that log would quietly rebuild
// any of them it could no longer read.
func TestGoldenLogCacheFiles(t *testing.T) {
	seen := map[string]int{}
	err := filepath.WalkDir(goldenLogDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, name := filepath.Dir(path), d.Name()
		segSize := func(stem string) int64 {
			st, err := os.Stat(filepath.Join(dir, stem+".log"))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return st.Size()
		}
		switch {
		case strings.HasSuffix(name, ".timeindex"):
			stem := strings.TrimSuffix(name, ".timeindex")
			base, _ := parseSegmentName(stem + ".log")
			_, times, err := decodeIndex(b, indexKindTime, base, segSize(stem))
			if err != nil || len(times) == 0 {
				t.Errorf("%s: %d entries, %v", path, len(times), err)
			}
			seen["timeindex"]++
		case strings.HasSuffix(name, ".index"):
			stem := strings.TrimSuffix(name, ".index")
			base, _ := parseSegmentName(stem + ".log")
			offs, _, err := decodeIndex(b, indexKindOffset, base, segSize(stem))
			if err != nil || len(offs) == 0 {
				t.Errorf("%s: %d entries, %v", path, len(offs), err)
			}
			seen["index"]++
		case strings.HasSuffix(name, snapshotSuffix):
			want, _ := parseSnapshotName(name)
			off, _, err := decodeSnapshot(b)
			if err != nil || off != want {
				t.Errorf("%s: offset %d, %v", path, off, err)
			}
			seen["snapshot"]++
		case name == cleanMarker:
			if _, _, _, ok := decodeCleanMarker(b); !ok {
				t.Errorf("%s: not a clean-shutdown marker", path)
			}
			seen["marker"]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"index", "timeindex", "snapshot", "marker"} {
		if seen[kind] == 0 {
			t.Errorf("no %s file in %s", kind, goldenLogDir)
		}
	}
}
