package wal

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// TestReadersWhileAppending: fetches and time lookups running while appends grow the active
// segment's indexes (an index entry every batch) and roll segments read every record once, in
// order, and find the offset of every time. Run under the race detector (make race), it also checks that
// readers never read those indexes while an append writes them.
func TestReadersWhileAppending(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, "/d", memOpts(fs, newClock()))
	defer l.Close()
	cfg := DefaultTopicConfig()
	cfg.IndexIntervalBytes = 1
	cfg.SegmentBytes = 1024 // segments roll while readers read
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	base := time.UnixMilli(1_700_000_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res FetchResult
			for next := int64(0); next < n; {
				if err := l.FetchInto(ctx, "t", 0, next, FetchOptions{MaxBytes: 200, MaxWait: 10 * time.Millisecond}, &res); err != nil {
					errs <- fmt.Errorf("reader %d at %d: %w", r, next, err)
					return
				}
				for _, rec := range res.Records {
					if want := fmt.Sprintf("v%d", next); rec.Offset != next || string(rec.Value) != want {
						errs <- fmt.Errorf("reader %d: offset %d value %q, want offset %d value %q", r, rec.Offset, rec.Value, next, want)
						return
					}
					next++
				}
				if r == 1 && next > 0 {
					at := (next - 1) / 2
					off, err := l.OffsetForTime("t", 0, base.Add(time.Duration(at)*time.Millisecond))
					if err != nil || off != 2*at { // records 2at and 2at+1 carry that time
						errs <- fmt.Errorf("reader %d: offset for the time of record %d: %d (%v), want %d", r, 2*at, off, err, 2*at)
						return
					}
				}
			}
		}()
	}
	for i := range n {
		rec := Record{Key: []byte("k"), Value: []byte(fmt.Sprintf("v%d", i)), Timestamp: base.Add(time.Duration(i/2) * time.Millisecond)}
		if _, err := l.Append(ctx, "t", 0, []Record{rec}, AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCompactionWhileAppending: compactions running while appends grow the active segment's
// indexes (and roll segments) keep the newest record of every key, and under the race
// detector never read the active segment's indexes while an append writes them.
func TestCompactionWhileAppending(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, "/d", memOpts(fs, newClock()))
	defer l.Close()
	cfg := compactConfig()
	cfg.IndexIntervalBytes = 1
	cfg.MinCompactionLag = 0
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	const n, keys = 1500, 10
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := l.Compact(ctx); err != nil {
				done <- err
				return
			}
		}
	}()
	for i := range n {
		rec := Record{Key: []byte(fmt.Sprintf("k%d", i%keys)), Value: []byte(fmt.Sprintf("v%d", i))}
		if _, err := l.Append(ctx, "t", 0, []Record{rec}, AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("compact: %v", err)
	}
	if err := l.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	latest := map[string]string{}
	for _, r := range readAllRecords(t, l, "t", 0) {
		latest[string(r.Key)] = string(r.Value)
	}
	for k := range keys {
		if got, want := latest[fmt.Sprintf("k%d", k)], fmt.Sprintf("v%d", n-keys+k); got != want {
			t.Errorf("key k%d: newest value %q, want %q", k, got, want)
		}
	}
}
