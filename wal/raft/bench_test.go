package raft

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/vfs"
	"golang.org/x/sys/unix"
)

// Benchmarks. They are never part of a plain go test; run for example
//
//	go test -run '^$' -bench 'BenchmarkReplicatedAppend$' -benchtime 20000x ./wal/raft/
//	go test -run '^$' -bench BenchmarkReplicatedAppendProcs -benchtime 20000x ./wal/raft/
//	go test -run '^$' -bench BenchmarkReplicatedPipeline -benchtime 500x ./wal/raft/
//	go test -run '^$' -bench BenchmarkFailover -benchtime 20x ./wal/raft/
//	go test -run '^$' -bench BenchmarkFsyncContention -benchtime 2000x ./wal/raft/

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

// benchBatch is writer w's i-th batch: benchRecords records keyed by the
// writer, with values of benchValue bytes.
func benchBatch(w, i int) []wal.Record {
	recs, _ := fillBatch(nil, nil, w, i)
	return recs
}

// fillBatch appends benchBatch(w, i) to recs, its keys and values to buf.
func fillBatch(recs []wal.Record, buf []byte, w, i int) ([]wal.Record, []byte) {
	if cap(buf) < benchRecords*(benchValue+8) {
		buf = make([]byte, 0, benchRecords*(benchValue+8))
	}
	for k := 0; k < benchRecords; k++ {
		at := len(buf)
		buf = strconv.AppendInt(append(buf, 'w'), int64(w), 10)
		key := buf[at:len(buf):len(buf)]
		at = len(buf)
		buf = strconv.AppendInt(buf, int64(w), 10)
		buf = strconv.AppendInt(append(buf, '-'), int64(i), 10)
		buf = strconv.AppendInt(append(buf, '-'), int64(k), 10)
		for len(buf)-at < benchValue {
			buf = append(buf, '0')
		}
		recs = append(recs, wal.Record{Key: key, Value: buf[at:len(buf):len(buf)]})
	}
	return recs, buf
}

// BenchmarkReplicatedAppend appends from 8 writers, 10 records of 100
// bytes per batch, each acknowledged once fsynced: on a single node's
// wal.Log (the baseline) and on a 3-node cluster on loopback through the
// leader, in the same run, on the same disk, alternating between the two
// in ten rounds so that a change of load on the machine hits both. It
// reports the throughput ratio and both p50/p99 ack latencies, and
// (alone-*) the single node measured once before the cluster started:
// the three nodes share the machine's cores and disk, which slows the
// single node's rounds too. The three nodes run in this process, so they
// also share one Go scheduler: a node's fsync holds one of its threads'
// processors (GOMAXPROCS) from the others until the runtime hands it on.
// BenchmarkReplicatedAppendProcs runs the followers as processes.
func BenchmarkReplicatedAppend(b *testing.B) {
	defer sluiceGC()()
	single := openSingle(b)
	// The single node alone first, before the cluster exists.
	aloneTime, aloneLat := drive(b, b.N/10, appendTo(single))
	ns, ld := benchCluster(b)
	compareAppends(b, single, ld)
	var dropped uint64
	for _, n := range ns {
		dropped += n.l.tr.dropped.Load()
	}
	b.ReportMetric(float64(dropped), "dropped-msgs")
	b.ReportMetric(float64(len(aloneLat))/aloneTime.Seconds(), "alone-appends/s")
	b.ReportMetric(ms(aloneLat.pct(0.5)), "alone-p50-ms")
	b.ReportMetric(ms(aloneLat.pct(0.99)), "alone-p99-ms")
}

// BenchmarkReplicatedAppendProcs is BenchmarkReplicatedAppend with the
// leader in this process and the two followers in processes of their own
// (this test binary), as nodes run in production: each node has its own
// Go scheduler, and only the machine's cores and disk are shared.
func BenchmarkReplicatedAppendProcs(b *testing.B) {
	defer sluiceGC()()
	single := openSingle(b)
	nodes := testNodes(freeAddrs(b, 3))
	c := &procCluster{t: b, dir: b.TempDir(), nodes: nodes, tick: 100 * time.Millisecond, cmds: map[uint64]*exec.Cmd{}}
	b.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for id, cmd := range c.cmds {
			cmd.Process.Kill()
			cmd.Wait()
			delete(c.cmds, id)
		}
	})
	c.start(2)
	c.start(3)
	n1 := &testNode{cfg: Config{Dir: filepath.Join(c.dir, "node1"), NodeID: 1, Nodes: nodes,
		TickInterval: 100 * time.Millisecond, Logger: testLogger(b).With("node", 1)}}
	n1.start(b)
	b.Cleanup(func() { n1.stop(b) })
	ctx := ctxT(b, time.Minute)
	campaign(b, ctx, n1.l, groupKey{topic: MetaTopic})
	created := make(chan error, 1)
	go func() { created <- n1.l.CreateTopicReplicas(ctx, "b", smallTopic(1), 3) }()
	campaign(b, ctx, n1.l, groupKey{topic: "b"})
	if err := <-created; err != nil {
		b.Fatal(err)
	}
	if err := n1.l.group(groupKey{topic: "b"}).serving(ctx); err != nil {
		b.Fatal(err)
	}
	compareAppends(b, single, n1.l)
	b.ReportMetric(float64(n1.l.tr.dropped.Load()), "leader-dropped-msgs")
}

// benchCluster starts a 3-node cluster in this process with topic "b"
// (one partition, three replicas) and returns its nodes and the leader
// of b-0.
//
// The three nodes share the machine's disk, and so its flushes.
// SLUICE_BENCH_CLUSTER_DIR puts their directories elsewhere (the single
// node stays on the test's disk): one directory for all three, or three,
// comma-separated, one per node (a machine with a disk per node measures
// the cluster as it runs in production). On a tmpfs (/dev/shm) their
// fsyncs cost nothing, which shows what the cluster costs apart from its
// disks. SLUICE_BENCH_SYNC_DELAY=230us then makes each of the nodes' syncs
// take that much longer (a sleep in the kernel), as if each node had a
// disk of its own that flushes in about that time; the benchmark reports
// the mean time a node's sync then took.
func benchCluster(b *testing.B) ([]*testNode, *Log) {
	var under []string
	var delay *delayedSyncs
	if v := os.Getenv("SLUICE_BENCH_CLUSTER_DIR"); v != "" {
		dirs := strings.Split(v, ",")
		if len(dirs) != 1 && len(dirs) != 3 {
			b.Fatalf("SLUICE_BENCH_CLUSTER_DIR=%q: want one directory, or three separated by commas", v)
		}
		for _, d := range dirs {
			u, err := os.MkdirTemp(d, "sluice-bench-")
			if err != nil {
				b.Fatalf("SLUICE_BENCH_CLUSTER_DIR: %v", err)
			}
			b.Cleanup(func() { os.RemoveAll(u) })
			under = append(under, u)
		}
	}
	if v := os.Getenv("SLUICE_BENCH_SYNC_DELAY"); v != "" {
		dl, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("SLUICE_BENCH_SYNC_DELAY: %v", err)
		}
		delay = &delayedSyncs{FS: vfs.OS, delay: dl}
		b.Cleanup(func() {
			if n := delay.syncs.Load(); n > 0 {
				b.ReportMetric(float64(delay.took.Load())/float64(n)/1e3, "cluster-us/sync")
				b.ReportMetric(float64(n), "cluster-syncs")
			}
		})
	}
	node := 0
	ns := startCluster(b, 3, func(c *Config) {
		c.TickInterval = 100 * time.Millisecond
		if len(under) > 0 {
			c.Dir = filepath.Join(under[node%len(under)], filepath.Base(c.Dir))
		}
		node++
		if delay != nil {
			c.WAL.FS = delay
		}
	})
	ctx := ctxT(b, time.Minute)
	if err := ns[0].l.CreateTopicReplicas(ctx, "b", smallTopic(1), 3); err != nil {
		b.Fatal(err)
	}
	for {
		for _, n := range ns {
			for _, tp := range n.l.Leads() {
				if tp.Topic == "b" {
					return ns, n.l
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func openSingle(b *testing.B) *wal.Log {
	single, err := wal.Open(b.TempDir(), wal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { single.Close() })
	if err := single.CreateTopic("b", smallTopic(1)); err != nil {
		b.Fatal(err)
	}
	return single
}

type appender interface {
	Append(ctx context.Context, topic string, part int32, recs []wal.Record, opts wal.AppendOptions) (wal.AppendResult, error)
}

// appendTo appends the batches of benchBatch, each writer building its
// next batch in the memory of its previous one (an append copies what it
// keeps): the cost of making the workload stays out of the measurement,
// as far as possible, on both sides.
func appendTo(l appender) func(ctx context.Context, w, i int) error {
	var mem [benchWriters]struct {
		recs []wal.Record
		buf  []byte
	}
	return func(ctx context.Context, w, i int) error {
		m := &mem[w]
		m.recs, m.buf = fillBatch(m.recs[:0], m.buf[:0], w, i)
		_, err := l.Append(ctx, "b", 0, m.recs, wal.AppendOptions{})
		return err
	}
}

// compareAppends drives b.N appends on the single node and b.N through
// the leader, alternating in ten rounds, and reports throughput and
// latencies of both and their ratio.
func compareAppends(b *testing.B, single *wal.Log, ld *Log) {
	const rounds = 10
	var singleTime, replTime, singleCPU, replCPU time.Duration
	var singleLat, replLat latencies
	var singleAlloc, replAlloc uint64
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		c0, a0 := cpuTime(), allocated()
		el, lat := drive(b, b.N/rounds, appendTo(single))
		c1, a1 := cpuTime(), allocated()
		singleTime += el
		singleCPU += c1 - c0
		singleAlloc += a1 - a0
		singleLat = append(singleLat, lat...)
		el, lat = drive(b, b.N/rounds, appendTo(ld))
		replCPU += cpuTime() - c1
		replAlloc += allocated() - a1
		replTime += el
		replLat = append(replLat, lat...)
	}
	b.StopTimer()
	// Bytes allocated per append: garbage the collector must chase, and a
	// collection's pauses and marking show in the tail latencies.
	b.ReportMetric(float64(replAlloc)/float64(len(replLat)), "B/append")
	b.ReportMetric(float64(singleAlloc)/float64(len(singleLat)), "single-B/append")
	sort.Slice(singleLat, func(i, j int) bool { return singleLat[i] < singleLat[j] })
	sort.Slice(replLat, func(i, j int) bool { return replLat[i] < replLat[j] })
	ratio := singleTime.Seconds() / replTime.Seconds()
	b.ReportMetric(float64(len(replLat))/replTime.Seconds(), "appends/s")
	b.ReportMetric(float64(len(singleLat))/singleTime.Seconds(), "single-appends/s")
	b.ReportMetric(ratio, "x-single")
	b.ReportMetric(ms(replLat.pct(0.5)), "p50-ms")
	b.ReportMetric(ms(replLat.pct(0.99)), "p99-ms")
	b.ReportMetric(ms(singleLat.pct(0.5)), "single-p50-ms")
	b.ReportMetric(ms(singleLat.pct(0.99)), "single-p99-ms")
	b.ReportMetric(ms(replLat.pct(0.99)-singleLat.pct(0.99)), "p99-delta-ms")
	// The CPU time of this process per append (the followers' too when
	// they run in it): with two cores, a cluster in one process is
	// CPU-bound near 2s/replCPU appends per second.
	b.ReportMetric(float64(replCPU.Microseconds())/float64(len(replLat)), "cpu-us/append")
	b.ReportMetric(float64(singleCPU.Microseconds())/float64(len(singleLat)), "single-cpu-us/append")
}

// BenchmarkReplicatedPipeline appends as a source task does: one
// idempotent producer, batches of 2048 records of 200 bytes (about 440
// KB), up to three appends in flight, the next started once the log has
// placed the previous one (AppendOptions.Written; a log that does not
// report it: once the previous append returned). b.N batches on a single
// node's wal.Log (the baseline) and b.N through a 3-node cluster's
// leader, alternating in five rounds. It reports records per second of
// both, their ratio, and the p50 of the time from the start of an append
// to its acknowledgement.
func BenchmarkReplicatedPipeline(b *testing.B) {
	defer sluiceGC()()
	single := openSingle(b)
	_, ld := benchCluster(b)
	const rounds = 5
	per := max(b.N/rounds, 1)
	var singleTime, replTime time.Duration
	var singleLat, replLat latencies
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		el, lat := pipeline(b, single, per)
		singleTime += el
		singleLat = append(singleLat, lat...)
		el, lat = pipeline(b, ld, per)
		replTime += el
		replLat = append(replLat, lat...)
	}
	b.StopTimer()
	sort.Slice(singleLat, func(i, j int) bool { return singleLat[i] < singleLat[j] })
	sort.Slice(replLat, func(i, j int) bool { return replLat[i] < replLat[j] })
	recs := float64(rounds * per * pipelineRecords)
	b.ReportMetric(recs/replTime.Seconds(), "records/s")
	b.ReportMetric(recs/singleTime.Seconds(), "single-records/s")
	b.ReportMetric(singleTime.Seconds()/replTime.Seconds(), "x-single")
	b.ReportMetric(ms(replLat.pct(0.5)), "p50-ms")
	b.ReportMetric(ms(singleLat.pct(0.5)), "single-p50-ms")
}

const (
	pipelineRecords = 2048
	pipelineValue   = 200
	pipelineDepth   = 3
)

type producerLog interface {
	appender
	InitProducer(ctx context.Context, transactionalID string) (int64, int16, error)
}

// pipeline appends n batches as one idempotent producer, as described at
// BenchmarkReplicatedPipeline, and returns the elapsed time and the
// latencies of the appends.
func pipeline(b *testing.B, l producerLog, n int) (time.Duration, latencies) {
	ctx := context.Background()
	id, epoch, err := l.InitProducer(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	val := make([]byte, pipelineValue)
	for i := range val {
		val[i] = 'v'
	}
	batches := make([][]wal.Record, pipelineDepth)
	for i := range batches {
		for k := 0; k < pipelineRecords; k++ {
			batches[i] = append(batches[i], wal.Record{Key: strconv.AppendInt(nil, int64(k), 10), Value: val})
		}
	}
	slots := make(chan int, pipelineDepth)
	for i := 0; i < pipelineDepth; i++ {
		slots <- i
	}
	lats := make(latencies, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		slot := <-slots
		placed := make(chan struct{})
		var once sync.Once
		mark := func() { once.Do(func() { close(placed) }) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			_, err := l.Append(ctx, "b", 0, batches[slot], wal.AppendOptions{
				ProducerID: id, ProducerEpoch: epoch, BaseSequence: int32(i * pipelineRecords), Written: mark})
			lats[i] = time.Since(t0)
			mark()
			slots <- slot
			if err != nil {
				errs <- err
			}
		}()
		<-placed
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	return elapsed, lats
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// BenchmarkFsyncContention measures what three nodes sharing one disk pay
// for durability: the mean time of a 1 KB write and fdatasync, by one
// writer alone and by each of three writers at once (each on its own
// file, as each node has its own log), b.N times per writer, alternating
// in five rounds. On a disk whose every flush is a whole-device cache
// flush, the three writers' flushes queue behind each other.
func BenchmarkFsyncContention(b *testing.B) {
	dir := b.TempDir()
	files := make([]*os.File, 3)
	per := max(b.N/5, 1) // five rounds
	for i := range files {
		f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(i)))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		// space reserved ahead, as the log reserves its segments'
		if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, int64(10*per*1024)); err != nil {
			b.Fatal(err)
		}
		files[i] = f
	}
	run := func(writers, n int) time.Duration {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var total time.Duration
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(f *os.File) {
				defer wg.Done()
				buf := make([]byte, 1024)
				at, _ := f.Seek(0, io.SeekEnd)
				t0 := time.Now()
				for i := 0; i < n; i++ {
					if _, err := f.WriteAt(buf, at); err != nil {
						b.Error(err)
						return
					}
					at += int64(len(buf))
					if err := syscall.Fdatasync(int(f.Fd())); err != nil {
						b.Error(err)
						return
					}
				}
				mu.Lock()
				total += time.Since(t0)
				mu.Unlock()
			}(files[w])
		}
		wg.Wait()
		return total / time.Duration(writers*n)
	}
	const rounds = 5
	var one, three time.Duration
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		one += run(1, per)
		three += run(3, per)
	}
	b.StopTimer()
	b.ReportMetric(float64(one.Microseconds())/rounds, "one-writer-us/fsync")
	b.ReportMetric(float64(three.Microseconds())/rounds, "three-writers-us/fsync")
	b.ReportMetric(three.Seconds()/one.Seconds(), "x-slower")
}

// delayedSyncs is a file system whose files' syncs take delay longer.
type delayedSyncs struct {
	vfs.FS
	delay       time.Duration
	syncs, took atomic.Int64
}

func (d *delayedSyncs) Create(name string) (vfs.File, error) { return d.wrap(d.FS.Create(name)) }
func (d *delayedSyncs) Open(name string) (vfs.File, error)   { return d.wrap(d.FS.Open(name)) }
func (d *delayedSyncs) OpenRW(name string) (vfs.File, error) { return d.wrap(d.FS.OpenRW(name)) }

func (d *delayedSyncs) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return delayedFile{File: f, d: d}, nil
}

type delayedFile struct {
	vfs.File
	d *delayedSyncs
}

func (f delayedFile) Sync() error {
	t0 := time.Now()
	err := f.File.Sync()
	// a sleep in the kernel: the runtime's timers overshoot by hundreds of
	// microseconds on a busy machine
	ts := syscall.NsecToTimespec(int64(f.d.delay))
	if ts.Nano() > 0 {
		_ = syscall.Nanosleep(&ts, nil)
	}
	f.d.syncs.Add(1)
	f.d.took.Add(int64(time.Since(t0)))
	return err
}

// allocated returns the bytes this process has allocated so far.
func allocated() uint64 {
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// sluiceGC sets the collector's target of `sluice run`, which runs the
// replicated log (connect/runtime.GCPercent; this package cannot import
// it), unless GOGC is set, and returns what restores the target before.
// The benchmarks run the baseline and the cluster at it alike, and so do
// the nodes started as processes.
func sluiceGC() func() {
	if _, ok := os.LookupEnv("GOGC"); ok {
		return func() {}
	}
	old := debug.SetGCPercent(300)
	return func() { debug.SetGCPercent(old) }
}
