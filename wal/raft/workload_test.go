package raft

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

// The workload of the fault tests: writers append batches of uniquely
// named records through idempotent producers, retrying each batch with
// the same sequence until it is acknowledged, and record every
// acknowledgement; readers follow each partition and record every record
// they see. The checks at the end: every replica holds the same records
// at the same offsets, every acknowledged record is there exactly once at
// its acknowledged offset, no record is there twice, every record a
// reader saw is still there, and no two nodes acknowledged writes in the
// same term of a partition.

type appendFunc func(ctx context.Context, topic string, part int32, recs []wal.Record, opts wal.AppendOptions) (wal.AppendResult, AppendInfo, error)
type fetchFunc func(ctx context.Context, topic string, part int32, offset int64) (wal.FetchResult, error)
type initFunc func(ctx context.Context, txn string) (int64, int16, error)

type ackRec struct {
	part   int32
	offset int64
	term   uint64
	node   uint64
}

type workload struct {
	t     testing.TB
	topic string
	parts int32

	mu          sync.Mutex
	acked       map[string]ackRec
	maybe       map[string]bool
	seen        map[int32]map[int64]string
	termNode    map[[2]uint64]uint64 // (partition, term) → node that acknowledged in it
	violations  []string
	acks        atomic.Int64
	lastAck     atomic.Int64 // unix nanoseconds
	appendErrs  atomic.Int64
	outOfRanges atomic.Int64
	wg          sync.WaitGroup
}

func newWorkload(t testing.TB, topic string, parts int32) *workload {
	w := &workload{t: t, topic: topic, parts: parts, acked: map[string]ackRec{}, maybe: map[string]bool{},
		seen: map[int32]map[int64]string{}, termNode: map[[2]uint64]uint64{}}
	for p := int32(0); p < parts; p++ {
		w.seen[p] = map[int64]string{}
	}
	return w
}

func (w *workload) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) < 50 {
		w.violations = append(w.violations, fmt.Sprintf(format, args...))
	}
}

// start runs writers and one reader per partition until ctx ends.
func (w *workload) start(ctx context.Context, writers int, app appendFunc, init initFunc, fetch fetchFunc) {
	for g := 0; g < writers; g++ {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.writer(ctx, g, app, init)
		}()
	}
	for p := int32(0); p < w.parts; p++ {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.reader(ctx, p, fetch)
		}()
	}
}

func (w *workload) wait() { w.wg.Wait() }

func (w *workload) writer(ctx context.Context, g int, app appendFunc, init initFunc) {
	var id int64
	var epoch int16
	for {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		id, epoch, err = init(ictx, fmt.Sprint("writer-", g))
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
	seq := map[int32]int32{}
	for n := 0; ctx.Err() == nil; n++ {
		part := int32(r.IntN(int(w.parts)))
		k := 1 + r.IntN(3)
		recs := make([]wal.Record, k)
		for i := range recs {
			recs[i] = wal.Record{Key: []byte(fmt.Sprint("w", g)), Value: []byte(fmt.Sprintf("w%d-%d-%d", g, n, i))}
		}
		opts := wal.AppendOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq[part]}
		for {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			res, info, err := app(actx, w.topic, part, recs, opts)
			cancel()
			if err == nil {
				w.ack(part, recs, res, info)
				seq[part] += int32(k)
				break
			}
			w.appendErrs.Add(1)
			if errors.Is(err, wal.ErrOutOfOrderSequence) || errors.Is(err, wal.ErrProducerFenced) {
				w.violate("writer %d batch %d: %v", g, n, err)
			}
			if ctx.Err() != nil {
				w.mu.Lock()
				for _, rec := range recs {
					w.maybe[string(rec.Value)] = true
				}
				w.mu.Unlock()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (w *workload) ack(part int32, recs []wal.Record, res wal.AppendResult, info AppendInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if int(res.LastOffset-res.BaseOffset)+1 != len(recs) {
		w.violations = append(w.violations, fmt.Sprintf("ack of %d records spans offsets %d..%d", len(recs), res.BaseOffset, res.LastOffset))
	}
	for i, rec := range recs {
		v := string(rec.Value)
		if prev, ok := w.acked[v]; ok {
			w.violations = append(w.violations, fmt.Sprintf("%s acknowledged twice (%+v)", v, prev))
		}
		w.acked[v] = ackRec{part: part, offset: res.BaseOffset + int64(i), term: info.Term, node: info.Node}
	}
	if info.Term != 0 {
		k := [2]uint64{uint64(part), info.Term}
		if n, ok := w.termNode[k]; ok && n != info.Node {
			w.violations = append(w.violations, fmt.Sprintf("partition %d term %d: writes acknowledged by node %d and node %d", part, info.Term, n, info.Node))
		}
		w.termNode[k] = info.Node
	}
	w.acks.Add(1)
	w.lastAck.Store(time.Now().UnixNano())
}

func (w *workload) reader(ctx context.Context, part int32, fetch fetchFunc) {
	var off int64
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		res, err := fetch(fctx, w.topic, part, off)
		cancel()
		if err != nil {
			if errors.Is(err, wal.ErrOffsetOutOfRange) {
				// A deposed leader still answering with its older end.
				w.outOfRanges.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		w.mu.Lock()
		for _, r := range res.Records {
			v := string(r.Value)
			if prev, ok := w.seen[part][r.Offset]; ok && prev != v {
				w.violations = append(w.violations, fmt.Sprintf("partition %d offset %d read as %q, then as %q", part, r.Offset, prev, v))
			}
			w.seen[part][r.Offset] = v
		}
		w.mu.Unlock()
		if res.NextOffset > off {
			off = res.NextOffset
		}
	}
}

type logRec struct {
	Offset int64
	Value  string
}

// check compares the replicas' final logs (node → partition → records)
// with what was acknowledged and seen.
func (w *workload) check(logs map[uint64]map[int32][]logRec) {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []uint64
	for id := range logs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	ref := logs[ids[0]]
	for _, id := range ids[1:] {
		for p := int32(0); p < w.parts; p++ {
			a, b := ref[p], logs[id][p]
			if len(a) != len(b) {
				w.t.Errorf("partition %d: node %d holds %d records, node %d holds %d", p, ids[0], len(a), id, len(b))
			}
			for i := 0; i < min(len(a), len(b)); i++ {
				if a[i] != b[i] {
					w.t.Errorf("partition %d record %d: node %d has %+v, node %d has %+v", p, i, ids[0], a[i], id, b[i])
					break
				}
			}
		}
	}
	where := map[string][]ackRec{}
	for p, recs := range ref {
		prev := int64(-1)
		for _, r := range recs {
			if r.Offset <= prev {
				w.t.Errorf("partition %d: offset %d after %d", p, r.Offset, prev)
			}
			prev = r.Offset
			where[r.Value] = append(where[r.Value], ackRec{part: p, offset: r.Offset})
		}
	}
	missing, moved, dup := 0, 0, 0
	for v, a := range w.acked {
		got := where[v]
		switch {
		case len(got) == 0:
			missing++
			if missing <= 5 {
				w.t.Errorf("acknowledged %s (partition %d offset %d, term %d, node %d) is missing", v, a.part, a.offset, a.term, a.node)
			}
		case len(got) > 1:
			dup++
			if dup <= 5 {
				w.t.Errorf("acknowledged %s is in the log %d times: %+v", v, len(got), got)
			}
		case got[0].part != a.part || got[0].offset != a.offset:
			moved++
			if moved <= 5 {
				w.t.Errorf("acknowledged %s at partition %d offset %d is at partition %d offset %d", v, a.part, a.offset, got[0].part, got[0].offset)
			}
		}
	}
	for v, got := range where {
		if len(got) > 1 {
			if _, ok := w.acked[v]; !ok {
				w.t.Errorf("unacknowledged %s is in the log %d times", v, len(got))
			}
		}
		if _, ok := w.acked[v]; !ok && !w.maybe[v] && !strings.HasPrefix(v, "probe") {
			// Acknowledged to no one and not in flight at the end: only a
			// batch whose writer moved on after an ack could be here.
			w.t.Errorf("%s is in the log but was never acknowledged nor in flight", v)
		}
	}
	seenLost := 0
	for p, offs := range w.seen {
		at := map[int64]string{}
		for _, r := range ref[p] {
			at[r.Offset] = r.Value
		}
		for off, v := range offs {
			if at[off] != v {
				seenLost++
				if seenLost <= 5 {
					w.t.Errorf("a reader saw %q at partition %d offset %d; the log has %q", v, p, off, at[off])
				}
			}
		}
	}
	for _, v := range w.violations {
		w.t.Error(v)
	}
	total := 0
	for _, recs := range ref {
		total += len(recs)
	}
	w.t.Logf("%d acknowledged appends (%d records), %d records in the log, %d retried append errors, %d out-of-range reads; %d missing, %d duplicated, %d moved, %d seen then lost",
		w.acks.Load(), len(w.acked), total, w.appendErrs.Load(), w.outOfRanges.Load(), missing, dup, moved, seenLost)
	if len(w.acked) == 0 {
		w.t.Error("nothing was acknowledged: the test tested nothing")
	}
}
