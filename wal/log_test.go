package wal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

func TestAppendFetchReopen(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	l := mustOpen(t, "/data", memOpts(fs, clk))
	cfg := DefaultTopicConfig()
	cfg.Partitions = 2
	cfg.SegmentBytes = 1024
	if err := l.CreateTopic("orders", cfg); err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic("orders", cfg); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("second create: got %v, want ErrTopicExists", err)
	}
	var want []Record
	for i := 0; i < 50; i++ {
		recs := []Record{
			{Key: []byte("k"), Value: []byte(strings.Repeat("v", i)), Headers: []Header{{Key: "h", Value: []byte("x")}}, Timestamp: clk.now()},
			{Key: nil, Value: nil, Timestamp: clk.now()},
		}
		res := mustAppend(t, l, "orders", 1, recs, AppendOptions{})
		if res.BaseOffset != int64(2*i) || res.LastOffset != int64(2*i+1) {
			t.Fatalf("append %d: got offsets %d..%d", i, res.BaseOffset, res.LastOffset)
		}
		for j := range recs {
			r := copyRecord(recs[j])
			r.Offset = res.BaseOffset + int64(j)
			r.Timestamp = time.UnixMilli(clk.now().UnixMilli())
			want = append(want, r)
		}
		clk.advance(time.Second)
	}
	got := readAllRecords(t, l, "orders", 1)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("records (-want +got):\n%s", d)
	}
	info, err := l.Describe("orders")
	if err != nil {
		t.Fatal(err)
	}
	if info.Partitions[1].HighWatermark != 100 || info.Partitions[1].Segments < 2 {
		t.Fatalf("describe: %+v", info.Partitions[1])
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, "/data", memOpts(fs, clk))
	defer l.Close()
	got = readAllRecords(t, l, "orders", 1)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("after reopen (-want +got):\n%s", d)
	}
	if got := readAllRecords(t, l, "orders", 0); len(got) != 0 {
		t.Fatalf("partition 0: %d records", len(got))
	}
	// Offset by time: the record appended at the 10th second is offset 20.
	off, err := l.OffsetForTime("orders", 1, time.UnixMilli(1_700_000_000_000).Add(10*time.Second))
	if err != nil || off != 20 {
		t.Fatalf("offset for time: %d, %v; want 20", off, err)
	}
	off, err = l.OffsetForTime("orders", 1, clk.now().Add(time.Hour))
	if err != nil || off != 100 {
		t.Fatalf("offset for future time: %d, %v; want 100", off, err)
	}
	_, err = l.Fetch(context.Background(), "orders", 1, 101, FetchOptions{})
	var oor *OffsetOutOfRangeError
	if !errors.As(err, &oor) || oor.LogStart != 0 || oor.HighWatermark != 100 {
		t.Fatalf("fetch past end: %v", err)
	}
	if want := "offset 101 out of range for orders-1: valid offsets are 0..100"; err.Error() != want {
		t.Fatalf("error text %q, want %q", err.Error(), want)
	}
}
