package redis

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/sinks/sinktest"
)

// benchEvents is the number of change events a benchmark applies: SLUICE_BENCH_EVENTS, else
// one million.
func benchEvents(b *testing.B) int {
	if v := os.Getenv("SLUICE_BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("SLUICE_BENCH_EVENTS=%q: want an integer >= 1000", v)
		}
		return n
	}
	return 1_000_000
}

// rawLoader applies events with a plain pipelined HSET (DEL for deletes) loop: the baseline.
type rawLoader struct {
	b    *testing.B
	c    *goredis.Client
	gen  *sinktest.Small
	pipe int
}

func newRawLoader(b *testing.B, keys, pipe int) *rawLoader {
	addr, db := testDB(b)
	c := goredis.NewClient(&goredis.Options{Addr: addr, DB: db, Protocol: 2}) // as the sink's
	b.Cleanup(func() { c.Close() })
	return &rawLoader{b: b, c: c, gen: sinktest.NewSmall(1, keys), pipe: pipe}
}

func (r *rawLoader) load(n int) time.Duration {
	ctx := context.Background()
	t0 := time.Now()
	p := r.c.Pipeline()
	for i := 0; i < n; {
		for j := 0; j < r.pipe && i < n; i, j = i+1, j+1 {
			e := r.gen.Next()
			key := "items:" + strconv.FormatInt(e.ID, 10)
			if e.Delete {
				p.Del(ctx, key)
				continue
			}
			args := make([]any, 0, 2*len(e.Row))
			for _, f := range e.Row {
				v, _ := fieldValue(f.Value)
				args = append(args, f.Name, v)
			}
			p.HSet(ctx, key, args...)
		}
		if _, err := p.Exec(ctx); err != nil {
			r.b.Fatal(err)
		}
	}
	return time.Since(t0)
}

// sinkLoader applies events of the same generator through the sink (Debezium change events
// with versions), in Writes of writeSize records.
type sinkLoader struct {
	b         *testing.B
	s         *Sink
	gen       *sinktest.Small
	writeSize int
	offset    int64
}

func newSinkLoader(b *testing.B, keys, batchSize, writeSize int, guard bool, storage string) *sinkLoader {
	addr, db := testDB(b)
	s := newTestSink(b, addr, db, map[string]string{KeyBatchSize: strconv.Itoa(batchSize), KeyVersionStore: storage}, nil)
	s.noGuard = !guard
	return &sinkLoader{b: b, s: s, gen: sinktest.NewSmall(1, keys), writeSize: writeSize}
}

// load applies the next n events; the records are read ahead while the sink writes, as the
// runtime's fetchers read the log ahead.
func (l *sinkLoader) load(n int) time.Duration {
	batches := make(chan []connect.Record, 2)
	go func() {
		defer close(batches)
		for i := 0; i < n; {
			batch := make([]connect.Record, 0, l.writeSize)
			for ; len(batch) < l.writeSize && i < n; i++ {
				batch = append(batch, l.gen.Next().Record("bench.public.items", l.offset))
				l.offset++
			}
			batches <- batch
		}
	}()
	ctx := context.Background()
	t0 := time.Now()
	var err error
	for batch := range batches {
		if err == nil {
			err = l.s.Write(ctx, batch)
		}
	}
	if err != nil {
		l.b.Fatal(err)
	}
	return time.Since(t0)
}

// cpuSeconds returns the CPU time the Redis server and this process have used so far.
func cpuSeconds(b testing.TB, c *goredis.Client) (redis, self float64) {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		for _, p := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, p); ok {
				f, _ := strconv.ParseFloat(v, 64)
				redis += f
			}
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	self = float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	return redis, self
}

// BenchmarkApply measures the sink applying one million small change events (95 % upserts of
// hashes with five fields over 250 000 keys, 5 % deletes) with the version guard (versions in
// marker keys, the default, and in a hash field), and without it (to show its cost), against a raw pipelined HSET/DEL loop with go-redis whose pipeline
// depth is found by doubling. The sink gets Writes of that many records (at least 500), in
// transactions of batch.size 500. The loaders run in alternating segments of 50 000 events (the machine is
// shared). Run it alone:
//
//	go test -run '^$' -bench Apply -benchtime 1x ./sinks/redis
func BenchmarkApply(b *testing.B) {
	n := benchEvents(b)
	const segment = 50_000
	best, bestRate, worse := 0, 0.0, 0
	for depth := 50; depth <= 51_200 && worse < 2; depth *= 2 {
		rate := 0.0
		for range 2 {
			r := newRawLoader(b, 25_000, depth)
			rate = max(rate, 50_000/r.load(50_000).Seconds())
		}
		b.Logf("raw HSET, pipeline depth %5d: %8.0f ops/s", depth, rate)
		if rate > bestRate {
			best, bestRate, worse = depth, rate, 0
		} else {
			worse++
		}
	}
	for range b.N {
		raw := newRawLoader(b, n/4, best)
		guarded := newSinkLoader(b, n/4, 500, max(best, 500), true, StoreKey)
		field := newSinkLoader(b, n/4, 500, max(best, 500), true, StoreField)
		unguarded := newSinkLoader(b, n/4, 500, max(best, 500), false, StoreField)
		var rawTime, guardTime, fieldTime, noGuardTime time.Duration
		var cpu [4][2]float64 // per loader: Redis and Go CPU seconds
		probe := raw.c
		for done, i := 0, 0; done < n; i++ {
			k := min(segment, n-done)
			runs := []func(){
				func() { rawTime += raw.load(k) },
				func() { guardTime += guarded.load(k) },
				func() { fieldTime += field.load(k) },
				func() { noGuardTime += unguarded.load(k) },
			}
			for j := range runs {
				l := (i + j) % len(runs)
				r0, g0 := cpuSeconds(b, probe)
				runs[l]()
				r1, g1 := cpuSeconds(b, probe)
				cpu[l][0] += r1 - r0
				cpu[l][1] += g1 - g0
			}
			done += k
		}
		b.Logf("CPU seconds (redis, go): raw %.1f, %.1f; sink with the guard (key) %.1f, %.1f; with the guard (field) %.1f, %.1f; without it %.1f, %.1f",
			cpu[0][0], cpu[0][1], cpu[1][0], cpu[1][1], cpu[2][0], cpu[2][1], cpu[3][0], cpu[3][1])
		rawRate := float64(n) / rawTime.Seconds()
		guardRate := float64(n) / guardTime.Seconds()
		fieldRate := float64(n) / fieldTime.Seconds()
		noGuardRate := float64(n) / noGuardTime.Seconds()
		b.Logf("%d events: raw pipelined HSET (depth %d) %.0f ops/s; sink with the guard, versions in marker keys %.0f events/s = %.2fx, in a hash field %.0f events/s = %.2fx; without it %.0f events/s = %.2fx; the guard costs %.0f%% (key), %.0f%% (field); stats %+v",
			n, best, rawRate, guardRate, guardRate/rawRate, fieldRate, fieldRate/rawRate, noGuardRate, noGuardRate/rawRate,
			100*(1-guardRate/noGuardRate), 100*(1-fieldRate/noGuardRate), guarded.s.Stats())
		b.ReportMetric(rawRate, "raw_ops/s")
		b.ReportMetric(guardRate, "sink_events/s")
		b.ReportMetric(guardRate/rawRate, "ratio")
		b.ReportMetric(fieldRate/rawRate, "ratio_field")
		b.ReportMetric(noGuardRate/rawRate, "ratio_noguard")
	}
}
