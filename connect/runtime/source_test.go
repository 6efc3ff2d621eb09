package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/wal"
)

// The pipeline datagen → log → sink delivers every event once into the log and at least once,
// in order per partition, to the sink.
func TestPipelineDeliversEverything(t *testing.T) {
	const events = 3000
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), func(o *runtime.Options) { o.TopicDefaults.Partitions = 3 })
	cfg := datagenConfig(events, 40, 64)
	h.add("gen", "datagen", cfg)
	h.add("out", "mem", map[string]string{"topics.regex": `gen\..*`, "consumer.override.max.poll.records": "100"})
	h.start()
	s := settings(t, cfg)
	total := expectedRecords(s, events)
	waitFor(t, "the sink to receive every record", func() bool { return len(sink.Records()) >= total })
	h.stop()
	checkExactlyOnce(t, log, s, events)
	checkSinkOrder(t, sink.Records(), total)
	st, _ := h.rt.Status("gen")
	if st.Tasks[0].Records != int64(total) || st.Tasks[0].Replayed != 0 || st.Tasks[0].Restarts != 0 {
		t.Errorf("source status %+v: want %d records, no replays, no restarts", st.Tasks[0], total)
	}
	// The committed position is the end of the last batch.
	pos, err := h.rt.SourceOffset(t.Context(), "gen")
	if err != nil || string(pos.State) != `{"v":1,"next":3000}` {
		t.Errorf("committed position %s, %v; want state {\"v\":1,\"next\":3000}", pos, err)
	}
}

func expectedRecords(s interface{ Records(int64) []connect.Record }, n int64) int {
	total := 0
	for i := int64(0); i < n; i++ {
		total += len(s.Records(i))
	}
	return total
}

// checkSinkOrder checks that, without duplicates by offset, the sink saw every record once,
// offsets contiguous from 0 in every partition.
func checkSinkOrder(t *testing.T, recs []connect.Record, total int) {
	t.Helper()
	next := map[runtime.TopicPartition]int64{}
	seen := 0
	for _, r := range recs {
		tp := runtime.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		switch {
		case r.Offset < next[tp]: // a redelivery after a restart
		case r.Offset == next[tp]:
			next[tp]++
			seen++
		default:
			t.Fatalf("%s-%d: offset %d arrived before %d", r.Topic, r.Partition, r.Offset, next[tp])
		}
	}
	if seen != total {
		t.Fatalf("sink saw %d distinct records, want %d", seen, total)
	}
}

// Crashes anywhere around the appends (an append that fails before or after it is durable)
// restart the task, and the log still holds every record exactly once: replays are dropped by
// the source position stored with each partition's last append.
func TestSourceExactlyOnceAcrossFailedAppends(t *testing.T) {
	const events = 4000
	log := runtimetest.NewLog()
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	failures := 0
	fail := func(topic string) bool {
		mu.Lock()
		defer mu.Unlock()
		if topic == runtime.SourceOffsetsTopic && rng.IntN(8) == 0 || rng.IntN(25) == 0 {
			failures++
			return true
		}
		return false
	}
	log.Hooks.BeforeAppend = func(topic string, _ int32, _ []runtime.LogRecord) error {
		if fail(topic) {
			return errors.New("injected: disk full")
		}
		return nil
	}
	log.Hooks.AfterAppend = func(topic string, _ int32, _ []runtime.LogRecord) error {
		if fail(topic) {
			return errors.New("injected: crashed after the append was durable")
		}
		return nil
	}
	h := newHarness(t, log, newRegistry(t), func(o *runtime.Options) { o.TopicDefaults.Partitions = 4 })
	cfg := datagenConfig(events, 30, 50, "errors.retry.delay.max.ms", "20")
	h.add("gen", "datagen", cfg)
	h.start()
	s := settings(t, cfg)
	h.waitCommitted(4000)
	h.stop()
	checkExactlyOnce(t, log, s, events)
	st, _ := h.rt.Status("gen")
	if st.Tasks[0].Restarts == 0 || st.Tasks[0].Replayed == 0 {
		t.Fatalf("status %+v: the injected failures (%d) should have caused restarts and replays", st.Tasks[0], failures)
	}
	t.Logf("%d injected failures, %d restarts, %d replayed records dropped", failures, st.Tasks[0].Restarts, st.Tasks[0].Replayed)
}

// ackCheckSource checks, at each Ack, that the log already holds what the acknowledged
// position covers: the records of every event before it and the position itself.
type ackCheckSource struct {
	connect.Source
	check func(upTo connect.Position)
}

func (s *ackCheckSource) Ack(ctx context.Context, upTo connect.Position) error {
	s.check(upTo)
	return s.Source.Ack(ctx, upTo)
}

// The source is acknowledged only for what is durable in the log (DESIGN.md §3.1): when Ack
// runs, the records up to the acknowledged position are appended and the position is the
// committed one, so a database may release its changes.
func TestSourceAckedOnlyAfterAppend(t *testing.T) {
	// Batches of three tables over three partitions are appended part by part, concurrently;
	// batches of one table in one partition are pipelined (the next is appended once the log
	// placed the previous one).
	// At 5000 events/s the 2000 events take 0.4 s: enough commits to check (at 20000/s, a
	// loaded machine under the race detector once saw 4).
	t.Run("partitions=3", func(t *testing.T) {
		testAckedOnlyAfterAppend(t, 3, datagenConfig(2000, 40, 20, "datagen.rate", "5000"))
	})
	t.Run("partitions=1", func(t *testing.T) {
		testAckedOnlyAfterAppend(t, 1, datagenConfig(2000, 40, 20, "datagen.rate", "5000", "datagen.tables", "customers"))
	})
}

func testAckedOnlyAfterAppend(t *testing.T, partitions int32, cfg map[string]string) {
	log := runtimetest.NewLog()
	s := settings(t, cfg)
	var (
		mu       sync.Mutex
		problems []string
		acks     int
		h        *harness
	)
	// An append is durable when it returns; the log has placed it (and the runtime may start
	// the next append) a moment before. Only durable records count.
	var durable atomic.Int64
	log.Hooks.AfterAppend = func(topic string, _ int32, recs []runtime.LogRecord) error {
		if strings.HasPrefix(topic, "gen.") {
			time.Sleep(200 * time.Microsecond) // placed, not yet durable: an ack now is early
			durable.Add(int64(len(recs)))
		}
		return nil
	}
	inLog := func() int64 { return durable.Load() }
	check := func(upTo connect.Position) {
		var st struct {
			Next int64 `json:"next"`
		}
		if err := json.Unmarshal(upTo.State, &st); err != nil {
			mu.Lock()
			problems = append(problems, fmt.Sprintf("ack of %s: %v", upTo, err))
			mu.Unlock()
			return
		}
		want := int64(expectedRecords(s, st.Next))
		have := inLog()
		committed, err := h.rt.SourceOffset(context.Background(), "gen")
		mu.Lock()
		defer mu.Unlock()
		acks++
		switch {
		case have < want:
			problems = append(problems, fmt.Sprintf("ack of %s with %d records in the log, want at least %d", upTo.State, have, want))
		case err != nil || committed.Compare(upTo) < 0:
			problems = append(problems, fmt.Sprintf("ack of %s before it was committed (committed %s, %v)", upTo.State, committed.State, err))
		}
	}
	p := datagen.Plugin()
	inner := p.NewSource
	p.Name, p.NewSource = "checked", func(cfg connect.Config, env connect.Env) (connect.Source, error) {
		src, err := inner(cfg, env)
		return &ackCheckSource{Source: src, check: check}, err
	}
	h = newHarness(t, log, newRegistry(t, p), func(o *runtime.Options) { o.TopicDefaults.Partitions = partitions })
	h.add("gen", "checked", cfg)
	h.start()
	h.waitCommitted(2000)
	h.stop()
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("%d of %d acks ahead of the log, first: %s", len(problems), acks, problems[0])
	}
	if acks < 5 {
		t.Fatalf("%d acks: the check above proves little", acks)
	}
	t.Logf("%d acks checked", acks)
}

// repeatSource re-emits every third batch once more, as a source that reconnects to its
// server and reads part of what it returned again, without a restart of its task.
type repeatSource struct {
	connect.Source
	reads int
	last  connect.Batch
}

func (s *repeatSource) Read(ctx context.Context) (connect.Batch, error) {
	s.reads++
	if s.reads%3 == 0 && len(s.last.Records) > 0 {
		again := s.last
		s.last = connect.Batch{}
		return again, nil
	}
	b, err := s.Source.Read(ctx)
	s.last = b
	return b, err
}

// Records a source returns again within one run (not only after a restart) are dropped: the
// log holds every event once.
func TestSourceRepeatsWithinARun(t *testing.T) {
	const events = 1000
	log := runtimetest.NewLog()
	p := datagen.Plugin()
	inner := p.NewSource
	p.Name, p.NewSource = "repeating", func(cfg connect.Config, env connect.Env) (connect.Source, error) {
		src, err := inner(cfg, env)
		return &repeatSource{Source: src}, err
	}
	h := newHarness(t, log, newRegistry(t, p), func(o *runtime.Options) { o.TopicDefaults.Partitions = 3 })
	cfg := datagenConfig(events, 40, 10)
	h.add("gen", "repeating", cfg)
	h.start()
	h.waitCommitted(1000)
	h.stop()
	checkExactlyOnce(t, log, settings(t, cfg), events)
	st, _ := h.rt.Status("gen")
	if st.Tasks[0].Restarts != 0 || st.Tasks[0].Replayed == 0 {
		t.Fatalf("status %+v: want replayed records dropped without a restart", st.Tasks[0])
	}
}

// Topics of one connector with their own partition counts: every record is in the partition
// its key picks among its own topic's partitions, also when the topics alternate within a
// batch (the router looks a topic's partitions up once per batch and topic).
func TestSourceTopicsOfDifferentPartitionCounts(t *testing.T) {
	const events = 1500
	log := runtimetest.NewLog()
	for topic, n := range map[string]int32{"gen.inventory.orders": 5, "gen.inventory.customers": 2} {
		cfg := wal.DefaultTopicConfig()
		cfg.Partitions = n
		if err := log.CreateTopic(topic, cfg); err != nil {
			t.Fatal(err)
		}
	}
	h := newHarness(t, log, newRegistry(t), func(o *runtime.Options) { o.TopicDefaults.Partitions = 3 })
	cfg := datagenConfig(events, 40, 50)
	h.add("gen", "datagen", cfg)
	h.start()
	h.waitCommitted(events)
	h.stop()
	s := settings(t, cfg)
	if len(s.Tables) < 3 {
		t.Fatalf("datagen tables %v: want three or more", s.Tables)
	}
	checkExactlyOnce(t, log, s, events)
}

// stateFailingLog is a log that sometimes cannot tell a producer's state, as a replicated log
// whose partition leader does not answer: ProducerStateContext then fails, and ProducerState
// (as the replicated log's does) says "never appended".
type stateFailingLog struct {
	*runtimetest.Log
	fail func() bool
}

func (l stateFailingLog) ProducerStateContext(_ context.Context, topic string, part int32, id int64) (wal.ProducerState, bool, error) {
	if l.fail() {
		return wal.ProducerState{}, false, errors.New("injected: no leader answered")
	}
	st, ok := l.Log.ProducerState(topic, part, id)
	return st, ok, nil
}

func (l stateFailingLog) ProducerState(topic string, part int32, id int64) (wal.ProducerState, bool) {
	if l.fail() {
		return wal.ProducerState{}, false
	}
	return l.Log.ProducerState(topic, part, id)
}

// A restarted task whose log cannot tell it where its last batch in a partition ended fails
// again (and restarts), rather than taking the partition for one it never wrote: the records
// it replays there would land twice.
func TestSourceExactlyOnceWhenProducerStateFails(t *testing.T) {
	const events = 3000
	mem := runtimetest.NewLog()
	rng := rand.New(rand.NewPCG(3, 4))
	var mu sync.Mutex
	var crashes, unanswered int
	mem.Hooks.AfterAppend = func(topic string, _ int32, _ []runtime.LogRecord) error {
		mu.Lock()
		defer mu.Unlock()
		if topic != runtime.SourceOffsetsTopic && rng.IntN(20) == 0 {
			crashes++
			return errors.New("injected: crashed after the append was durable")
		}
		return nil
	}
	log := stateFailingLog{Log: mem, fail: func() bool {
		mu.Lock()
		defer mu.Unlock()
		if rng.IntN(10) == 0 {
			unanswered++
			return true
		}
		return false
	}}
	st := runGen(t, log, 4, datagenConfig(events, 30, 50, "errors.retry.delay.max.ms", "20"), events)
	mu.Lock()
	defer mu.Unlock()
	if st.Replayed == 0 || unanswered == 0 {
		t.Fatalf("status %+v, %d unanswered producer states: the crashes (%d) should have caused replays", st, unanswered, crashes)
	}
	t.Logf("%d crashes, %d unanswered producer states, %d restarts, %d replayed records dropped", crashes, unanswered, st.Restarts, st.Replayed)
}

// placedLossLog is a log that sometimes loses a batch after it placed it (reported Written):
// as a replicated log whose leader proposed it and then lost its leadership before it
// committed. The batch is not stored; the producer's next batch then finds a gap.
type placedLossLog struct {
	*runtimetest.Log
	lose func(topic string) bool
}

func (l placedLossLog) Append(ctx context.Context, topic string, part int32, recs []wal.Record, opts wal.AppendOptions) (wal.AppendResult, error) {
	if opts.Written != nil && l.lose(topic) {
		opts.Written()
		return wal.AppendResult{}, errors.New("injected: placed, then lost with the leadership")
	}
	return l.Log.Append(ctx, topic, part, recs, opts)
}

// A batch the log placed, then lost, fails its append even though the task already sent the
// next one: the task restarts from the position committed before it, and the log ends with
// every record once. The source is throttled, so that the position of the lost batch would
// be committed before the next batch finds the gap, were the failure not seen.
func TestSourceExactlyOnceWhenAPlacedAppendIsLost(t *testing.T) {
	const events = 2000
	mem := runtimetest.NewLog()
	rng := rand.New(rand.NewPCG(5, 6))
	var mu sync.Mutex
	lost := 0
	log := placedLossLog{Log: mem, lose: func(topic string) bool {
		mu.Lock()
		defer mu.Unlock()
		if topic != runtime.SourceOffsetsTopic && rng.IntN(10) == 0 {
			lost++
			return true
		}
		return false
	}}
	cfg := datagenConfig(events, 30, 20, "datagen.tables", "orders", "datagen.rate", "4000", "errors.retry.delay.max.ms", "20")
	st := runGen(t, log, 1, cfg, events)
	mu.Lock()
	defer mu.Unlock()
	if lost == 0 || st.Restarts == 0 {
		t.Fatalf("status %+v: the %d lost batches should have restarted the task", st, lost)
	}
	t.Logf("%d batches lost after they were placed, %d restarts, %d replayed records dropped", lost, st.Restarts, st.Replayed)
}

// runGen runs the datagen connector gen on log (topics of partitions partitions) until its
// first events events are committed, checks that the log holds them exactly once, and
// returns the task's status.
func runGen(t *testing.T, log runtime.Log, partitions int32, cfg map[string]string, events int64) runtime.TaskStatus {
	t.Helper()
	h := newHarness(t, log, newRegistry(t), func(o *runtime.Options) { o.TopicDefaults.Partitions = partitions })
	h.add("gen", "datagen", cfg)
	h.start()
	h.waitCommitted(events)
	h.stop()
	checkExactlyOnce(t, log, settings(t, cfg), events)
	st, _ := h.rt.Status("gen")
	return st.Tasks[0]
}
