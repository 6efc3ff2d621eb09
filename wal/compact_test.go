package wal

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

func compactConfig() TopicConfig {
	cfg := DefaultTopicConfig()
	cfg.Delete, cfg.Compact = false, true
	cfg.SegmentBytes = 2048
	cfg.IndexIntervalBytes = 256
	cfg.MinCleanableDirtyRatio = 0
	cfg.DeleteRetention = time.Hour
	return cfg
}

// latestPerKey is the expected content of a fully compacted log: the last
// record of each key, in offset order, tombstones included.
func latestPerKey(all []Record) []Record {
	last := map[string]int{}
	for i, r := range all {
		last[string(r.Key)] = i
	}
	var out []Record
	for i, r := range all {
		if last[string(r.Key)] == i {
			out = append(out, r)
		}
	}
	return out
}

func withoutTombstones(rs []Record) []Record {
	var out []Record
	for _, r := range rs {
		if r.Value != nil {
			out = append(out, r)
		}
	}
	return out
}

// writeCompactable appends updates and deletes of 30 keys, then unique
// filler records so that all of them end up in sealed segments.
func writeCompactable(t *testing.T, l *Log, clk *fakeClock, rng *rand.Rand) []Record {
	return writeCompactableBatches(t, l, clk, rng, 1)
}

// writeCompactableBatches is writeCompactable with batches of 1 to
// maxBatch records, so that compaction keeps parts of batches.
func writeCompactableBatches(t *testing.T, l *Log, clk *fakeClock, rng *rand.Rand, maxBatch int) []Record {
	var all []Record
	for i := 0; i < 400; {
		n := min(1+rng.IntN(maxBatch), 400-i)
		recs := make([]Record, n)
		for j := range recs {
			r := kv(fmt.Sprint("key-", rng.IntN(30)), fmt.Sprint("v", i+j, strings.Repeat("x", rng.IntN(40))))
			if rng.IntN(6) == 0 {
				r.Value = nil
			}
			r.Timestamp = clk.now()
			recs[j] = r
		}
		res := mustAppend(t, l, "t", 0, recs, AppendOptions{})
		for j, r := range recs {
			r.Offset = res.BaseOffset + int64(j)
			r.Timestamp = time.UnixMilli(r.Timestamp.UnixMilli())
			all = append(all, r)
		}
		i += n
		clk.advance(time.Millisecond)
	}
	for i := 0; i < 30; i++ {
		r := kv(fmt.Sprint("filler-", i), strings.Repeat("f", 100))
		r.Timestamp = clk.now()
		res := mustAppend(t, l, "t", 0, []Record{r}, AppendOptions{})
		r.Offset = res.BaseOffset
		r.Timestamp = time.UnixMilli(r.Timestamp.UnixMilli())
		all = append(all, r)
	}
	return all
}

// TestCompaction: reading a compacted topic from offset 0 yields the latest
// value of each key (in sealed segments) plus the tombstones still within
// delete.retention.ms, at their original offsets; the active segment is
// untouched; after the retention, tombstones are gone.
func TestCompaction(t *testing.T) {
	for _, maxBatch := range []int{1, 6} {
		t.Run(fmt.Sprint("batches of up to ", maxBatch), func(t *testing.T) { testCompaction(t, maxBatch, Uncompressed) })
	}
	// Compressed batches are inflated, filtered and compressed again.
	for _, codec := range allCodecs[1:] {
		t.Run(fmt.Sprint("batches of up to 6, ", codec), func(t *testing.T) { testCompaction(t, 6, codec) })
	}
}

// testCompaction is TestCompaction with batches of up to maxBatch records:
// with more than one, compaction rewrites batches keeping some of their
// records.
func testCompaction(t *testing.T, maxBatch int, codec Compression) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer func() { l.Close() }()
	cfg := compactConfig()
	cfg.Compression = codec
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	all := writeCompactableBatches(t, l, clk, rand.New(rand.NewPCG(1, 1)), maxBatch)
	p, _ := l.partition("t", 0)
	active := p.active().base

	// The expected view: records in sealed segments compacted, records of
	// the active segment all kept.
	expect := func(dropTombstones bool) []Record {
		var sealed []Record
		var act []Record
		for _, r := range all {
			if r.Offset < active {
				sealed = append(sealed, r)
			} else {
				act = append(act, r)
			}
		}
		newer := map[string]bool{}
		for _, r := range act {
			newer[string(r.Key)] = true
		}
		var out []Record
		for _, r := range latestPerKey(sealed) {
			if newer[string(r.Key)] || (dropTombstones && r.Value == nil) {
				continue
			}
			out = append(out, r)
		}
		return append(out, act...)
	}
	if err := l.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	got := readAllRecords(t, l, "t", 0)
	if d := cmp.Diff(expect(false), got); d != "" {
		t.Fatalf("after compaction (-want +got):\n%s", d)
	}
	if codec != Uncompressed {
		checkStoredCodecs(t, l, "t", 0, codec) // the batches compaction rewrote are compressed again
	}
	// Still there within delete.retention.ms, and across a reopen.
	clk.advance(30 * time.Minute)
	if err := l.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = mustOpen(t, "/d", memOpts(fs, clk))
	got = readAllRecords(t, l, "t", 0)
	if d := cmp.Diff(expect(false), got); d != "" {
		t.Fatalf("within delete.retention.ms (-want +got):\n%s", d)
	}
	// Past it, the tombstones go.
	clk.advance(31 * time.Minute)
	if err := l.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	got = readAllRecords(t, l, "t", 0)
	if d := cmp.Diff(expect(true), got); d != "" {
		t.Fatalf("after delete.retention.ms (-want +got):\n%s", d)
	}
	// Fetching from a compacted-away offset starts at the next record.
	res, err := l.Fetch(ctx, "t", 0, 1, FetchOptions{})
	if err != nil || len(res.Records) == 0 || res.Records[0].Offset != got[0].Offset && got[0].Offset > 1 {
		t.Fatalf("fetch from 1: %v %v", res.Records, err)
	}
}

// TestCompactionCrashSafe fails the file system at each durable step of a
// compaction, crashes, and reopens: the log must read either as before the
// compaction or as after it, never anything else, and never an error.
func TestCompactionCrashSafe(t *testing.T) {
	ctx := context.Background()
	// Every crash point of the first segments' swaps (each swap repeats
	// the same steps), then a sample of the rest.
	for step := 0; ; step = nextStep(step) {
		fs := vfs.NewMem()
		clk := newClock()
		l := mustOpen(t, "/d", memOpts(fs, clk))
		if err := l.CreateTopic("t", compactConfig()); err != nil {
			t.Fatal(err)
		}
		writeCompactable(t, l, clk, rand.New(rand.NewPCG(2, 2)))
		before := readAllRecords(t, l, "t", 0)
		n := 0
		fs.SetSyncError(func(string) error {
			n++
			if n == step+1 {
				return syscall.EIO
			}
			return nil
		})
		cerr := l.Compact(ctx)
		fs.SetSyncError(nil)
		triggered := n > step
		finished := cerr == nil
		var after []Record
		if finished {
			after = readAllRecords(t, l, "t", 0)
		}
		fs.Crash(vfs.CrashOptions{})
		l.Close()
		l, err := Open("/d", memOpts(fs, clk))
		if err != nil {
			t.Fatalf("step %d: reopen: %v", step, err)
		}
		got := readAllRecords(t, l, "t", 0)
		if finished {
			if d := cmp.Diff(after, got); d != "" {
				t.Fatalf("step %d: completed compaction not durable (-want +got):\n%s", step, d)
			}
		} else if !isCompactionOf(before, got) {
			t.Fatalf("step %d: log after crash mid-compaction is not a valid compaction of the original", step)
		}
		// A second compaction after recovery gives the full result.
		if err := l.Compact(ctx); err != nil {
			t.Fatalf("step %d: compact after recovery: %v", step, err)
		}
		l.Close()
		if !triggered {
			t.Logf("compaction takes fewer than %d fsyncs; crashes after them checked", step)
			return
		}
	}
}

func nextStep(s int) int {
	if s < 35 {
		return s + 1
	}
	return s + 5
}

// isCompactionOf reports whether got is before with some records removed,
// each removed one being superseded by a later record of its key (no
// tombstone may expire: callers keep the clock within delete.retention.ms).
func isCompactionOf(before, got []Record) bool {
	last := map[string]int64{}
	for _, r := range before {
		last[string(r.Key)] = r.Offset
	}
	j := 0
	for _, r := range before {
		if j < len(got) && got[j].Offset == r.Offset {
			if !cmp.Equal(r, got[j]) {
				return false
			}
			j++
			continue
		}
		if last[string(r.Key)] == r.Offset {
			return false // the latest record of a key (value or tombstone) was lost
		}
	}
	return j == len(got)
}

func TestRetention(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	cfg := DefaultTopicConfig()
	cfg.SegmentBytes = 1024
	cfg.Retention = time.Hour
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		r := kv("k", strings.Repeat("x", 100))
		r.Timestamp = clk.now()
		mustAppend(t, l, "t", 0, []Record{r}, AppendOptions{})
		clk.advance(time.Minute)
	}
	// Now is 100 minutes after the first record: records older than an
	// hour are in segments that must go, whole segments only.
	if err := l.EnforceRetention(ctx); err != nil {
		t.Fatal(err)
	}
	info, _ := l.Describe("t")
	start := info.Partitions[0].LogStartOffset
	if start == 0 || start > 40 {
		t.Fatalf("log start %d after time retention, want in 1..40", start)
	}
	recs := readAllRecords(t, l, "t", 0)
	if recs[0].Offset != start || recs[len(recs)-1].Offset != 99 {
		t.Fatalf("records %d..%d, want %d..99", recs[0].Offset, recs[len(recs)-1].Offset, start)
	}
	if _, err := l.Fetch(ctx, "t", 0, 0, FetchOptions{}); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("fetch below log start: %v", err)
	}
	// Size retention.
	p, _ := l.partition("t", 0)
	p.cfg.RetentionBytes = 2048
	if err := l.EnforceRetention(ctx); err != nil {
		t.Fatal(err)
	}
	info, _ = l.Describe("t")
	if sz := info.Partitions[0].SizeBytes; sz > 2048+1024 {
		t.Fatalf("size %d after size retention of 2048", sz)
	}
	// The active segment always stays.
	p.cfg.RetentionBytes = 0
	clk.advance(24 * time.Hour)
	if err := l.EnforceRetention(ctx); err != nil {
		t.Fatal(err)
	}
	info, _ = l.Describe("t")
	if info.Partitions[0].Segments != 1 || info.Partitions[0].HighWatermark != 100 {
		t.Fatalf("after full retention: %+v", info.Partitions[0])
	}
	// The deletion is durable.
	l.Close()
	l2 := mustOpen(t, "/d", memOpts(fs, clk))
	defer l2.Close()
	info2, _ := l2.Describe("t")
	if info2.Partitions[0].LogStartOffset != info.Partitions[0].LogStartOffset {
		t.Fatalf("log start after reopen %d, want %d", info2.Partitions[0].LogStartOffset, info.Partitions[0].LogStartOffset)
	}
}

// TestCompactionTriggers: records younger than min.compaction.lag.ms are
// never compacted; a partition whose dirty share is under
// min.cleanable.dirty.ratio is left alone until its oldest dirty record is
// older than max.compaction.lag.ms.
func TestCompactionTriggers(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	cfg := compactConfig()
	cfg.MinCleanableDirtyRatio = 0.5
	cfg.MaxCompactionLag = time.Hour
	cfg.MinCompactionLag = 10 * time.Minute
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	appendKeys := func(from, to int) {
		for i := from; i < to; i++ {
			r := kv(fmt.Sprint("u", i), strings.Repeat("v", 50))
			r.Timestamp = clk.now()
			mustAppend(t, l, "t", 0, []Record{r}, AppendOptions{})
		}
	}
	count := func() int { return len(readAllRecords(t, l, "t", 0)) }
	p, _ := l.partition("t", 0)
	compact := func() {
		if _, err := p.compact(ctx); err != nil {
			t.Fatal(err)
		}
	}
	appendKeys(0, 100) // unique keys
	appendKeys(0, 5)   // 5 updates
	compact()
	if n := count(); n != 105 {
		t.Fatalf("compacted records younger than min.compaction.lag.ms: %d left, want 105", n)
	}
	clk.advance(11 * time.Minute)
	compact() // all dirty, old enough
	if n := count(); n != 100 {
		t.Fatalf("after compaction %d records, want 100", n)
	}
	// 30 more updates: a small dirty share, under the ratio.
	appendKeys(0, 30)
	clk.advance(11 * time.Minute)
	compact()
	if n := count(); n != 130 {
		t.Fatalf("compacted below min.cleanable.dirty.ratio: %d records, want 130", n)
	}
	// Past max.compaction.lag.ms it runs anyway.
	clk.advance(time.Hour)
	compact()
	if n := count(); n >= 130 {
		t.Fatalf("max.compaction.lag.ms did not force compaction: %d records", n)
	}
}

// TestSegmentAgeRolls rolls the active segment once segment.ms has passed,
// so that retention can reach old records even on a quiet partition.
func TestSegmentAgeRolls(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer func() { l.Close() }()
	cfg := DefaultTopicConfig()
	cfg.SegmentAge = time.Minute
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "t", 0, []Record{kv("a", "1")}, AppendOptions{})
	mustAppend(t, l, "t", 0, []Record{kv("a", "2")}, AppendOptions{})
	clk.advance(2 * time.Minute)
	mustAppend(t, l, "t", 0, []Record{kv("a", "3")}, AppendOptions{})
	info, _ := l.Describe("t")
	if info.Partitions[0].Segments != 2 {
		t.Fatalf("%d segments after segment.ms passed, want 2", info.Partitions[0].Segments)
	}
	// A reopen does not restart the segment's clock: it counts from the
	// first batch of the active segment, after a clean close or a crash.
	for i, crash := range []bool{false, true} {
		clk.advance(30 * time.Second)
		mustAppend(t, l, "t", 0, []Record{kv("a", "4")}, AppendOptions{})
		if crash {
			fs.Crash(vfs.CrashOptions{})
			l.Close()
		} else if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		clk.advance(40 * time.Second)
		l = mustOpen(t, "/d", memOpts(fs, clk))
		mustAppend(t, l, "t", 0, []Record{kv("a", "5")}, AppendOptions{})
		info, _ = l.Describe("t")
		if want := 3 + i; info.Partitions[0].Segments != want {
			t.Fatalf("crash=%v: %d segments after segment.ms passed across a reopen, want %d", crash, info.Partitions[0].Segments, want)
		}
	}
}
