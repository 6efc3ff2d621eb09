package wal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

func TestIdempotentProducer(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	if err := l.CreateTopic("t", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	id, epoch, err := l.InitProducer(ctx, "source-1")
	if err != nil || epoch != 0 {
		t.Fatalf("init: %d %d %v", id, epoch, err)
	}
	opts := func(seq int32, pos string) AppendOptions {
		return AppendOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq, SourcePosition: []byte(pos)}
	}
	r1 := mustAppend(t, l, "t", 0, []Record{kv("a", "1"), kv("b", "2")}, opts(0, "p1"))
	r2 := mustAppend(t, l, "t", 0, []Record{kv("c", "3")}, opts(2, "p2"))
	// A retry of either returns the original offsets and writes nothing.
	for _, c := range []struct {
		seq  int32
		n    int
		want AppendResult
	}{{0, 2, r1}, {2, 1, r2}} {
		recs := make([]Record, c.n)
		for i := range recs {
			recs[i] = kv("dup", "dup")
		}
		got := mustAppend(t, l, "t", 0, recs, opts(c.seq, "px"))
		if !got.Duplicate || got.BaseOffset != c.want.BaseOffset || got.LastOffset != c.want.LastOffset {
			t.Fatalf("retry of seq %d: %+v, want duplicate of %+v", c.seq, got, c.want)
		}
	}
	if hw, _ := l.LatestOffset("t", 0); hw != 3 {
		t.Fatalf("hw %d after retries, want 3", hw)
	}
	// A gap is refused.
	if _, err := l.Append(ctx, "t", 0, []Record{kv("d", "4")}, opts(7, "p")); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap: %v, want ErrOutOfOrderSequence", err)
	}
	// State survives a crash (no clean close, no snapshot) and a clean
	// reopen alike.
	for _, crash := range []bool{true, false} {
		if crash {
			fs.Crash(vfs.CrashOptions{})
			l.Close()
		} else {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
		l = mustOpen(t, "/d", memOpts(fs, clk))
		ps, ok := l.ProducerState("t", 0, id)
		if !ok || ps.Epoch != 0 || ps.LastSequence != 2 || ps.LastOffset != 2 || string(ps.SourcePosition) != "p2" {
			t.Fatalf("crash=%v: producer state %+v %v", crash, ps, ok)
		}
		got := mustAppend(t, l, "t", 0, []Record{kv("c", "3")}, opts(2, "p2"))
		if !got.Duplicate || got.BaseOffset != 2 {
			t.Fatalf("crash=%v: retry after reopen: %+v", crash, got)
		}
	}
	// A new epoch for the same transactional id fences the old one.
	id2, epoch2, err := l.InitProducer(ctx, "source-1")
	if err != nil || id2 != id || epoch2 != 1 {
		t.Fatalf("re-init: %d %d %v, want %d 1", id2, epoch2, err, id)
	}
	if _, err := l.Append(ctx, "t", 0, []Record{kv("z", "z")}, opts(3, "old")); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("old epoch: %v, want ErrProducerFenced", err)
	}
	// The new epoch starts at sequence 0.
	if _, err := l.Append(ctx, "t", 0, []Record{kv("z", "z")}, AppendOptions{ProducerID: id, ProducerEpoch: 1, BaseSequence: 5}); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("new epoch at seq 5: %v, want ErrOutOfOrderSequence", err)
	}
	mustAppend(t, l, "t", 0, []Record{kv("z", "z")}, AppendOptions{ProducerID: id, ProducerEpoch: 1, BaseSequence: 0})
	// Fencing and ids survive a reopen.
	l.Close()
	l = mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	if _, err := l.Append(ctx, "t", 1-1, []Record{kv("z", "z")}, opts(9, "old")); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("old epoch after reopen: %v, want ErrProducerFenced", err)
	}
	other, _, err := l.InitProducer(ctx, "")
	if err != nil || other <= id {
		t.Fatalf("anonymous producer id %d (%v), want > %d", other, err, id)
	}
}

// TestCompactionKeepsProducerState compacts away every record of a
// producer's last batch: its sequence and source position must still be
// found, even with the producer snapshots deleted.
func TestCompactionKeepsProducerState(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	cfg := DefaultTopicConfig()
	cfg.Delete, cfg.Compact = false, true
	cfg.SegmentBytes = 1024
	cfg.MinCleanableDirtyRatio = 0
	if err := l.CreateTopic("t", cfg); err != nil {
		t.Fatal(err)
	}
	id, _, err := l.InitProducer(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "t", 0, []Record{kv("k", "old")}, AppendOptions{ProducerID: id, BaseSequence: 0, SourcePosition: []byte("lsn-1")})
	// Another writer overwrites the key and rolls segments.
	for i := 0; i < 30; i++ {
		mustAppend(t, l, "t", 0, []Record{kv("k", strings.Repeat("n", 100))}, AppendOptions{})
	}
	if err := l.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	recs := readAllRecords(t, l, "t", 0)
	for _, r := range recs {
		if string(r.Value) == "old" {
			t.Fatalf("the overwritten record survived compaction")
		}
	}
	l.Close()
	names, _ := fs.ReadDir("/d/topics/t/0")
	for _, n := range names {
		if strings.HasSuffix(n, snapshotSuffix) {
			fs.Remove("/d/topics/t/0/" + n)
		}
	}
	l = mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	ps, ok := l.ProducerState("t", 0, id)
	if !ok || string(ps.SourcePosition) != "lsn-1" || ps.LastSequence != 0 || ps.LastOffset != 0 {
		t.Fatalf("producer state after compaction and reopen: %+v %v", ps, ok)
	}
	got := mustAppend(t, l, "t", 0, []Record{kv("k", "old")}, AppendOptions{ProducerID: id, BaseSequence: 0})
	if !got.Duplicate || got.BaseOffset != 0 {
		t.Fatalf("retry after compaction: %+v", got)
	}
}

func TestConsumerOffsets(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	want := map[TopicPartition]int64{{"a", 0}: 10, {"a", 1}: 7, {"b", 0}: 99}
	if err := l.CommitOffsets(ctx, "g1", want); err != nil {
		t.Fatal(err)
	}
	if err := l.CommitOffsets(ctx, "g1", map[TopicPartition]int64{{"a", 0}: 11}); err != nil {
		t.Fatal(err)
	}
	if err := l.CommitOffsets(ctx, "g2", map[TopicPartition]int64{{"a", 0}: 1}); err != nil {
		t.Fatal(err)
	}
	want[TopicPartition{"a", 0}] = 11
	// Crash without a clean close: commits were durable on return.
	fs.Crash(vfs.CrashOptions{})
	l.Close()
	l = mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	got, err := l.FetchOffsets("g1")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("g1 offsets after crash: %v, want %v", got, want)
	}
	if got, _ := l.FetchOffsets("g2"); got[TopicPartition{"a", 0}] != 1 || len(got) != 1 {
		t.Fatalf("g2 offsets: %v", got)
	}
	if got, _ := l.FetchOffsets("none"); len(got) != 0 {
		t.Fatalf("unknown group: %v", got)
	}
}

func TestLongPoll(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	if err := l.CreateTopic("t", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res FetchResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := l.Fetch(ctx, "t", 0, 0, FetchOptions{MaxWait: time.Hour})
		done <- result{res, err}
	}()
	p, _ := l.partition("t", 0)
	waitParked(t, p, 1)
	mustAppend(t, l, "t", 0, []Record{kv("k", "v")}, AppendOptions{})
	r := awaitResult(t, done)
	if r.err != nil || len(r.res.Records) != 1 || string(r.res.Records[0].Value) != "v" {
		t.Fatalf("long poll: %+v %v", r.res, r.err)
	}
	// Cancellation ends the wait.
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := l.Fetch(cctx, "t", 0, 1, FetchOptions{MaxWait: time.Hour})
		done <- result{err: err}
	}()
	waitParked(t, p, 1)
	cancel()
	if r := awaitResult(t, done); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled long poll: %v", r.err)
	}
	// Close ends the wait too.
	go func() {
		_, err := l.Fetch(ctx, "t", 0, 1, FetchOptions{MaxWait: time.Hour})
		done <- result{err: err}
	}()
	waitParked(t, p, 1)
	l.Close()
	if r := awaitResult(t, done); !errors.Is(r.err, ErrClosed) {
		t.Fatalf("long poll across close: %v", r.err)
	}
}

// TestConcurrentCommitsKeepLastInLog commits offsets of one group from many
// goroutines at once: after a reopen the cached value must be the one the
// log holds last, as before it.
func TestConcurrentCommitsKeepLastInLog(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	tp := TopicPartition{"a", 0}
	done := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func() {
			var err error
			for i := 0; i < 20 && err == nil; i++ {
				err = l.CommitOffsets(ctx, "g", map[TopicPartition]int64{tp: int64(g*100 + i)})
			}
			done <- err
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	before, _ := l.FetchOffsets("g")
	l.Close()
	l = mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	after, _ := l.FetchOffsets("g")
	if before[tp] != after[tp] {
		t.Fatalf("offset before reopen %d, after %d: the cache disagreed with the log", before[tp], after[tp])
	}
}
