package wal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// TestRunEnforcesRetentionAndStops runs the background loop: it must
// delete expired segments on its own and return once its context ends.
func TestRunEnforcesRetentionAndStops(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	opts := memOpts(fs, clk)
	opts.MaintenanceInterval = time.Millisecond
	l := mustOpen(t, "/d", opts)
	defer l.Close()
	cfg := DefaultTopicConfig()
	cfg.SegmentBytes = 1024
	cfg.Retention = time.Minute
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		r := kv("k", strings.Repeat("x", 100))
		r.Timestamp = clk.now()
		mustAppend(t, l, "t", 0, []Record{r}, AppendOptions{})
	}
	clk.advance(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		start, _ := l.EarliestOffset("t", 0)
		if start > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not enforce retention")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
}

func TestDeleteTopic(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	if err := l.CreateTopic("gone", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "gone", 0, []Record{kv("k", "v")}, AppendOptions{})
	if err := l.DeleteTopic("gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), "gone", 0, []Record{kv("k", "v")}, AppendOptions{}); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("append to deleted topic: %v", err)
	}
	if err := l.DeleteTopic(OffsetsTopic); err == nil {
		t.Fatal("deleted an internal topic")
	}
	l.Close()
	l = mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	for _, n := range l.Topics() {
		if n == "gone" {
			t.Fatal("deleted topic back after reopen")
		}
	}
	// The name can be used again, empty.
	if err := l.CreateTopic("gone", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	if hw, _ := l.LatestOffset("gone", 0); hw != 0 {
		t.Fatalf("recreated topic has hw %d", hw)
	}
	// A second process cannot open the same directory.
	if _, err := Open("/d", memOpts(fs, clk)); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
}
