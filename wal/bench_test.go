package wal

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Every benchmark reports its result next to a raw baseline measured in
// the same run, as a ratio ("x-raw"): for appends, the same bytes written
// with os.File.Write + fdatasync to a preallocated file, one write per
// batch, one after the other.

func benchRecords(size, n int) []Record {
	r := rand.New(rand.NewPCG(1, 2))
	recs := make([]Record, n)
	for i := range recs {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(r.Uint32())
		}
		recs[i] = Record{Key: fmt.Appendf(nil, "k%07d", i), Value: v}
	}
	return recs
}

func encodedSize(recs []Record) int {
	var bb batchBuilder
	bb.encodeRecords(recs, nil, false, 1, Uncompressed)
	return len(bb.buf)
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[(len(d)*99)/100]
}

// rawFile is the append baseline: a preallocated file written with
// os.File.Write and fdatasync.
type rawFile struct {
	f   *os.File
	buf []byte
}

func openRaw(b *testing.B, dir string, size, n int) *rawFile {
	f, err := os.OpenFile(filepath.Join(dir, "raw"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	// Preallocated like a segment (disk reserved, size kept).
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, int64(size)*int64(n)); err != nil {
		b.Fatal(err)
	}
	return &rawFile{f: f, buf: make([]byte, size)}
}

func (r *rawFile) append(b *testing.B) {
	if _, err := r.f.Write(r.buf); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fdatasync(int(r.f.Fd())); err != nil {
		b.Fatal(err)
	}
}

func (r *rawFile) close() {
	r.f.Close()
	os.Remove(r.f.Name())
}

func BenchmarkAppend(b *testing.B) {
	for _, recSize := range []int{100, 1024} {
		for _, batch := range []int{1, 100, 1000} {
			for _, producers := range []int{1, 4, 16} {
				name := fmt.Sprintf("rec=%dB/batch=%d/producers=%d", recSize, batch, producers)
				b.Run(name, func(b *testing.B) { benchAppend(b, recSize, batch, producers) })
			}
		}
	}
}

// benchAppend alternates rounds of raw appends and log appends of the same
// batches, so that both see the same disk (whose fsync latency drifts).
func benchAppend(b *testing.B, recSize, batch, producers int) {
	dir := b.TempDir()
	recs := benchRecords(recSize, batch)
	bsize := encodedSize(recs)
	n := max(b.N, producers)
	raw := openRaw(b, dir, bsize, n)
	defer raw.close()

	l, err := Open(filepath.Join(dir, "log"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	cfg := DefaultTopicConfig()
	cfg.MaxMessageBytes = 4 << 20
	if err := l.CreateTopic("bench", cfg); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var logLat, rawLat []time.Duration
	var latMu sync.Mutex
	var logElapsed, rawElapsed time.Duration
	round := max(10, 2*producers)
	b.ResetTimer()
	for done := 0; done < n; {
		k := min(round, n-done)
		done += k
		b.StopTimer()
		t0 := time.Now()
		for i := 0; i < k; i++ {
			t1 := time.Now()
			raw.append(b)
			rawLat = append(rawLat, time.Since(t1))
		}
		rawElapsed += time.Since(t0)
		b.StartTimer()
		t0 = time.Now()
		var wg sync.WaitGroup
		for g := 0; g < producers; g++ {
			mine := k / producers
			if g < k%producers {
				mine++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				lat := make([]time.Duration, 0, mine)
				for i := 0; i < mine; i++ {
					t1 := time.Now()
					if _, err := l.Append(ctx, "bench", 0, recs, AppendOptions{}); err != nil {
						b.Error(err)
						return
					}
					lat = append(lat, time.Since(t1))
				}
				latMu.Lock()
				logLat = append(logLat, lat...)
				latMu.Unlock()
			}()
		}
		wg.Wait()
		logElapsed += time.Since(t0)
	}
	b.StopTimer()
	recBytes := float64(n*batch*recSize) / 1e6
	b.ReportMetric(float64(n*batch)/logElapsed.Seconds(), "records/s")
	b.ReportMetric(recBytes/logElapsed.Seconds(), "MB/s")
	b.ReportMetric(recBytes/rawElapsed.Seconds(), "raw-MB/s")
	b.ReportMetric(rawElapsed.Seconds()/logElapsed.Seconds(), "x-raw")
	b.ReportMetric(float64(p99(logLat).Microseconds()), "p99-ack-us")
	b.ReportMetric(float64(p99(rawLat).Microseconds()), "raw-p99-fsync-us")
	b.ReportMetric(float64(p99(logLat))/float64(p99(rawLat)), "p99-x-raw")
}

// BenchmarkFetch reads a partition from the page cache; the baseline is
// ReadAt of the same segment bytes into a buffer.
func BenchmarkFetch(b *testing.B) {
	for _, recSize := range []int{100, 1024} {
		b.Run(fmt.Sprintf("rec=%dB", recSize), func(b *testing.B) {
			dir := b.TempDir()
			l, err := Open(dir, Options{Fsync: UnsafeFsyncNever})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			if err := l.CreateTopic("bench", DefaultTopicConfig()); err != nil {
				b.Fatal(err)
			}
			recs := benchRecords(recSize, 1000)
			const total = 64 << 20
			batches := total / (recSize * len(recs))
			for i := 0; i < batches; i++ {
				if _, err := l.Append(context.Background(), "bench", 0, recs, AppendOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			p, _ := l.partition("bench", 0)
			seg := p.active()
			// Baseline: the segment bytes through ReadAt, 1 MiB at a time.
			buf := make([]byte, 1<<20)
			t0 := time.Now()
			for i := 0; i < 5; i++ {
				for pos := int64(0); pos < seg.size; pos += int64(len(buf)) {
					seg.f.ReadAt(buf, pos)
				}
			}
			rawRate := float64(5*seg.size) / time.Since(t0).Seconds()
			b.ResetTimer()
			var recordBytes int64
			var res FetchResult
			start := time.Now()
			for i := 0; i < b.N; i++ {
				off := int64(0)
				for {
					err := l.FetchInto(context.Background(), "bench", 0, off, FetchOptions{MaxBytes: 1 << 20}, &res)
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range res.Records {
						recordBytes += int64(len(r.Key) + len(r.Value))
					}
					if res.NextOffset >= res.HighWatermark {
						break
					}
					off = res.NextOffset
				}
			}
			rate := float64(recordBytes) / time.Since(start).Seconds()
			b.ReportMetric(rate/1e9, "GB/s")
			b.ReportMetric(rawRate/1e9, "raw-readat-GB/s")
			b.ReportMetric(rate/rawRate, "x-raw")
		})
	}
}

// BenchmarkLongPollWakeup measures the time from an append's start to the
// return of a reader parked at the high watermark, with fsync per append
// (the default policy: the wake-up includes the fsync) and without; the
// baselines are the wake-up of a goroutine blocked on a channel that is
// closed and, for the fsync case, a raw Write + Fdatasync of the batch.
func BenchmarkLongPollWakeup(b *testing.B) {
	for _, c := range []struct {
		name  string
		fsync FsyncPolicy
	}{{"fsync=group", FsyncGroupCommit}, {"fsync=never", UnsafeFsyncNever}} {
		b.Run(c.name, func(b *testing.B) { benchLongPoll(b, c.fsync) })
	}
}

func benchLongPoll(b *testing.B, fsync FsyncPolicy) {
	dir := b.TempDir()
	l, err := Open(dir, Options{Fsync: fsync})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if err := l.CreateTopic("bench", DefaultTopicConfig()); err != nil {
		b.Fatal(err)
	}
	p, _ := l.partition("bench", 0)
	ctx := context.Background()
	recs := []Record{{Key: []byte("k"), Value: []byte("v")}}
	lat := make([]time.Duration, 0, b.N)
	got := make(chan time.Time)
	for i := 0; i < b.N; i++ {
		off := int64(i)
		go func() {
			res, err := l.Fetch(ctx, "bench", 0, off, FetchOptions{MaxWait: 10 * time.Second})
			if err != nil || len(res.Records) == 0 {
				b.Error("long poll returned no record", err)
			}
			got <- time.Now()
		}()
		waitParked(b, p, 1)
		t0 := time.Now()
		if _, err := l.Append(ctx, "bench", 0, recs, AppendOptions{}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-got).Sub(t0))
	}
	b.StopTimer()
	raw := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		ch := make(chan struct{})
		ready := make(chan struct{})
		go func() {
			close(ready)
			<-ch
			got <- time.Now()
		}()
		<-ready
		runtime.Gosched()
		t0 := time.Now()
		close(ch)
		raw = append(raw, (<-got).Sub(t0))
	}
	b.ReportMetric(float64(p99(lat).Microseconds()), "p99-wakeup-us")
	b.ReportMetric(float64(p99(raw).Nanoseconds())/1e3, "raw-chan-p99-us")
	if fsync == FsyncGroupCommit {
		rf := openRaw(b, b.TempDir(), encodedSize(recs), b.N)
		defer rf.close()
		syncs := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			rf.append(b)
			syncs = append(syncs, time.Since(t0))
		}
		b.ReportMetric(float64(p99(syncs).Microseconds()), "raw-fdatasync-p99-us")
	}
}

// BenchmarkCompaction compacts a partition of 1000 keys updated many
// times; the baseline is reading the same segment files with ReadAt.
func BenchmarkCompaction(b *testing.B) {
	recs := benchRecords(200, 100)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir, err := os.MkdirTemp("", "walbench")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
		l, err := Open(dir, Options{Fsync: UnsafeFsyncNever})
		if err != nil {
			b.Fatal(err)
		}
		cfg := DefaultTopicConfig()
		cfg.Delete, cfg.Compact = false, true
		cfg.SegmentBytes = 4 << 20
		cfg.MinCleanableDirtyRatio = 0
		if err := l.CreateTopic("bench", cfg); err != nil {
			b.Fatal(err)
		}
		for j := 0; j < 2000; j++ { // 10 passes over 1000 keys, ~44 MB
			for k := range recs {
				recs[k].Key = fmt.Appendf(recs[k].Key[:0], "k%07d", (j*100+k)%1000)
			}
			if _, err := l.Append(context.Background(), "bench", 0, recs, AppendOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		p, _ := l.partition("bench", 0)
		var segBytes int64
		buf := make([]byte, 1<<20)
		t0 := time.Now()
		for _, s := range p.segs {
			for pos := int64(0); pos < s.size; pos += int64(len(buf)) {
				s.f.ReadAt(buf, pos)
			}
			segBytes += s.size
		}
		rawRate := float64(segBytes) / time.Since(t0).Seconds()
		b.StartTimer()
		start := time.Now()
		st, err := p.compact(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		el := time.Since(start)
		b.StopTimer()
		read := st.BytesRead
		for _, s := range p.segs[:len(p.segs)-1] {
			read += s.size // the rewrite pass reads every sealed segment
		}
		b.ReportMetric(float64(segBytes)/1e6/el.Seconds(), "MB/s")
		b.ReportMetric(rawRate/1e6, "raw-read-MB/s")
		b.ReportMetric(float64(st.RecordsRemoved), "records-removed")
		l.Close()
		os.RemoveAll(dir)
		b.StartTimer()
	}
}

// BenchmarkPartitionMemory opens a log with many partitions and reports
// the heap per open partition.
func BenchmarkPartitionMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		dir, err := os.MkdirTemp("", "walbench")
		if err != nil {
			b.Fatal(err)
		}
		const parts = 500
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l, err := Open(dir, Options{Fsync: UnsafeFsyncNever})
		if err != nil {
			b.Fatal(err)
		}
		cfg := DefaultTopicConfig()
		cfg.Partitions = parts
		cfg.SegmentBytes = 1 << 20
		if err := l.CreateTopic("bench", cfg); err != nil {
			b.Fatal(err)
		}
		for p := int32(0); p < parts; p++ {
			l.Append(context.Background(), "bench", p, []Record{{Key: []byte("k"), Value: []byte(strings.Repeat("v", 100))}}, AppendOptions{})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/parts, "heap-bytes/partition")
		l.Close()
		os.RemoveAll(dir)
	}
}

// BenchmarkReopen opens a log whose active segment holds 64 MiB, after a
// clean close (the marker lets the open skip the scan) and after a crash
// (the open verifies every batch); the baseline is reading the segment
// file with ReadAt.
func BenchmarkReopen(b *testing.B) {
	dir := b.TempDir()
	l, err := Open(dir, Options{Fsync: UnsafeFsyncNever})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.CreateTopic("bench", DefaultTopicConfig()); err != nil {
		b.Fatal(err)
	}
	recs := benchRecords(1024, 1000)
	for i := 0; i < 64; i++ {
		if _, err := l.Append(context.Background(), "bench", 0, recs, AppendOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	seg := filepath.Join(dir, "topics", "bench", "0", segmentName(0))
	marker := filepath.Join(dir, "topics", "bench", "0", cleanMarker)
	var clean, crash, raw time.Duration
	buf := make([]byte, 1<<20)
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		f, _ := os.Open(seg)
		for pos := int64(0); ; pos += int64(len(buf)) {
			if n, _ := f.ReadAt(buf, pos); n < len(buf) {
				break
			}
		}
		f.Close()
		raw += time.Since(t0)
		t0 = time.Now()
		l, err := Open(dir, Options{Fsync: UnsafeFsyncNever}) // after a clean close
		if err != nil {
			b.Fatal(err)
		}
		clean += time.Since(t0)
		l.Close()
		markerBytes, _ := os.ReadFile(marker)
		os.Remove(marker) // as after a crash
		t0 = time.Now()
		l, err = Open(dir, Options{Fsync: UnsafeFsyncNever})
		if err != nil {
			b.Fatal(err)
		}
		crash += time.Since(t0)
		l.Close()
		os.WriteFile(marker, markerBytes, 0o644)
	}
	n := float64(b.N)
	b.ReportMetric(float64(clean.Microseconds())/n, "clean-open-us")
	b.ReportMetric(float64(crash.Microseconds())/n, "crash-open-us")
	b.ReportMetric(float64(raw.Microseconds())/n, "raw-read-us")
	b.ReportMetric(crash.Seconds()/raw.Seconds(), "crash-x-raw")
}
