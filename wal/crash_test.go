package wal

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The SIGKILL crash test runs this test binary as a child process that
// appends in a loop and prints each acknowledged batch; the parent kills it
// at a random moment, reopens the log and checks every acknowledged batch.

const (
	crashChildEnv  = "SLUICE_WAL_CRASH_CHILD"
	crashRunEnv    = "SLUICE_WAL_CRASH_RUN"
	crashItersEnv  = "SLUICE_WAL_CRASH_ITERATIONS"
	crashTopic     = "crash"
	crashParts     = 2
	crashAppenders = 4
)

func crashTopicConfig() TopicConfig {
	cfg := DefaultTopicConfig()
	cfg.Partitions = crashParts
	cfg.SegmentBytes = 64 << 10 // many rolls
	cfg.IndexIntervalBytes = 512
	return cfg
}

// crashChildMain appends batches from several goroutines and prints
// "ack <partition> <base> <last> <run> <batch> <n>" after each returns.
func crashChildMain() {
	dir := os.Getenv(crashChildEnv)
	run, _ := strconv.Atoi(os.Getenv(crashRunEnv))
	l, err := Open(dir, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	if err := l.CreateTopic(crashTopic, crashTopicConfig()); err != nil && !strings.Contains(err.Error(), "exists") {
		fmt.Fprintln(os.Stderr, "child create:", err)
		os.Exit(2)
	}
	if err := l.CreateTopic(srcTopic, srcTopicConfig()); err != nil && !strings.Contains(err.Error(), "exists") {
		fmt.Fprintln(os.Stderr, "child create:", err)
		os.Exit(2)
	}
	var outMu sync.Mutex
	out := os.Stdout
	var wg sync.WaitGroup
	for g := 0; g < srcParts; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sourceTask(l, int32(g), run, &outMu)
		}()
	}
	for g := 0; g < crashAppenders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(run), uint64(g)))
			for b := 0; ; b++ {
				part := int32(r.IntN(crashParts))
				n := 1 + r.IntN(20)
				recs := make([]Record, n)
				for i := range recs {
					recs[i] = Record{
						Key:   []byte(strconv.Itoa(g)),
						Value: fmt.Appendf(nil, "%d-%d-%d/%d/%s", run, g, b, i, strings.Repeat("x", r.IntN(300))),
					}
				}
				res, err := l.Append(context.Background(), crashTopic, part, recs, AppendOptions{})
				if err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(3)
				}
				outMu.Lock()
				fmt.Fprintf(out, "ack %d %d %d %d-%d-%d %d\n", part, res.BaseOffset, res.LastOffset, run, g, b, n)
				outMu.Unlock()
			}
		}()
	}
	wg.Wait()
}

const (
	srcTopic = "src"
	srcParts = 2
)

func srcTopicConfig() TopicConfig {
	cfg := DefaultTopicConfig()
	cfg.Partitions = srcParts
	cfg.SegmentBytes = 16 << 10
	return cfg
}

// sourceTask plays a source connector: it numbers its items 0, 1, 2, ...
// and appends them with the number of the last item as the source
// position, as an idempotent producer. On start it finds where it stopped
// by reading its producer state back from the log, so that across kills
// every item lands exactly once, in order. It prints "src <partition>
// <last item>" after each acknowledged append.
func sourceTask(l *Log, part int32, run int, outMu *sync.Mutex) {
	ctx := context.Background()
	id, epoch, err := l.InitProducer(ctx, fmt.Sprint("source-", part))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child init producer:", err)
		os.Exit(3)
	}
	next := 0
	if st, ok := l.ProducerState(srcTopic, part, id); ok {
		last, err := strconv.Atoi(string(st.SourcePosition))
		if err != nil {
			fmt.Fprintln(os.Stderr, "child: bad source position", st.SourcePosition)
			os.Exit(3)
		}
		next = last + 1
	}
	r := rand.New(rand.NewPCG(uint64(run), uint64(100+part)))
	seq := int32(0)
	for {
		n := 1 + r.IntN(8)
		recs := make([]Record, n)
		for i := range recs {
			recs[i] = Record{Key: []byte("item"), Value: fmt.Appendf(nil, "%d", next+i)}
		}
		last := next + n - 1
		opts := AppendOptions{ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq, SourcePosition: fmt.Append(nil, last)}
		if _, err := l.Append(ctx, srcTopic, part, recs, opts); err != nil {
			fmt.Fprintln(os.Stderr, "child source append:", err)
			os.Exit(3)
		}
		// A retry of the same batch (as after a lost acknowledgement)
		// must not add anything.
		if r.IntN(4) == 0 {
			if res, err := l.Append(ctx, srcTopic, part, recs, opts); err != nil || !res.Duplicate {
				fmt.Fprintln(os.Stderr, "child source retry not deduplicated:", res, err)
				os.Exit(3)
			}
		}
		outMu.Lock()
		fmt.Printf("src %d %d\n", part, last)
		outMu.Unlock()
		seq += int32(n)
		next = last + 1
	}
}

// checkSourcePartition checks that a source task's items are exactly
// 0..n-1, in order, and include every acknowledged one.
func checkSourcePartition(t *testing.T, it int, recs []Record, acked int) {
	t.Helper()
	for i, r := range recs {
		if string(r.Value) != strconv.Itoa(i) {
			t.Fatalf("iteration %d: source item at position %d is %q, want %d (lost or duplicated item)", it, i, r.Value, i)
		}
	}
	if acked >= len(recs) {
		t.Fatalf("iteration %d: acknowledged source item %d missing (log has %d items)", it, acked, len(recs))
	}
}

type ackedBatch struct {
	part       int32
	base, last int64
	id         string
	n          int
}

func crashIterations(t *testing.T) int {
	n := 20
	if os.Getenv("SLUICE_SOAK") != "" {
		n = 500
	}
	if s := os.Getenv(crashItersEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", crashItersEnv, s, err)
		}
		n = v
	}
	return n
}

// TestCrashSIGKILL kills an appending child process many times; after each
// kill every acknowledged batch must be in the log, whole, in order, once,
// and nothing seen before may disappear.
func TestCrashSIGKILL(t *testing.T) {
	dir := t.TempDir()
	iters := crashIterations(t)
	rng := rand.New(rand.NewPCG(42, uint64(time.Now().UnixNano())))
	var acked []ackedBatch
	srcAcked := make([]int, srcParts)
	for i := range srcAcked {
		srcAcked[i] = -1
	}
	prev := make([][]Record, crashParts)
	for it := 0; it < iters; it++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashRunEnv+"="+strconv.Itoa(it))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		readDone := make(chan struct{})
		go func() {
			defer close(readDone)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Wait for a few acks (the child is up), then kill at a random point.
		kill := time.After(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		started := false
		deadline := time.After(30 * time.Second)
	collect:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break collect
				}
				if strings.HasPrefix(line, "src ") {
					var part, last int
					if _, err := fmt.Sscanf(line, "src %d %d", &part, &last); err != nil {
						t.Fatalf("bad child line %q", line)
					}
					srcAcked[part] = max(srcAcked[part], last)
					continue
				}
				acked = append(acked, parseAck(t, line))
				started = true
			case <-kill:
				if started {
					cmd.Process.Signal(syscall.SIGKILL)
					kill = nil
				} else {
					kill = time.After(10 * time.Millisecond)
				}
			case <-deadline:
				cmd.Process.Signal(syscall.SIGKILL)
				t.Fatalf("iteration %d: child produced no ack in time; stderr: %s", it, stderr.String())
			}
		}
		<-readDone
		werr := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("iteration %d: child exited by itself (%v); stderr: %s", it, werr, stderr.String())
		}
		l, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("iteration %d: reopen: %v", it, err)
		}
		for p := int32(0); p < crashParts; p++ {
			recs, err := tryReadAll(l, crashTopic, p)
			if err != nil {
				l.Close()
				t.Fatalf("iteration %d: read partition %d: %v", it, p, err)
			}
			checkCrashPartition(t, it, p, recs, prev[p], acked)
			prev[p] = recs
		}
		for p := int32(0); p < srcParts; p++ {
			recs, err := tryReadAll(l, srcTopic, p)
			if err != nil {
				l.Close()
				t.Fatalf("iteration %d: read source partition %d: %v", it, p, err)
			}
			checkSourcePartition(t, it, recs, srcAcked[p])
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d kills, %d acknowledged batches verified; source items acknowledged: %v", iters, len(acked), srcAcked)
}

func parseAck(t *testing.T, line string) ackedBatch {
	var a ackedBatch
	if _, err := fmt.Sscanf(line, "ack %d %d %d %s %d", &a.part, &a.base, &a.last, &a.id, &a.n); err != nil {
		t.Fatalf("bad child line %q: %v", line, err)
	}
	return a
}

func checkCrashPartition(t *testing.T, it int, p int32, recs, prev []Record, acked []ackedBatch) {
	t.Helper()
	// Dense offsets from 0.
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("iteration %d partition %d: record %d has offset %d", it, p, i, r.Offset)
		}
	}
	// Nothing committed before disappears or changes.
	if len(recs) < len(prev) {
		t.Fatalf("iteration %d partition %d: %d records, had %d before the crash", it, p, len(recs), len(prev))
	}
	for i := range prev {
		if string(prev[i].Value) != string(recs[i].Value) {
			t.Fatalf("iteration %d partition %d: offset %d changed from %q to %q", it, p, i, prev[i].Value, recs[i].Value)
		}
	}
	// Batches are whole: records of one batch are consecutive, numbered
	// 0..n-1, and each batch appears once.
	seen := map[string]bool{}
	for i := 0; i < len(recs); {
		id, idx := splitCrashValue(string(recs[i].Value))
		if idx != 0 {
			t.Fatalf("iteration %d partition %d: offset %d starts batch %s at record %d (partial batch)", it, p, i, id, idx)
		}
		if seen[id] {
			t.Fatalf("iteration %d partition %d: batch %s appears twice", it, p, id)
		}
		seen[id] = true
		j := i + 1
		for j < len(recs) {
			id2, idx2 := splitCrashValue(string(recs[j].Value))
			if id2 != id {
				break
			}
			if idx2 != j-i {
				t.Fatalf("iteration %d partition %d: batch %s out of order at offset %d", it, p, id, j)
			}
			j++
		}
		i = j
	}
	// Every acknowledged batch is there, whole, at its offsets.
	for _, a := range acked {
		if a.part != p {
			continue
		}
		if a.last >= int64(len(recs)) {
			t.Fatalf("iteration %d partition %d: acknowledged batch %s at %d..%d lost (log ends at %d)", it, p, a.id, a.base, a.last, len(recs))
		}
		if int(a.last-a.base+1) != a.n {
			t.Fatalf("iteration %d: ack of %s has %d offsets for %d records", it, a.id, a.last-a.base+1, a.n)
		}
		for o := a.base; o <= a.last; o++ {
			id, idx := splitCrashValue(string(recs[o].Value))
			if id != a.id || idx != int(o-a.base) {
				t.Fatalf("iteration %d partition %d: offset %d holds %s[%d], acknowledged as %s[%d]", it, p, o, id, idx, a.id, o-a.base)
			}
		}
	}
}

func splitCrashValue(v string) (string, int) {
	parts := strings.SplitN(v, "/", 3)
	if len(parts) < 2 {
		return v, -1
	}
	idx, err := strconv.Atoi(parts[1])
	if err != nil {
		return v, -1
	}
	return parts[0], idx
}
