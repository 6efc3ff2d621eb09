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
// the log must equal the model.
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
		cfg.DeleteRetention = time.Minute
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
		var model [parts][]Record
		var next [parts]int64
		var nextSeq [parts]int32
		var last [parts]*sent

		check := func(what string) {
			for p := int32(0); p < parts; p++ {
				got, err := tryReadAll(l, "t", p)
				if err != nil {
					rt.Fatalf("%s: read partition %d: %v", what, p, err)
				}
				if d := cmp.Diff(model[p], got); d != "" {
					rt.Fatalf("%s: partition %d (-model +log):\n%s", what, p, d)
				}
				hw, _ := l.LatestOffset("t", p)
				if hw != next[p] {
					rt.Fatalf("%s: partition %d high watermark %d, model %d", what, p, hw, next[p])
				}
			}
		}
		genRecord := rapid.Custom(func(t *rapid.T) Record {
			r := Record{Key: []byte(fmt.Sprint("k", rapid.IntRange(0, 6).Draw(t, "key")))}
			if !rapid.Bool().Draw(t, "tombstone") || rapid.IntRange(0, 4).Draw(t, "t") > 0 {
				r.Value = rapid.SliceOfN(rapid.Byte(), 0, 200).Draw(t, "value")
			}
			if rapid.Bool().Draw(t, "header") {
				r.Headers = []Header{{Key: "h", Value: rapid.SliceOfN(rapid.Byte(), 0, 5).Draw(t, "hv")}}
			}
			return r
		})

		rt.Repeat(map[string]func(*rapid.T){
			"append": func(t *rapid.T) {
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
				for i, r := range recs {
					r = copyRecord(r)
					r.Offset = next[p] + int64(i)
					r.Timestamp = time.UnixMilli(clk.now().UnixMilli())
					model[p] = append(model[p], r)
				}
				next[p] += int64(len(recs))
				if idem {
					last[p] = &sent{recs: recs, seq: nextSeq[p], res: res}
					nextSeq[p] += int32(len(recs))
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
				for _, r := range model[p] {
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
				if err := l.Compact(ctx); err != nil {
					t.Fatalf("compact: %v", err)
				}
				for p := int32(0); p < parts; p++ {
					got, err := tryReadAll(l, "t", p)
					if err != nil {
						t.Fatal(err)
					}
					if !isCompactionOf(model[p], got) {
						t.Fatalf("partition %d: compaction result is not a compaction of the model", p)
					}
					if len(model[p]) > 0 && (len(got) == 0 || !cmp.Equal(got[len(got)-1], model[p][len(model[p])-1])) {
						t.Fatalf("partition %d: compaction touched the newest record", p)
					}
					model[p] = got
				}
			},
			"retention": func(t *rapid.T) {
				limit := rapid.Int64Range(0, 8000).Draw(t, "retention_bytes")
				for p := int32(0); p < parts; p++ {
					pp, _ := l.partition("t", p)
					pp.cfg.RetentionBytes = limit
				}
				if err := l.EnforceRetention(ctx); err != nil {
					t.Fatalf("retention: %v", err)
				}
				for p := int32(0); p < parts; p++ {
					got, err := tryReadAll(l, "t", p)
					if err != nil {
						t.Fatal(err)
					}
					k := len(model[p]) - len(got)
					if k < 0 || !cmp.Equal(model[p][k:], got, cmp.Comparer(func(a, b []byte) bool { return string(a) == string(b) && (a == nil) == (b == nil) })) {
						t.Fatalf("partition %d: after retention the log is not a suffix of the model", p)
					}
					model[p] = got
				}
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
