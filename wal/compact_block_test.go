package wal

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// TestCompactionBlocksNeitherAppendsNorReaders holds a compaction at its
// slow steps (the fsync of the rewritten segment, the directory fsync of
// the swap): appends, fetches and time lookups must go on meanwhile.
func TestCompactionBlocksNeitherAppendsNorReaders(t *testing.T) {
	for _, stage := range []string{"cleaned fsync", "swap dir fsync"} {
		t.Run(stage, func(t *testing.T) {
			fs := vfs.NewMem()
			clk := newClock()
			ctx := context.Background()
			l := mustOpen(t, "/d", memOpts(fs, clk))
			defer l.Close()
			if err := l.CreateTopic("t", compactConfig()); err != nil {
				t.Fatal(err)
			}
			writeCompactable(t, l, clk, rand.New(rand.NewPCG(5, 5)))
			before := readAllRecords(t, l, "t", 0)

			held, release := make(chan struct{}), make(chan struct{})
			var once, relOnce sync.Once
			unblock := func() { relOnce.Do(func() { close(release) }) }
			defer unblock()
			var mu sync.Mutex
			cleanedSynced := false
			fs.SetSyncError(func(name string) error {
				mu.Lock()
				hold := false
				switch {
				case strings.HasSuffix(name, ".cleaned"):
					hold = stage == "cleaned fsync"
					cleanedSynced = true
				case name == "/d/topics/t/0" && cleanedSynced:
					hold = stage == "swap dir fsync"
				}
				mu.Unlock()
				if hold {
					once.Do(func() { close(held) })
					<-release
				}
				return nil
			})
			defer fs.SetSyncError(nil)
			compacted := make(chan error, 1)
			go func() { compacted <- l.Compact(ctx) }()
			select {
			case <-held:
			case err := <-compacted:
				t.Fatalf("compaction ended (%v) without reaching the %s", err, stage)
			}

			type result struct {
				recs []Record
				err  error
			}
			done := make(chan result, 1)
			go func() {
				var err error
				for i := range 3 {
					if _, err = l.Append(ctx, "t", 0, []Record{kv(fmt.Sprint("new-", i), "v")}, AppendOptions{}); err != nil {
						break
					}
				}
				var recs []Record
				if err == nil {
					recs, err = tryReadAll(l, "t", 0)
				}
				if err == nil {
					_, err = l.OffsetForTime("t", 0, before[len(before)/2].Timestamp)
				}
				done <- result{recs, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("appends and reads waited for a compaction held at its %s", stage)
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			if got := r.recs[:len(r.recs)-3]; !isCompactionOf(before, got) {
				t.Fatalf("read during compaction: %d records, not the log before it or a compaction of it", len(got))
			}
			unblock()
			if err := <-compacted; err != nil {
				t.Fatal(err)
			}
		})
	}
}
