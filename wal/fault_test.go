package wal

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// TestFaultCrashDropsOnlyUnacknowledged crashes an in-memory file system
// (dropping or tearing every unsynced byte, and directory entries not
// fsynced) while several goroutines append, then reopens: every
// acknowledged batch must be there, whole, once, in order.
func TestFaultCrashDropsOnlyUnacknowledged(t *testing.T) {
	iters := crashIterations(t) * 3
	for it := 0; it < iters; it++ {
		rng := rand.New(rand.NewPCG(uint64(it), 7))
		fs := vfs.NewMem()
		clk := newClock()
		var acked []ackedBatch
		var prev [crashParts][]Record
		for round := 0; round < 3; round++ {
			l, err := Open("/d", Options{FS: fs, Clock: clk.now})
			if err != nil {
				t.Fatalf("iteration %d round %d: open: %v", it, round, err)
			}
			if err := l.CreateTopic(crashTopic, crashTopicConfig()); err != nil && !errors.Is(err, ErrTopicExists) {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for g := 0; g < crashAppenders; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(it*100+round), uint64(g)))
					for b := 0; ; b++ {
						select {
						case <-stop:
							return
						default:
						}
						part := int32(r.IntN(crashParts))
						n := 1 + r.IntN(10)
						recs := make([]Record, n)
						id := fmt.Sprintf("%d-%d-%d", round, g, b)
						for i := range recs {
							recs[i] = Record{Key: []byte("k"), Value: fmt.Appendf(nil, "%s/%d/%s", id, i, strings.Repeat("y", r.IntN(2000)))}
						}
						res, err := l.Append(context.Background(), crashTopic, part, recs, AppendOptions{})
						if err != nil {
							return // the crash
						}
						mu.Lock()
						acked = append(acked, ackedBatch{part: part, base: res.BaseOffset, last: res.LastOffset, id: id, n: n})
						mu.Unlock()
					}
				}()
			}
			time.Sleep(time.Duration(1+rng.IntN(15)) * time.Millisecond) // let appends run; the crash point is random
			fs.Crash(vfs.CrashOptions{Tear: it%2 == 1, Rand: rng})
			close(stop)
			wg.Wait()
			l.Close()
			l, err = Open("/d", Options{FS: fs, Clock: clk.now})
			if err != nil {
				t.Fatalf("iteration %d round %d: reopen after crash: %v", it, round, err)
			}
			for p := int32(0); p < crashParts; p++ {
				recs, err := tryReadAll(l, crashTopic, p)
				if err != nil {
					t.Fatalf("iteration %d round %d: read: %v", it, round, err)
				}
				checkCrashPartition(t, it, p, recs, prev[p], acked)
				prev[p] = recs
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFaultFsyncErrorFailsAppend makes fsync fail: the append must return
// the error, nothing of it may become visible, the partition refuses
// further writes, and after a crash and reopen only acknowledged batches
// are in the log.
func TestFaultFsyncErrorFailsAppend(t *testing.T) {
	for _, tear := range []bool{false, true} {
		t.Run(fmt.Sprintf("tear=%v", tear), func(t *testing.T) {
			fs := vfs.NewMem()
			clk := newClock()
			l := mustOpen(t, "/d", memOpts(fs, clk))
			if err := l.CreateTopic("t", DefaultTopicConfig()); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				mustAppend(t, l, "t", 0, []Record{kv("a", fmt.Sprint(i))}, AppendOptions{})
			}
			fs.SetSyncError(func(name string) error {
				if strings.HasSuffix(name, ".log") {
					return syscall.EIO
				}
				return nil
			})
			_, err := l.Append(context.Background(), "t", 0, []Record{kv("a", "lost1"), kv("a", "lost2")}, AppendOptions{})
			if !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrPartitionFailed) {
				t.Fatalf("append with failing fsync: got %v, want EIO and ErrPartitionFailed", err)
			}
			res, err := l.Fetch(context.Background(), "t", 0, 0, FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.HighWatermark != 3 || len(res.Records) != 3 {
				t.Fatalf("after failed fsync: hw %d, %d records; want 3, 3", res.HighWatermark, len(res.Records))
			}
			fs.SetSyncError(nil)
			if _, err := l.Append(context.Background(), "t", 0, []Record{kv("a", "x")}, AppendOptions{}); !errors.Is(err, ErrPartitionFailed) {
				t.Fatalf("append after failure: got %v, want ErrPartitionFailed", err)
			}
			fs.Crash(vfs.CrashOptions{Tear: tear, Rand: rand.New(rand.NewPCG(3, 4))})
			l.Close()
			l = mustOpen(t, "/d", memOpts(fs, clk))
			defer l.Close()
			got := readAllRecords(t, l, "t", 0)
			if len(got) != 3 {
				t.Fatalf("after crash: %d records, want 3 (the failed batch must not appear, whole or in part)", len(got))
			}
			mustAppend(t, l, "t", 0, []Record{kv("a", "after")}, AppendOptions{})
		})
	}
}

// TestReadersNeverSeePastCommitted holds the fsync of an append and checks
// that neither a fetch nor the high watermark shows the batch until the
// fsync completes, and that the append has not returned.
func TestReadersNeverSeePastCommitted(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	if err := l.CreateTopic("t", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "t", 0, []Record{kv("a", "0")}, AppendOptions{})
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	fs.SetSyncError(func(name string) error {
		if strings.HasSuffix(name, ".log") {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	})
	// Runs before the deferred Close, also when the test fails.
	defer func() {
		fs.SetSyncError(nil)
		releaseOnce.Do(func() { close(release) })
	}()
	done := make(chan error, 1)
	go func() {
		_, err := l.Append(context.Background(), "t", 0, []Record{kv("a", "1")}, AppendOptions{})
		done <- err
	}()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("append returned (%v) without fsyncing its segment", err)
	case <-time.After(10 * time.Second):
		t.Fatal("append never fsynced its segment")
	}
	// The batch is written but not durable.
	res, err := l.Fetch(context.Background(), "t", 0, 0, FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.HighWatermark != 1 || len(res.Records) != 1 {
		t.Fatalf("during fsync: hw %d, %d records; want 1, 1", res.HighWatermark, len(res.Records))
	}
	select {
	case err := <-done:
		t.Fatalf("append returned (%v) before its fsync completed", err)
	default:
	}
	releaseOnce.Do(func() { close(release) })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fs.SetSyncError(nil)
	res, err = l.Fetch(context.Background(), "t", 0, 0, FetchOptions{})
	if err != nil || res.HighWatermark != 2 || len(res.Records) != 2 {
		t.Fatalf("after fsync: hw %d, %d records, %v; want 2, 2", res.HighWatermark, len(res.Records), err)
	}
}

// TestGroupCommitSharesFsyncs checks that concurrent appends to a partition
// share fsyncs: many appenders, far fewer fsyncs than appends.
func TestGroupCommitSharesFsyncs(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	if err := l.CreateTopic("t", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	// Slow fsyncs, as on a disk, so that appends queue behind them.
	fs.SetSyncError(func(name string) error {
		if strings.HasSuffix(name, ".log") {
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	})
	before := fs.Syncs()
	const appenders, each = 16, 20
	var wg sync.WaitGroup
	for g := 0; g < appenders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := l.Append(context.Background(), "t", 0, []Record{kv("k", "v")}, AppendOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	syncs := fs.Syncs() - before
	if syncs*2 > appenders*each {
		t.Fatalf("%d fsyncs for %d appends: group commit is not sharing fsyncs", syncs, appenders*each)
	}
	t.Logf("%d fsyncs for %d appends", syncs, appenders*each)
}

// AppendOptions.Written is called once the batch is placed, before it is durable: an append
// whose fsync fails has called it, and an append started from it lands after the batch.
func TestAppendWrittenBeforeDurable(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, "/d", memOpts(fs, newClock()))
	defer l.Close()
	if err := l.CreateTopic("t", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, epoch, err := l.InitProducer(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	// The next append starts from Written, on another goroutine, while the first waits for
	// its fsync; it must land right after the first.
	second := make(chan AppendResult, 1)
	errs := make(chan error, 1)
	first, err := l.Append(ctx, "t", 0, []Record{kv("a", "1"), kv("a", "2")}, AppendOptions{
		ProducerID: id, ProducerEpoch: epoch, BaseSequence: 0,
		Written: func() {
			go func() {
				res, err := l.Append(ctx, "t", 0, []Record{kv("a", "3")}, AppendOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: 2})
				errs <- err
				second <- res
			}()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("append started from Written: %v", err)
	}
	if r := <-second; r.BaseOffset != first.LastOffset+1 {
		t.Fatalf("append started from Written at offset %d, want %d (right after the first)", r.BaseOffset, first.LastOffset+1)
	}
	// A failing fsync: Written was called (the batch was placed) and the append fails.
	fs.SetSyncError(func(name string) error {
		if strings.HasSuffix(name, ".log") {
			return syscall.EIO
		}
		return nil
	})
	called := false
	_, err = l.Append(ctx, "t", 0, []Record{kv("a", "4")}, AppendOptions{Written: func() { called = true }})
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("append with failing fsync: got %v, want EIO", err)
	}
	if !called {
		t.Fatal("Written was not called for a batch that was written before its fsync failed")
	}
}
