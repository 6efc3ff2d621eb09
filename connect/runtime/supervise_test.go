package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
)

// A sink that fails retriably is restarted with backoff and catches up by itself.
func TestSinkRetriableFailureRecovers(t *testing.T) {
	const events = 500
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	var calls atomic.Int64
	sink.Hook = func(batch []connect.Record) error {
		if n := calls.Add(1); n%3 == 0 && n < 30 {
			return errors.New("connection reset by peer")
		}
		return nil
	}
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	cfg := datagenConfig(events, 20, 25)
	h.add("gen", "datagen", cfg)
	h.add("out", "mem", map[string]string{"topics.regex": `gen\..*`, "consumer.override.max.poll.records": "20"})
	h.start()
	total := expectedRecords(settings(t, cfg), events)
	waitFor(t, "the sink to catch up", func() bool { return distinct(sink.Records()) == total })
	st := h.waitState("out", runtime.StateRunning)
	if st.Tasks[0].Restarts == 0 || sink.Opens() < 2 {
		t.Fatalf("status %+v, %d opens: want restarts after the injected failures", st.Tasks[0], sink.Opens())
	}
	checkSinkOrder(t, sink.Records(), total)
	// A failed write stores nothing and every successful one was committed, so a restarted
	// task resumes at the failed batch: nothing is written twice.
	if n := len(sink.Records()); n != total {
		t.Fatalf("the sink stored %d records for %d distinct ones: a restart resumed before the committed offsets", n, total)
	}
}

func distinct(recs []connect.Record) int {
	seen := map[runtime.TopicPartition]int64{}
	n := 0
	for _, r := range recs {
		tp := runtime.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		if o, ok := seen[tp]; !ok || r.Offset > o {
			seen[tp] = r.Offset
			n++
		}
	}
	return n
}

// A permanent failure leaves the task FAILED with its trace and the fix, and restarts nothing.
func TestSinkPermanentFailureFails(t *testing.T) {
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	sink.Hook = func([]connect.Record) error {
		return connect.Permanentf("index mapping rejects field price: set type to keyword")
	}
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	h.add("gen", "datagen", datagenConfig(100, 10, 10))
	h.add("out", "mem", map[string]string{"topics": "gen.inventory.customers"})
	h.start()
	st := h.waitState("out", runtime.StateFailed)
	want := "write to sink mem: index mapping rejects field price: set type to keyword"
	if !strings.HasPrefix(st.Tasks[0].Trace, want) || !strings.Contains(st.Tasks[0].Trace, "fix the cause, then restart the connector") {
		t.Fatalf("trace %q: want it to start with %q and name the fix", st.Tasks[0].Trace, want)
	}
	if st.Tasks[0].Restarts != 0 || sink.Opens() != 1 {
		t.Fatalf("status %+v, %d opens: a permanent failure must not restart", st.Tasks[0], sink.Opens())
	}
	if st.Connector.State != runtime.StateRunning {
		t.Fatalf("connector state %s, want RUNNING (only its task failed)", st.Connector.State)
	}
	// The failed batch's offsets were not committed.
	offs, _ := log.FetchOffsets(runtime.SinkGroup("out"))
	if len(offs) != 0 {
		t.Fatalf("committed offsets %v after a failed write", offs)
	}
	// Restart with onlyFailed restarts it; it fails again the same way.
	if err := h.rt.Restart(t.Context(), "out", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second open", func() bool { return sink.Opens() == 2 })
	h.waitState("out", runtime.StateFailed)
}

// poisonHook rejects the record of customers id 7 with a per-record WriteError.
func poisonHook(batch []connect.Record) error {
	var we connect.WriteError
	for i, r := range batch {
		id, _ := r.Key.(connect.Row).Get("id")
		if r.Topic == "gen.inventory.customers" && id == int64(7) && r.Value != nil {
			we.Failed = append(we.Failed, connect.RecordError{Index: i, Err: errors.New("document id 7 is poison")})
		}
	}
	if we.Failed != nil {
		return &we
	}
	return nil
}

// Under errors.tolerance=all a record the sink rejects goes to the dead-letter topic with the
// error and its origin in headers, and the pipeline goes on.
func TestPoisonRecordGoesToDLQ(t *testing.T) {
	const events = 300
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	sink.Hook = poisonHook
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	cfg := datagenConfig(events, 30, 30, "datagen.tables", "customers")
	h.add("gen", "datagen", cfg)
	h.add("out", "mem", map[string]string{
		"topics": "gen.inventory.customers", "errors.tolerance": "all",
		"errors.deadletterqueue.topic.name": "dlq-out",
	})
	h.start()
	s := settings(t, cfg)
	var poison []int64 // seqs of the events of id 7 with a value
	for i := int64(0); i < events; i++ {
		for _, r := range s.Records(i) {
			if id, _ := r.Key.(connect.Row).Get("id"); id == int64(7) && r.Value != nil {
				poison = append(poison, i)
			}
		}
	}
	total := expectedRecords(s, events)
	waitFor(t, "the sink to get every other record", func() bool { return distinct(sink.Records()) == total-len(poison) })
	waitFor(t, "the DLQ to hold the poison records", func() bool {
		n, _ := log.LatestOffset("dlq-out", 0)
		return n == int64(len(poison))
	})
	h.stop()
	dlq := log.Records("dlq-out", 0)
	st, _ := h.rt.Status("out")
	if st.Tasks[0].State == runtime.StateFailed || st.Tasks[0].Rejected != int64(len(poison)) {
		t.Fatalf("status %+v: want %d rejected records and no failure", st.Tasks[0], len(poison))
	}
	src := log.Records("gen.inventory.customers", 0)
	for i, d := range dlq {
		headers := map[string]string{}
		for _, h := range d.Headers {
			headers[h.Key] = string(h.Value)
		}
		off := headers[runtime.HeaderErrorOffset]
		orig := src[mustAtoi(t, off)]
		if string(orig.Key) != string(d.Key) || string(orig.Value) != string(d.Value) {
			t.Fatalf("DLQ record %d: key %s value %s, want the original %s %s", i, d.Key, d.Value, orig.Key, orig.Value)
		}
		want := map[string]string{
			"__sluice.version":              headers["__sluice.version"],
			runtime.HeaderErrorTopic:        "gen.inventory.customers",
			runtime.HeaderErrorPartition:    "0",
			runtime.HeaderErrorOffset:       off,
			runtime.HeaderErrorConnector:    "out",
			runtime.HeaderErrorTask:         "0",
			runtime.HeaderErrorStage:        "TASK_PUT",
			runtime.HeaderErrorClass:        "mem",
			runtime.HeaderErrorExceptionCls: "*errors.errorString",
			runtime.HeaderErrorMessage:      "document id 7 is poison",
			runtime.HeaderErrorStacktrace:   "document id 7 is poison",
		}
		if diff := cmp.Diff(want, headers); diff != "" {
			t.Fatalf("DLQ record %d headers (-want +got):\n%s", i, diff)
		}
		if headers["__sluice.version"] != string(orig.Headers[0].Value) {
			t.Fatalf("DLQ record %d lost the version header", i)
		}
	}
}

// Under errors.tolerance=none the poison record fails the task, naming the setting that would
// skip it, and nothing after it is committed.
func TestPoisonRecordStopsUnderToleranceNone(t *testing.T) {
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	sink.Hook = poisonHook
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	h.add("gen", "datagen", datagenConfig(300, 30, 30, "datagen.tables", "customers"))
	h.add("out", "mem", map[string]string{"topics": "gen.inventory.customers", "errors.deadletterqueue.topic.name": "dlq-out"})
	h.start()
	st := h.waitState("out", runtime.StateFailed)
	trace := st.Tasks[0].Trace
	for _, want := range []string{
		"the sink rejected the record at gen.inventory.customers-0 offset ",
		": document id 7 is poison; to skip such records set errors.tolerance=all (and errors.deadletterqueue.topic.name to keep them)",
	} {
		if !strings.Contains(trace, want) {
			t.Fatalf("trace %q lacks %q", trace, want)
		}
	}
	if _, err := log.Describe("dlq-out"); err == nil {
		t.Fatal("the DLQ topic was created under errors.tolerance=none")
	}
	offs, _ := log.FetchOffsets(runtime.SinkGroup("out"))
	poisonAt := int64(mustAtoi(t, between(trace, "offset ", ":")))
	for tp, o := range offs {
		if tp.Topic == "gen.inventory.customers" && o > poisonAt {
			t.Fatalf("committed offset %d is past the poison record at %d", o, poisonAt)
		}
	}
}

// A transform that rejects a record on the source side sends it to the DLQ (exactly once,
// like every source-side append) and the source goes on.
func TestSourceTransformRejectionGoesToDLQ(t *testing.T) {
	const events = 200
	log := runtimetest.NewLog()
	reject := connect.Plugin{Name: "reject-deletes", Kind: connect.KindTransform,
		NewTransform: func(connect.Config) (connect.Transform, error) { return rejectDeletes{}, nil }}
	reg := newRegistry(t, reject)
	h := newHarness(t, log, reg, func(o *runtime.Options) {
		o.Chain = func(reg *connect.Registry, cfg map[string]string) (connect.Transform, []connect.FieldError) {
			if cfg["transforms"] != "rd" || cfg["transforms.rd.type"] != "reject-deletes" {
				return nil, []connect.FieldError{{Key: "transforms", Message: "test chain: want rd"}}
			}
			return rejectDeletes{}, nil
		}
	})
	cfg := datagenConfig(events, 10, 20, "datagen.tables", "customers", "transforms", "rd", "transforms.rd.type", "reject-deletes",
		"errors.tolerance", "all", "errors.deadletterqueue.topic.name", "gen-dlq")
	h.add("gen", "datagen", cfg)
	h.start()
	h.waitCommitted(200)
	h.stop()
	s := settings(t, cfg)
	deletes := 0
	for i := int64(0); i < events; i++ {
		if s.Op(i) == connect.OpDelete {
			deletes++
		}
	}
	dlq := log.Records("gen-dlq", 0)
	if len(dlq) != deletes {
		t.Fatalf("DLQ holds %d records, want the %d delete events", len(dlq), deletes)
	}
	for _, d := range dlq {
		var stage, off string
		for _, h := range d.Headers {
			switch h.Key {
			case runtime.HeaderErrorStage:
				stage = string(h.Value)
			case runtime.HeaderErrorOffset:
				off = string(h.Value)
			}
		}
		if stage != "TRANSFORMATION" || off != "-1" {
			t.Fatalf("DLQ headers %v: want stage TRANSFORMATION and offset -1", d.Headers)
		}
	}
}

type rejectDeletes struct{}

func (rejectDeletes) Apply(r connect.Record) (connect.Record, bool, error) {
	if ev, err := connect.ParseChangeEvent(r.Value); err == nil && ev.Op == connect.OpDelete {
		return r, false, errors.New("deletes are not allowed here")
	}
	return r, true, nil
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("%q is not a number", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func between(s, a, b string) string {
	i := strings.Index(s, a)
	if i < 0 {
		return ""
	}
	s = s[i+len(a):]
	if j := strings.Index(s, b); j >= 0 {
		return s[:j]
	}
	return s
}

// backoffLog collects the backoff of each "task failed; restarting" line.
type backoffLog struct {
	mu       sync.Mutex
	backoffs []time.Duration
}

func (l *backoffLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *backoffLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *backoffLog) WithGroup(string) slog.Handler            { return l }
func (l *backoffLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "task failed; restarting" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "backoff" {
			l.mu.Lock()
			l.backoffs = append(l.backoffs, a.Value.Duration())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *backoffLog) get() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.backoffs...)
}

// Retriable failures restart the task after a backoff that doubles from the initial one up to
// errors.retry.delay.max.ms, and starts again from the initial one once the task made
// progress.
func TestRestartBackoff(t *testing.T) {
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	var failing atomic.Bool
	failing.Store(true)
	sink.Hook = func([]connect.Record) error {
		if failing.Load() {
			return errors.New("connection refused")
		}
		return nil
	}
	bl := &backoffLog{}
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), func(o *runtime.Options) {
		o.Logger = slog.New(bl)
		o.InitialBackoff = time.Millisecond
	})
	h.add("gen", "datagen", datagenConfig(0, 20, 5, "datagen.rate", "2000"))
	h.add("out", "mem", map[string]string{"topics.regex": `gen\..*`, "errors.retry.delay.max.ms": "8"})
	h.start()
	ms := time.Millisecond
	waitFor(t, "six restarts", func() bool { return len(bl.get()) >= 6 })
	if diff := cmp.Diff([]time.Duration{ms, 2 * ms, 4 * ms, 8 * ms, 8 * ms, 8 * ms}, bl.get()[:6]); diff != "" {
		t.Fatalf("backoffs of the first restarts (-want +got):\n%s", diff)
	}
	failing.Store(false)
	waitFor(t, "writes", func() bool { return len(sink.Records()) > 0 })
	n := len(bl.get())
	failing.Store(true)
	waitFor(t, "a restart after the writes", func() bool { return len(bl.get()) > n })
	if got := bl.get()[n]; got != ms {
		t.Fatalf("backoff after the task made progress: %v, want the initial %v", got, ms)
	}
}

// With errors.deadletterqueue.context.headers.enable=false a rejected record reaches the
// dead-letter topic with its own headers only.
func TestDLQWithoutContextHeaders(t *testing.T) {
	const events = 100
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	sink.Hook = poisonHook
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	cfg := datagenConfig(events, 30, 30, "datagen.tables", "customers")
	h.add("gen", "datagen", cfg)
	h.add("out", "mem", map[string]string{
		"topics": "gen.inventory.customers", "errors.tolerance": "all",
		"errors.deadletterqueue.topic.name":             "dlq-out",
		"errors.deadletterqueue.context.headers.enable": "false",
	})
	h.start()
	total := expectedRecords(settings(t, cfg), events)
	waitFor(t, "the sink to pass every record", func() bool {
		n, _ := log.LatestOffset("dlq-out", 0)
		return distinct(sink.Records())+int(n) == total
	})
	h.stop()
	dlq := log.Records("dlq-out", 0)
	if len(dlq) == 0 {
		t.Fatal("no record in the dead-letter topic")
	}
	src := log.Records("gen.inventory.customers", 0)
	for i, d := range dlq {
		var orig *runtime.LogRecord
		for j := range src {
			if string(src[j].Key) == string(d.Key) && string(src[j].Value) == string(d.Value) {
				orig = &src[j]
			}
		}
		if orig == nil {
			t.Fatalf("DLQ record %d (key %s) is not a record of the topic", i, d.Key)
		}
		if diff := cmp.Diff(orig.Headers, d.Headers); diff != "" {
			t.Fatalf("DLQ record %d headers (-original +got):\n%s", i, diff)
		}
	}
}

// sinkShape is a sink-side chain: tombstones are dropped, deletes rejected, every other record
// gets a header naming the chain.
type sinkShape struct{}

func (sinkShape) Apply(r connect.Record) (connect.Record, bool, error) {
	if r.Value == nil {
		return r, false, nil
	}
	if ev, err := connect.ParseChangeEvent(r.Value); err == nil && ev.Op == connect.OpDelete {
		return r, false, errors.New("deletes are not allowed here")
	}
	r.Headers = append(r.Headers.Clone(), connect.Header{Key: "shaped", Value: []byte("yes")})
	return r, true, nil
}

// Transforms of a sink apply between the log and the sink: what they change reaches the sink,
// what they drop does not (its offset is committed all the same), and what they reject goes to
// the dead-letter topic with stage TRANSFORMATION and its offset.
func TestSinkSideTransforms(t *testing.T) {
	const events = 200
	log := runtimetest.NewLog()
	sink := runtimetest.NewSink()
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), func(o *runtime.Options) {
		o.Chain = func(reg *connect.Registry, cfg map[string]string) (connect.Transform, []connect.FieldError) {
			if cfg["transforms"] != "shape" {
				return nil, []connect.FieldError{{Key: "transforms", Message: "test chain: want shape"}}
			}
			return sinkShape{}, nil
		}
	})
	cfg := datagenConfig(events, 10, 20, "datagen.tables", "customers")
	h.add("gen", "datagen", cfg)
	h.add("out", "mem", map[string]string{"topics": "gen.inventory.customers", "transforms": "shape",
		"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "out-dlq"})
	h.start()
	s := settings(t, cfg)
	var kept, deletes, tombstones int
	for i := int64(0); i < events; i++ {
		for _, r := range s.Records(i) {
			switch {
			case r.Value == nil:
				tombstones++
			case s.Op(i) == connect.OpDelete:
				deletes++
			default:
				kept++
			}
		}
	}
	if deletes == 0 || tombstones == 0 {
		t.Fatalf("%d deletes and %d tombstones: the test proves little", deletes, tombstones)
	}
	waitFor(t, "the sink to commit every record", func() bool {
		end, _ := log.LatestOffset("gen.inventory.customers", 0)
		offs, _ := log.FetchOffsets(runtime.SinkGroup("out"))
		return end == int64(kept+deletes+tombstones) && offs[runtime.TopicPartition{Topic: "gen.inventory.customers"}] == end
	})
	h.stop()
	recs := sink.Records()
	if distinct(recs) != kept {
		t.Fatalf("the sink got %d records, want the %d that are neither deletes nor tombstones", distinct(recs), kept)
	}
	for _, r := range recs {
		if v, ok := r.Headers.Get("shaped"); !ok || string(v) != "yes" {
			t.Fatalf("offset %d reached the sink without the chain's header: %v", r.Offset, r.Headers)
		}
	}
	dlq := log.Records("out-dlq", 0)
	if len(dlq) != deletes {
		t.Fatalf("the dead-letter topic holds %d records, want the %d deletes", len(dlq), deletes)
	}
	for _, d := range dlq {
		var stage, off string
		for _, h := range d.Headers {
			switch h.Key {
			case runtime.HeaderErrorStage:
				stage = string(h.Value)
			case runtime.HeaderErrorOffset:
				off = string(h.Value)
			}
		}
		if stage != "TRANSFORMATION" || off == "" || off == "-1" {
			t.Fatalf("DLQ headers %v: want stage TRANSFORMATION and the record's offset", d.Headers)
		}
	}
}

// A failed append to the dead-letter topic fails the batch before its offsets are committed,
// so the restarted task rejects the record again: no rejected record is lost.
func TestDLQAppendFailureLosesNothing(t *testing.T) {
	const events = 300
	log := runtimetest.NewLog()
	var dlqFailures atomic.Int64
	log.Hooks.BeforeAppend = func(topic string, _ int32, _ []runtime.LogRecord) error {
		if topic == "dlq-out" && dlqFailures.Add(1)%2 == 1 {
			return errors.New("injected: disk full")
		}
		return nil
	}
	sink := runtimetest.NewSink()
	sink.Hook = poisonHook
	h := newHarness(t, log, newRegistry(t, sink.Plugin("mem")), nil)
	cfg := datagenConfig(events, 30, 30, "datagen.tables", "customers")
	h.add("gen", "datagen", cfg)
	h.add("out", "mem", map[string]string{
		"topics": "gen.inventory.customers", "errors.tolerance": "all",
		"errors.deadletterqueue.topic.name": "dlq-out", "consumer.override.max.poll.records": "20",
	})
	h.start()
	s := settings(t, cfg)
	poison := 0
	for i := int64(0); i < events; i++ {
		for _, r := range s.Records(i) {
			if id, _ := r.Key.(connect.Row).Get("id"); id == int64(7) && r.Value != nil {
				poison++
			}
		}
	}
	total := expectedRecords(s, events)
	waitFor(t, "the sink to commit every record", func() bool {
		end, _ := log.LatestOffset("gen.inventory.customers", 0)
		offs, _ := log.FetchOffsets(runtime.SinkGroup("out"))
		return end == int64(total) && offs[runtime.TopicPartition{Topic: "gen.inventory.customers"}] == end
	})
	h.stop()
	if dlqFailures.Load() < 2 {
		t.Fatalf("%d appends to the dead-letter topic: the injected failures did not happen", dlqFailures.Load())
	}
	seen := map[string]bool{}
	for _, d := range log.Records("dlq-out", 0) {
		for _, hd := range d.Headers {
			if hd.Key == runtime.HeaderErrorOffset {
				seen[string(hd.Value)] = true
			}
		}
	}
	if len(seen) != poison {
		t.Fatalf("the dead-letter topic holds %d distinct rejected records, want %d", len(seen), poison)
	}
}

// poisonByOp fails on deletes and gives updates a value outside the data model (the value
// converter then fails on it).
type poisonByOp struct{}

func (poisonByOp) Apply(r connect.Record) (connect.Record, bool, error) {
	ev, err := connect.ParseChangeEvent(r.Value)
	switch {
	case err != nil:
	case ev.Op == connect.OpDelete:
		return r, false, errors.New("deletes are not allowed here")
	case ev.Op == connect.OpUpdate:
		r.Value = connect.Row{{Name: "bad", Value: struct{}{}}}
	}
	return r, true, nil
}

// Records rejected by a transform and by the value converter reach the dead-letter topic in the
// order read, none taken for a replay, in batches whose values are encoded on one goroutine
// and on two.
func TestSourceRejectionsKeepTheirOrder(t *testing.T) {
	for _, batch := range []int64{20, 300} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			const events = 900
			log := runtimetest.NewLog()
			h := newHarness(t, log, newRegistry(t), func(o *runtime.Options) {
				o.Chain = func(*connect.Registry, map[string]string) (connect.Transform, []connect.FieldError) {
					return poisonByOp{}, nil
				}
			})
			cfg := datagenConfig(events, 10, batch, "datagen.tables", "customers", "transforms", "p", "transforms.p.type", "poison",
				"errors.tolerance", "all", "errors.deadletterqueue.topic.name", "gen-dlq")
			h.add("gen", "datagen", cfg)
			h.start()
			h.waitCommitted(events)
			h.stop()
			s := settings(t, cfg)
			var want []string // the stage and key of each rejected record, in source order
			kept := 0
			for i := int64(0); i < events; i++ {
				for _, r := range s.Records(i) {
					key, _ := connect.AppendJSON(nil, r.Key)
					ev, err := connect.ParseChangeEvent(r.Value)
					switch {
					case err == nil && ev.Op == connect.OpDelete:
						want = append(want, "TRANSFORMATION "+string(key))
					case err == nil && ev.Op == connect.OpUpdate:
						want = append(want, "VALUE_CONVERTER "+string(key))
					default:
						kept++
					}
				}
			}
			var got []string
			for _, d := range log.Records("gen-dlq", 0) {
				for _, h := range d.Headers {
					if h.Key == runtime.HeaderErrorStage {
						got = append(got, string(h.Value)+" "+string(d.Key))
					}
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("dead-letter topic holds %d records, want %d in source order; first difference at %d", len(got), len(want), firstDiff(got, want))
			}
			n := 0
			for p := int32(0); ; p++ {
				end, err := log.LatestOffset("gen.inventory.customers", p)
				if err != nil {
					break
				}
				n += int(end)
			}
			if n != kept {
				t.Fatalf("the topic holds %d records, want %d", n, kept)
			}
		})
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
