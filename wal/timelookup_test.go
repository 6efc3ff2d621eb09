package wal

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// TestOffsetForTimeEveryTimestamp looks up every timestamp from before the
// first record to after the last, against the answer computed from the
// records (the first offset whose timestamp is at or after it, else the
// high watermark), on sealed and active segments, with dense and sparse
// indexes, as written, after a clean reopen (indexes from their files) and
// after a crash (indexes rebuilt). Timestamps go back and forth, batches
// hold several records, and a segment holds many batches between index
// entries when the interval is large.
func TestOffsetForTimeEveryTimestamp(t *testing.T) {
	for _, interval := range []int32{0, 150, 700, 1 << 20} {
		t.Run(fmt.Sprint("index.interval.bytes=", interval), func(t *testing.T) {
			fs := vfs.NewMem()
			clk := newClock()
			l := mustOpen(t, "/d", memOpts(fs, clk))
			defer func() { l.Close() }()
			cfg := DefaultTopicConfig()
			cfg.SegmentBytes = 2000
			cfg.IndexIntervalBytes = interval
			if err := l.CreateTopic("t", cfg); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(interval), 3))
			base := clk.now().UnixMilli()
			type rec struct{ off, ts int64 }
			var all []rec
			for len(all) < 300 {
				n := 1 + rng.IntN(4)
				recs := make([]Record, n)
				for i := range recs {
					// Mostly rising, sometimes back in time, with ties.
					ts := base + int64(len(all)+i)*2 + int64(rng.IntN(7)) - 3
					if rng.IntN(10) == 0 {
						ts -= int64(rng.IntN(60))
					}
					recs[i] = Record{Key: []byte("k"), Value: []byte(fmt.Sprint(len(all) + i)), Timestamp: time.UnixMilli(ts)}
				}
				res := mustAppend(t, l, "t", 0, recs, AppendOptions{})
				for i, r := range recs {
					all = append(all, rec{res.BaseOffset + int64(i), r.Timestamp.UnixMilli()})
				}
			}
			p, _ := l.partition("t", 0)
			if len(p.segs) < 4 {
				t.Fatalf("only %d segments; the test needs sealed ones", len(p.segs))
			}
			lo, hi := all[0].ts, all[0].ts
			for _, r := range all {
				lo, hi = min(lo, r.ts), max(hi, r.ts)
			}
			hw := all[len(all)-1].off + 1
			check := func(when string) {
				t.Helper()
				for ts := lo - 2; ts <= hi+2; ts++ {
					want := hw
					for _, r := range all {
						if r.ts >= ts {
							want = r.off
							break
						}
					}
					got, err := l.OffsetForTime("t", 0, time.UnixMilli(ts))
					if err != nil || got != want {
						t.Fatalf("%s: OffsetForTime(%d) = %d, %v; want %d", when, ts, got, err, want)
					}
				}
			}
			check("as written")
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, "/d", memOpts(fs, clk))
			check("after a clean reopen")
			fs.Crash(vfs.CrashOptions{})
			l.Close()
			for _, n := range mustReadDir(t, fs, "/d/topics/t/0") {
				if len(n) > 6 && (n[len(n)-6:] == ".index" || n[len(n)-10:] == ".timeindex") {
					if err := fs.Remove("/d/topics/t/0/" + n); err != nil {
						t.Fatal(err)
					}
				}
			}
			l = mustOpen(t, "/d", memOpts(fs, clk))
			check("after a crash, indexes rebuilt")
		})
	}
}

func mustReadDir(t testing.TB, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}
