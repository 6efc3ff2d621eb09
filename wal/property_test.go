package wal

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// TestPropertyLogMatchesModel runs random appends (plain and idempotent,
// with retries), fetches, compactions, retention runs, clean reopens and
// crash-reopens against an in-memory model of the log; after every step
// the log must equal the model. The model computes compaction itself (the
// newest record of each key below the active segment, tombstones kept
// until their batch's delete horizon under the fake clock) and retention
// (whole segments from the oldest, by time and size, never the active
// one); it takes only the segment boundaries, sizes and largest
// timestamps from the log.
func TestPropertyLogMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		const parts = 2
		ctx := context.Background()
		fs := vfs.NewMem()
		clk := newClock()
		open := func() *Log {
			l, err := Open("/d", memOpts(fs, clk))
			if err != nil {
				rt.Fatalf("open: %v", err)
			}
			return l
		}
		l := open()
		defer func() { l.Close() }()
		cfg := DefaultTopicConfig()
		cfg.Partitions = parts
		cfg.Compact, cfg.Delete = true, true
		cfg.SegmentBytes = 1024
		cfg.IndexIntervalBytes = int32(rapid.IntRange(0, 600).Draw(rt, "index_interval"))
		cfg.MinCleanableDirtyRatio = 0
		cfg.DeleteRetention = 5 * time.Second
		if err := l.CreateTopic("t", cfg); err != nil {
			rt.Fatal(err)
		}
		pid, epoch, err := l.InitProducer(ctx, "prop")
		if err != nil {
			rt.Fatal(err)
		}
		type sent struct {
			recs []Record
			seq  int32
			res  AppendResult
		}
		var model [parts][]*modelBatch
		var start [parts]int64
		var next [parts]int64
		var nextSeq [parts]int32
		var last [parts]*sent

		check := func(what string) {
			for p := int32(0); p < parts; p++ {
				got, err := tryReadAll(l, "t", p)
				if err != nil {
					rt.Fatalf("%s: read partition %d: %v", what, p, err)
				}
				if d := cmp.Diff(flatten(model[p]), got); d != "" {
					rt.Fatalf("%s: partition %d (-model +log):\n%s", what, p, d)
				}
				hw, _ := l.LatestOffset("t", p)
				if hw != next[p] {
					rt.Fatalf("%s: partition %d high watermark %d, model %d", what, p, hw, next[p])
				}
				if ls, _ := l.EarliestOffset("t", p); ls != start[p] {
					rt.Fatalf("%s: partition %d log start %d, model %d", what, p, ls, start[p])
				}
			}
		}
		genRecord := rapid.Custom(func(t *rapid.T) Record {
			r := Record{Key: []byte(fmt.Sprint("k", rapid.IntRange(0, 20).Draw(t, "key")))}
			if rapid.IntRange(0, 3).Draw(t, "tombstone") > 0 {
				r.Value = rapid.SliceOfN(rapid.Byte(), 0, 120).Draw(t, "value")
			}
			if rapid.Bool().Draw(t, "header") {
				r.Headers = []Header{{Key: "h", Value: rapid.SliceOfN(rapid.Byte(), 0, 5).Draw(t, "hv")}}
			}
			return r
		})

		rt.Repeat(map[string]func(*rapid.T){
			"append": func(t *rapid.T) {
				// A few batches per step, so that segments fill and roll
				// within a run.
				for range rapid.IntRange(1, 3).Draw(t, "batches") {
					p := int32(rapid.IntRange(0, parts-1).Draw(t, "partition"))
					recs := rapid.SliceOfN(genRecord, 1, 6).Draw(t, "records")
					idem := rapid.Bool().Draw(t, "idempotent")
					opts := AppendOptions{}
					if idem {
						opts = AppendOptions{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: nextSeq[p], SourcePosition: []byte(fmt.Sprint(next[p]))}
					}
					res, err := l.Append(ctx, "t", p, recs, opts)
					if err != nil {
						t.Fatalf("append: %v", err)
					}
					if res.BaseOffset != next[p] || res.LastOffset != next[p]+int64(len(recs))-1 || res.Duplicate {
						t.Fatalf("append result %+v, model next offset %d", res, next[p])
					}
					mb := &modelBatch{horizon: -1}
					for i, r := range recs {
						r = copyRecord(r)
						r.Offset = next[p] + int64(i)
						r.Timestamp = time.UnixMilli(clk.now().UnixMilli())
						mb.recs = append(mb.recs, r)
					}
					model[p] = append(model[p], mb)
					next[p] += int64(len(recs))
					if idem {
						last[p] = &sent{recs: recs, seq: nextSeq[p], res: res}
						nextSeq[p] += int32(len(recs))
					}
				}
			},
			"retry": func(t *rapid.T) {
				p := int32(rapid.IntRange(0, parts-1).Draw(t, "partition"))
				s := last[p]
				if s == nil {
					t.Skip("no idempotent batch yet")
				}
				res, err := l.Append(ctx, "t", p, s.recs, AppendOptions{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: s.seq})
				if err != nil {
					t.Fatalf("retry: %v", err)
				}
				if !res.Duplicate || res.BaseOffset != s.res.BaseOffset || res.LastOffset != s.res.LastOffset {
					t.Fatalf("retry returned %+v, want duplicate of %+v", res, s.res)
				}
				ps, ok := l.ProducerState("t", p, pid)
				if !ok || string(ps.SourcePosition) != fmt.Sprint(s.res.BaseOffset) || ps.LastOffset != s.res.LastOffset {
					t.Fatalf("producer state %+v %v after batch at %d", ps, ok, s.res.BaseOffset)
				}
			},
			"fetch": func(t *rapid.T) {
				p := int32(rapid.IntRange(0, parts-1).Draw(t, "partition"))
				start, _ := l.EarliestOffset("t", p)
				off := rapid.Int64Range(start, next[p]).Draw(t, "offset")
				maxBytes := rapid.IntRange(1, 3000).Draw(t, "max_bytes")
				res, err := l.Fetch(ctx, "t", p, off, FetchOptions{MaxBytes: maxBytes})
				if err != nil {
					t.Fatalf("fetch %d: %v", off, err)
				}
				var want []Record
				for _, r := range flatten(model[p]) {
					if r.Offset >= off {
						want = append(want, r)
					}
				}
				if len(want) > 0 && len(res.Records) == 0 {
					t.Fatalf("fetch at %d returned nothing, model has %d records from there", off, len(want))
				}
				got := make([]Record, len(res.Records))
				for i, r := range res.Records {
					got[i] = copyRecord(r)
				}
				if d := cmp.Diff(want[:len(got)], got, cmpopts.EquateEmpty()); d != "" {
					t.Fatalf("fetch at %d (-model +log):\n%s", off, d)
				}
			},
			"compact": func(t *rapid.T) {
				// Time passes between compactions: tombstones kept by one
				// may be past their horizon at the next.
				clk.advance(time.Duration(rapid.IntRange(0, 10_000).Draw(t, "ms_before")) * time.Millisecond)
				var active [parts]int64
				for p := int32(0); p < parts; p++ {
					active[p] = observeSegments(l, p)[0].activeBase
				}
				if err := l.Compact(ctx); err != nil {
					t.Fatalf("compact: %v", err)
				}
				now := clk.now().UnixMilli()
				for p := int32(0); p < parts; p++ {
					modelCompact(model[p], active[p], now, cfg.DeleteRetention.Milliseconds())
				}
				check("after compaction")
			},
			"retention": func(t *rapid.T) {
				limit := rapid.Int64Range(-1, 8000).Draw(t, "retention_bytes")
				age := time.Duration(rapid.Int64Range(-1, 600_000).Draw(t, "retention_ms")) * time.Millisecond
				var segs [parts][]observedSegment
				for p := int32(0); p < parts; p++ {
					segs[p] = observeSegments(l, p)
				}
				if rapid.Bool().Draw(t, "exact_size") {
					// Exactly the size of a suffix of segments: the
					// boundary case of retention.bytes.
					ss := segs[rapid.IntRange(0, parts-1).Draw(t, "size_of")]
					limit = 0
					for _, s := range ss[rapid.IntRange(0, len(ss)-1).Draw(t, "suffix_from"):] {
						limit += s.size
					}
				}
				for p := int32(0); p < parts; p++ {
					pp, _ := l.partition("t", p)
					pp.cfg.RetentionBytes, pp.cfg.Retention = limit, age
				}
				if err := l.EnforceRetention(ctx); err != nil {
					t.Fatalf("retention: %v", err)
				}
				now := clk.now().UnixMilli()
				for p := int32(0); p < parts; p++ {
					start[p] = modelRetention(segs[p], now, limit, age, start[p])
					model[p] = dropBelow(model[p], start[p])
				}
				check("after retention")
			},
			"clock": func(t *rapid.T) {
				clk.advance(time.Duration(rapid.IntRange(1, 120_000).Draw(t, "ms")) * time.Millisecond)
			},
			"reopen": func(t *rapid.T) {
				if err := l.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				l = open()
			},
			"crash": func(t *rapid.T) {
				seed := rapid.Uint64().Draw(t, "seed")
				fs.Crash(vfs.CrashOptions{Tear: true, Rand: rand.New(rand.NewPCG(seed, 1))})
				l.Close()
				l = open()
			},
			"": func(t *rapid.T) { check("after step") },
		})
	})
}

// modelBatch is a batch of the model: its records as compaction left them
// and its delete horizon (-1 until compaction first keeps a tombstone in
// it).
type modelBatch struct {
	recs    []Record
	horizon int64
}

func flatten(bs []*modelBatch) []Record {
	var out []Record
	for _, b := range bs {
		out = append(out, b.recs...)
	}
	return out
}

// modelCompact applies one compaction to the model: below the active
// segment's base, a record stays only if it is its key's newest in the
// whole partition, and a tombstone also only until its batch's delete
// horizon; the horizon is set to now + delete.retention.ms when compaction
// first keeps a tombstone of the batch.
func modelCompact(bs []*modelBatch, activeBase, now, deleteRetention int64) {
	newest := map[string]int64{}
	for _, b := range bs {
		for _, r := range b.recs {
			newest[string(r.Key)] = r.Offset
		}
	}
	for _, b := range bs {
		if len(b.recs) == 0 || b.recs[0].Offset >= activeBase {
			continue
		}
		kept := b.recs[:0:0]
		tombstoneKept := false
		for _, r := range b.recs {
			if newest[string(r.Key)] > r.Offset {
				continue
			}
			if r.Value == nil {
				if b.horizon >= 0 && now >= b.horizon {
					continue
				}
				tombstoneKept = true
			}
			kept = append(kept, r)
		}
		if tombstoneKept && b.horizon < 0 {
			b.horizon = now + deleteRetention
		}
		b.recs = kept
	}
}

// observedSegment is what the model takes from the log: where segments
// begin, their sizes and newest timestamps.
type observedSegment struct {
	base, size, maxTS, activeBase int64
}

func observeSegments(l *Log, part int32) []observedSegment {
	p, _ := l.partition("t", part)
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []observedSegment
	for _, s := range p.segs {
		out = append(out, observedSegment{base: s.base, size: s.size, maxTS: s.maxTS, activeBase: p.active().base})
	}
	return out
}

// modelRetention returns the log start after retention: sealed segments go
// from the oldest on while the newest record of one is older than
// retention.ms or the partition without it still holds retention.bytes.
func modelRetention(segs []observedSegment, now, limit int64, age time.Duration, start int64) int64 {
	var total int64
	for _, s := range segs {
		total += s.size
	}
	for i, s := range segs[:len(segs)-1] {
		byTime := age >= 0 && now-s.maxTS > age.Milliseconds()
		bySize := limit >= 0 && total-s.size >= limit
		if !byTime && !bySize {
			break
		}
		total -= s.size
		start = segs[i+1].base
	}
	return start
}

func dropBelow(bs []*modelBatch, start int64) []*modelBatch {
	var out []*modelBatch
	for _, b := range bs {
		if len(b.recs) > 0 && b.recs[0].Offset < start {
			if b.recs[len(b.recs)-1].Offset >= start {
				panic("a batch straddles a segment boundary")
			}
			continue
		}
		out = append(out, b)
	}
	return out
}
