package wal

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// TestCompactionCounted: Describe counts a partition's compaction runs and the bytes they
// removed. A partition not due (under min.cleanable.dirty.ratio) is no run; a due run counts
// once, and the bytes it removed are what the partition's size lost; another partition's
// counters stay at zero.
func TestCompactionCounted(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	cfg := compactConfig()
	cfg.MinCleanableDirtyRatio = 0.5
	cfg.Partitions = 2
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	info := func() PartitionInfo {
		t.Helper()
		ti, err := l.Describe("t")
		if err != nil {
			t.Fatal(err)
		}
		if ti.Partitions[1].Compactions != 0 || ti.Partitions[1].CompactedBytes != 0 {
			t.Errorf("the empty partition 1 counts %d compactions, %d bytes", ti.Partitions[1].Compactions, ti.Partitions[1].CompactedBytes)
		}
		return ti.Partitions[0]
	}
	appendKeys := func(from, to int) {
		for i := from; i < to; i++ {
			r := kv(fmt.Sprint("u", i), strings.Repeat("v", 50))
			r.Timestamp = clk.now()
			mustAppend(t, l, "t", 0, []Record{r}, AppendOptions{})
		}
	}
	appendKeys(0, 100)
	appendKeys(0, 50) // half of them updated: due
	before := info()
	if before.Compactions != 0 || before.CompactedBytes != 0 {
		t.Fatalf("before any compaction: %d runs, %d bytes", before.Compactions, before.CompactedBytes)
	}
	if err := l.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	after := info()
	if after.Compactions != 1 {
		t.Errorf("after a due compaction: %d runs, want 1", after.Compactions)
	}
	if removed := before.SizeBytes - after.SizeBytes; removed <= 0 || after.CompactedBytes != removed {
		t.Errorf("compaction removed %d bytes (size %d, then %d), counted %d", removed, before.SizeBytes, after.SizeBytes, after.CompactedBytes)
	}
	// a few more updates: under the dirty ratio, no run
	appendKeys(0, 5)
	clk.advance(time.Minute)
	if err := l.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if again := info(); again.Compactions != 1 || again.CompactedBytes != after.CompactedBytes {
		t.Errorf("a compaction not due counted: %d runs, %d bytes; want 1, %d", again.Compactions, again.CompactedBytes, after.CompactedBytes)
	}
}
