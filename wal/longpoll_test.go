package wal

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// waitParked waits until n long-polls wait on p's high watermark.
func waitParked(t testing.TB, p *partition, n int) {
	t.Helper()
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.parked == n
	})
}

// awaitResult returns the value sent on ch, failing the test if none comes
// within 5 seconds: a woken long-poll returns at once, one left asleep
// waits for its MaxWait of an hour.
func awaitResult[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("a long-poll parked with MaxWait of an hour did not return within 5s of the commit")
		panic("unreachable")
	}
}

// TestLongPollWakesAllParkedReaders parks many readers at the high
// watermark with a MaxWait of an hour: none may wake before a commit (no
// polling), and one commit must wake every one of them.
func TestLongPollWakesAllParkedReaders(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	if err := l.CreateTopic("t", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	p, _ := l.partition("t", 0)
	for round := range 3 {
		const readers = 32
		off := int64(round)
		done := make(chan error, readers)
		for range readers {
			go func() {
				res, err := l.Fetch(ctx, "t", 0, off, FetchOptions{MaxWait: time.Hour})
				if err == nil && (len(res.Records) != 1 || res.Records[0].Offset != off) {
					err = fmt.Errorf("got %d records from %d", len(res.Records), off)
				}
				done <- err
			}()
		}
		waitParked(t, p, readers)
		// Parked readers stay asleep while nothing is committed: a
		// poll loop would show here as wake-ups.
		time.Sleep(100 * time.Millisecond)
		p.mu.Lock()
		woke := p.wakeups
		p.mu.Unlock()
		if woke != round*readers {
			t.Fatalf("round %d: %d wake-ups before any commit, want %d (readers poll)", round, woke-round*readers, 0)
		}
		mustAppend(t, l, "t", 0, []Record{kv("k", fmt.Sprint(round))}, AppendOptions{})
		for range readers {
			if err := awaitResult(t, done); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		p.mu.Lock()
		woke, parked := p.wakeups, p.parked
		p.mu.Unlock()
		if woke != (round+1)*readers || parked != 0 {
			t.Fatalf("round %d: %d wake-ups, %d still parked; want %d and 0 (one wake-up per reader per commit)", round, woke, parked, (round+1)*readers)
		}
	}
}
