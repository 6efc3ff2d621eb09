package wal

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// TestAppendToInternalTopicRefused: Append to the log's own topics fails
// with ErrInternalTopic and writes nothing, so no record that the next Open
// cannot decode gets in; other "__" topics (the runtime's) take appends.
func TestAppendToInternalTopicRefused(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer func() { l.Close() }()
	for _, name := range []string{ProducersTopic, OffsetsTopic} {
		before, _ := l.LatestOffset(name, 0)
		_, err := l.Append(ctx, name, 0, []Record{kv("junk", "not a producer record")}, AppendOptions{})
		if !errors.Is(err, ErrInternalTopic) {
			t.Fatalf("append to %s: %v, want ErrInternalTopic", name, err)
		}
		if want := "append to " + name + ": topic is internal to the log"; err.Error() != want {
			t.Fatalf("append to %s: error %q, want %q", name, err, want)
		}
		if after, _ := l.LatestOffset(name, 0); after != before {
			t.Fatalf("%s: high watermark %d after a refused append, was %d", name, after, before)
		}
		if err := l.DeleteTopic(name); !errors.Is(err, ErrInternalTopic) {
			t.Fatalf("delete %s: %v, want ErrInternalTopic", name, err)
		}
	}
	// The runtime's own topics are ordinary topics to the log.
	for _, name := range []string{"__sluice_source_offsets", "__sluice_store.view", "__sluice_connect_configs"} {
		if err := l.CreateTopic(name, DefaultTopicConfig()); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, l, name, 0, []Record{kv("k", "v")}, AppendOptions{})
	}
	// The log's own writes still work and read back.
	id, _, err := l.InitProducer(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CommitOffsets(ctx, "g", map[TopicPartition]int64{{"t", 0}: 7}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, "/d", memOpts(fs, clk))
	if got, _ := l.FetchOffsets("g"); got[TopicPartition{"t", 0}] != 7 {
		t.Fatalf("offsets after reopen: %v", got)
	}
	if id2, epoch, err := l.InitProducer(ctx, "x"); err != nil || id2 != id || epoch != 1 {
		t.Fatalf("init after reopen: %d %d %v, want %d 1", id2, epoch, err, id)
	}
}

// TestInitProducerDoesNotBlockAppends holds InitProducer's fsync: an
// idempotent append meanwhile, whether to a user topic or (through the
// log's internal path) to ProducersTopic itself, must neither wait for it
// nor deadlock with it. The producer maps' lock is never held while waiting
// for a partition, and never taken under a partition's lock.
func TestInitProducerDoesNotBlockAppends(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	deadlocked := false
	defer func() {
		if !deadlocked { // Close would wait for the deadlocked partition
			l.Close()
		}
	}()
	if err := l.CreateTopic("t", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	id, epoch, err := l.InitProducer(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	fs.SetSyncError(func(name string) error {
		if strings.Contains(name, ProducersTopic) && strings.HasSuffix(name, ".log") {
			once.Do(func() { close(held) })
			<-release
		}
		return nil
	})
	initDone := make(chan error, 1)
	go func() {
		_, _, err := l.InitProducer(ctx, "other")
		initDone <- err
	}()
	<-held // InitProducer's append is waiting for its fsync

	done := make(chan error, 2)
	go func() {
		_, err := l.Append(ctx, "t", 0, []Record{kv("k", "v")}, AppendOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: 0})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("idempotent append during InitProducer: %v", err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("an idempotent append to another topic waited for InitProducer's fsync")
	}
	// The same producer appending to ProducersTopic through the internal
	// path takes that partition's lock, then must not wait for the
	// producer maps, which InitProducer may hold when its fsync returns.
	pp, _ := l.partition(ProducersTopic, 0)
	pp.mu.Lock()
	before := pp.written
	pp.mu.Unlock()
	go func() {
		_, err := l.appendInternal(ctx, ProducersTopic, 0, []Record{ProducerIDRecord("", 1000, 0)},
			AppendOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: 0})
		done <- err
	}()
	// Wait until the append has written its batch (it then waits for the
	// held fsync without the lock) or holds the partition's lock for good.
	waitFor(t, func() bool {
		for range 50 {
			if pp.mu.TryLock() {
				w := pp.written
				pp.mu.Unlock()
				return w > before
			}
			time.Sleep(time.Millisecond)
		}
		return true // held throughout
	})
	close(release)
	for i, ch := range []chan error{initDone, done} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			deadlocked = true
			t.Fatalf("call %d (0 InitProducer, 1 append to %s) deadlocked", i, ProducersTopic)
		}
	}
	fs.SetSyncError(nil)
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRetryWaitsForOriginalFsync holds the fsync of an idempotent batch
// and retries it meanwhile: the retry finds the original in the log, but
// must not be acknowledged before the original is durable.
func TestRetryWaitsForOriginalFsync(t *testing.T) {
	fs := vfs.NewMem()
	clk := newClock()
	ctx := context.Background()
	l := mustOpen(t, "/d", memOpts(fs, clk))
	defer l.Close()
	if err := l.CreateTopic("t", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	id, epoch, err := l.InitProducer(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	fs.SetSyncError(func(name string) error {
		if strings.HasPrefix(name, "/d/topics/t/0/") && strings.HasSuffix(name, ".log") {
			once.Do(func() { close(held) })
			<-release
		}
		return nil
	})
	var relOnce sync.Once
	unblock := func() { relOnce.Do(func() { close(release) }) }
	defer unblock() // before Close, if the test fails with the fsync held
	type result struct {
		res AppendResult
		err error
	}
	recs := []Record{kv("a", "1"), kv("b", "2")}
	opts := AppendOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: 0}
	orig, retry := make(chan result, 1), make(chan result, 1)
	go func() {
		res, err := l.Append(ctx, "t", 0, recs, opts)
		orig <- result{res, err}
	}()
	<-held
	go func() {
		res, err := l.Append(ctx, "t", 0, recs, opts)
		retry <- result{res, err}
	}()
	p, _ := l.partition("t", 0)
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.syncWaiters == 1 || len(retry) > 0
	})
	select {
	case r := <-retry:
		t.Fatalf("the retry returned %+v, %v while the original's fsync was still held", r.res, r.err)
	default:
	}
	p.mu.Lock()
	durable := p.hw
	p.mu.Unlock()
	if durable != 0 {
		t.Fatalf("high watermark %d before the fsync", durable)
	}
	unblock()
	o, r := awaitResult(t, orig), awaitResult(t, retry)
	if o.err != nil || r.err != nil {
		t.Fatalf("original: %v, retry: %v", o.err, r.err)
	}
	if o.res.Duplicate || !r.res.Duplicate || r.res.BaseOffset != o.res.BaseOffset || r.res.LastOffset != o.res.LastOffset {
		t.Fatalf("original %+v, retry %+v: want the retry to be a duplicate of the original", o.res, r.res)
	}
	if hw, _ := l.LatestOffset("t", 0); hw != 2 {
		t.Fatalf("high watermark %d, want 2 (written once)", hw)
	}
}

// TestEncodeRecordsFitsBound: a batch is encoded in the room recordsBound
// reserves, without growing its buffer, whatever its keys, values,
// headers and timestamps.
func TestEncodeRecordsFitsBound(t *testing.T) {
	big := strings.Repeat("v", 70000)
	cases := [][]Record{
		{{}},
		{{Key: []byte("k"), Value: []byte("v")}},
		{{Key: []byte(big), Value: []byte(big), Headers: []Header{{Key: big, Value: []byte(big)}, {Key: "n"}}}},
		{{Timestamp: time.UnixMilli(1)}, {Timestamp: time.UnixMilli(1 << 60)}, {Timestamp: time.UnixMilli(-1 << 60)}},
	}
	var many []Record
	for i := range 3000 {
		many = append(many, Record{Key: []byte(strings.Repeat("k", i%300)), Value: []byte(strings.Repeat("v", i)), Headers: []Header{{Key: "h", Value: []byte("1")}}})
	}
	cases = append(cases, many)
	for i, recs := range cases {
		for _, sp := range [][]byte{nil, []byte("position")} {
			var bb batchBuilder
			bb.encodeRecords(recs, sp, sp != nil, time.Now().UnixMilli(), Uncompressed)
			want := batchFixedHeader + len(sp) + recordsBound(recs)
			if cap(bb.buf) != want || len(bb.buf) > want {
				t.Errorf("case %d: %d bytes in a buffer of %d, want room for %d reserved at once", i, len(bb.buf), cap(bb.buf), want)
			}
			if _, _, err := DecodeBatch(bb.finish(&batchHeader{lastOffsetDelta: int32(len(recs) - 1), recordCount: int32(len(recs))}), nil); err != nil {
				t.Errorf("case %d: %v", i, err)
			}
		}
	}
}
