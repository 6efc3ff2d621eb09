package raft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

// Benchmarks. They are never part of a plain go test; run for example
//
//	go test -run '^$' -bench BenchmarkReplicatedAppend -benchtime 20000x ./wal/raft/
//	go test -run '^$' -bench BenchmarkFailover -benchtime 20x ./wal/raft/

const (
	benchWriters = 8
	benchRecords = 10
	benchValue   = 100
)

type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, int(float64(len(l))*p))]
}

// drive runs n appends from benchWriters goroutines and returns the
// elapsed time and the sorted latencies.
func drive(b *testing.B, n int, app func(ctx context.Context, w, i int) error) (time.Duration, latencies) {
	b.Helper()
	per := max(n/benchWriters, 1)
	lats := make([]latencies, benchWriters)
	var wg sync.WaitGroup
	errs := make(chan error, benchWriters)
	start := time.Now()
	for w := 0; w < benchWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := 0; i < per; i++ {
				t0 := time.Now()
				if err := app(ctx, w, i); err != nil {
					errs <- err
					return
				}
				lats[w] = append(lats[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	var all latencies
	for _, l := range lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return elapsed, all
}

func benchBatch(w, i int) []wal.Record {
	recs := make([]wal.Record, benchRecords)
	for k := range recs {
		recs[k] = wal.Record{Key: []byte(fmt.Sprint("w", w)), Value: fmt.Appendf(make([]byte, 0, benchValue), "%d-%d-%d-%0*d", w, i, k, benchValue-20, 0)}
	}
	return recs
}

// BenchmarkReplicatedAppend appends from 8 writers, 10 records of 100
// bytes per batch, each acknowledged once fsynced: on a single node's
// wal.Log (the baseline) and on a 3-node cluster on loopback through the
// leader, in the same run, on the same disk, alternating between the two
// in ten rounds so that a change of load on the machine hits both. It
// reports the throughput ratio and both p50/p99 ack latencies, and
// (alone-*) the single node measured once before the cluster started:
// the three nodes share the machine's cores and disk, which slows the
// single node's rounds too.
func BenchmarkReplicatedAppend(b *testing.B) {
	dir := b.TempDir()
	single, err := wal.Open(dir+"/single", wal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer single.Close()
	if err := single.CreateTopic("b", smallTopic(1)); err != nil {
		b.Fatal(err)
	}
	// The single node alone first, before the cluster exists.
	aloneTime, aloneLat := drive(b, b.N/10, func(ctx context.Context, w, i int) error {
		_, err := single.Append(ctx, "b", 0, benchBatch(w, i), wal.AppendOptions{})
		return err
	})
	ns := startCluster(b, 3, func(c *Config) { c.TickInterval = 100 * time.Millisecond })
	ctx := ctxT(b, time.Minute)
	if err := ns[0].l.CreateTopicReplicas(ctx, "b", smallTopic(1), 3); err != nil {
		b.Fatal(err)
	}
	var ld *Log
	for ld == nil {
		for _, n := range ns {
			for _, tp := range n.l.Leads() {
				if tp.Topic == "b" {
					ld = n.l
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	const rounds = 10
	var singleTime, replTime time.Duration
	var singleLat, replLat latencies
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		el, lat := drive(b, b.N/rounds, func(ctx context.Context, w, i int) error {
			_, err := single.Append(ctx, "b", 0, benchBatch(w, i), wal.AppendOptions{})
			return err
		})
		singleTime += el
		singleLat = append(singleLat, lat...)
		el, lat = drive(b, b.N/rounds, func(ctx context.Context, w, i int) error {
			_, err := ld.Append(ctx, "b", 0, benchBatch(w, i), wal.AppendOptions{})
			return err
		})
		replTime += el
		replLat = append(replLat, lat...)
	}
	b.StopTimer()
	sort.Slice(singleLat, func(i, j int) bool { return singleLat[i] < singleLat[j] })
	sort.Slice(replLat, func(i, j int) bool { return replLat[i] < replLat[j] })
	var dropped uint64
	for _, n := range ns {
		dropped += n.l.tr.dropped.Load()
	}
	b.ReportMetric(float64(dropped), "dropped-msgs")
	ratio := singleTime.Seconds() / replTime.Seconds()
	b.ReportMetric(float64(len(replLat))/replTime.Seconds(), "appends/s")
	b.ReportMetric(float64(len(singleLat))/singleTime.Seconds(), "single-appends/s")
	b.ReportMetric(ratio, "x-single")
	b.ReportMetric(ms(replLat.pct(0.5)), "p50-ms")
	b.ReportMetric(ms(replLat.pct(0.99)), "p99-ms")
	b.ReportMetric(ms(singleLat.pct(0.5)), "single-p50-ms")
	b.ReportMetric(ms(singleLat.pct(0.99)), "single-p99-ms")
	b.ReportMetric(ms(replLat.pct(0.99)-singleLat.pct(0.99)), "p99-delta-ms")
	b.ReportMetric(float64(len(aloneLat))/aloneTime.Seconds(), "alone-appends/s")
	b.ReportMetric(ms(aloneLat.pct(0.5)), "alone-p50-ms")
	b.ReportMetric(ms(aloneLat.pct(0.99)), "alone-p99-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkFailover measures, with the default timeouts (100ms ticks,
// election after 10-20 ticks; SLUICE_RAFT_BENCH_TICK sets another tick),
// the time from SIGKILL of a partition's leader process to the first
// append acknowledged by the new leader, b.N times, and reports p50, p99
// and max.
func BenchmarkFailover(b *testing.B) {
	// SLUICE_RAFT_BENCH_TICK sets another tick (the default is 100ms).
	tick, _ := time.ParseDuration(os.Getenv("SLUICE_RAFT_BENCH_TICK"))
	c := newProcCluster(b, 3, tick)
	ctx := ctxT(b, 5*time.Minute)
	if err := c.client.CreateTopic(ctx, "f", smallTopic(1), 3); err != nil {
		b.Fatal(err)
	}
	var times latencies
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// A steady leader that has acknowledged writes.
		var ld uint64
		for ld == 0 {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, info, err := c.client.Append(actx, 0, "f", 0, benchBatch(0, i), wal.AppendOptions{})
			cancel()
			if err == nil {
				ld = info.Node
			}
		}
		b.StartTimer()
		killed := time.Now()
		c.kill(ld)
		for {
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, info, err := c.client.Append(actx, 0, "f", 0, benchBatch(1, i), wal.AppendOptions{})
			cancel()
			if err == nil && info.Node != ld {
				break
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
				b.Fatal(err)
			}
		}
		times = append(times, time.Since(killed))
		b.StopTimer()
		c.start(ld)
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(ms(times.pct(0.5)), "p50-ms")
	b.ReportMetric(ms(times.pct(0.99)), "p99-ms")
	b.ReportMetric(ms(times[len(times)-1]), "max-ms")
}
