package runtime_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/sinks/file"
	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/wal"
)

// harness runs a runtime over a log in a test.
type harness struct {
	t      *testing.T
	log    runtime.Log
	reg    *connect.Registry
	rt     *runtime.Runtime
	cancel context.CancelFunc
	done   chan error
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newRegistry(t *testing.T, extra ...connect.Plugin) *connect.Registry {
	t.Helper()
	reg, err := connect.NewRegistry(append([]connect.Plugin{datagen.Plugin(), file.Plugin()}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func newHarness(t *testing.T, log runtime.Log, reg *connect.Registry, mod func(*runtime.Options)) *harness {
	t.Helper()
	opts := runtime.Options{
		Log: log, Registry: reg, Logger: testLogger(t),
		InitialBackoff: time.Millisecond, TopicRefresh: 10 * time.Millisecond,
		FetchWait: 50 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
	}
	if mod != nil {
		mod(&opts)
	}
	rt, err := runtime.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, log: log, reg: reg, rt: rt}
}

func (h *harness) add(name, class string, cfg map[string]string) {
	h.t.Helper()
	if err := h.rt.Add(runtime.ConnectorSpec{Name: name, Class: class, Config: cfg}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- h.rt.Run(ctx) }()
	h.t.Cleanup(h.stop)
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		h.t.Fatal("Run did not return within 20s of the stop")
	}
}

// waitState polls until the connector's task is in state, or fails after 10s.
// waitCommitted waits until the datagen connector gen has committed its first events events.
func (h *harness) waitCommitted(events int64) {
	h.t.Helper()
	h.waitCommittedBy("gen", events)
}

// waitCommittedBy waits until the datagen connector name has committed its first events events.
func (h *harness) waitCommittedBy(name string, events int64) {
	h.t.Helper()
	want := fmt.Sprintf(`{"v":1,"next":%d}`, events)
	waitFor(h.t, "every event of "+name+" to be committed", func() bool {
		pos, err := h.rt.SourceOffset(h.t.Context(), name)
		return err == nil && string(pos.State) == want
	})
}

func (h *harness) waitState(name string, want runtime.State) runtime.Status {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := h.rt.Status(name)
		if err != nil {
			h.t.Fatal(err)
		}
		if len(st.Tasks) > 0 && st.Tasks[0].State == want {
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("connector %s: task state %+v, want %s", name, st, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFor polls cond for up to 20s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logRecord is a decoded record of the log with its place.
type logRecord struct {
	tp  runtime.TopicPartition
	rec connect.Record
}

// readAll decodes every record of every partition of topic.
func readAll(t *testing.T, log runtime.Log, topic string) []logRecord {
	t.Helper()
	info, err := log.Describe(topic)
	if err != nil {
		t.Fatalf("describe %s: %v", topic, err)
	}
	var out []logRecord
	for _, pi := range info.Partitions {
		off := pi.LogStartOffset
		end, err := log.LatestOffset(topic, pi.Partition)
		if err != nil {
			t.Fatal(err)
		}
		for off < end {
			res, err := log.Fetch(context.Background(), topic, pi.Partition, off, wal.FetchOptions{MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			for i := range res.Records {
				r, err := runtime.DecodeRecord(topic, pi.Partition, &res.Records[i])
				if err != nil {
					t.Fatalf("%s-%d offset %d: %v", topic, pi.Partition, res.Records[i].Offset, err)
				}
				out = append(out, logRecord{tp: runtime.TopicPartition{Topic: topic, Partition: pi.Partition}, rec: r})
			}
			off = res.NextOffset
		}
	}
	return out
}

// checkExactlyOnce verifies that the log holds exactly the records of events [0, n) of s, each
// once, every partition in source order, each in the partition Kafka's partitioner picks.
func checkExactlyOnce(t *testing.T, log runtime.Log, s datagen.Settings, n int64) {
	t.Helper()
	type want struct {
		seq int64
		sub int
	}
	expect := map[runtime.TopicPartition][]want{}
	for i := int64(0); i < n; i++ {
		for j, r := range s.Records(i) {
			key, _ := connect.AppendJSON(nil, r.Key)
			parts, err := partitionCount(log, r.Topic)
			if err != nil {
				t.Fatalf("topic %s: %v", r.Topic, err)
			}
			tp := runtime.TopicPartition{Topic: r.Topic, Partition: wal.Partition(key, parts)}
			expect[tp] = append(expect[tp], want{i, j})
		}
	}
	got := map[runtime.TopicPartition][]want{}
	for _, table := range s.Tables {
		for _, lr := range readAll(t, log, s.Topic(table)) {
			seq, sub := eventSeq(lr.rec), 1
			if _, err := connect.ParseChangeEvent(lr.rec.Value); err == nil {
				sub = 0
			}
			// Records must equal what the generator makes for that event.
			w := s.Records(seq)[sub]
			wk, _ := connect.AppendJSON(nil, w.Key)
			gk, _ := connect.AppendJSON(nil, lr.rec.Key)
			wv, _ := connect.AppendJSON(nil, w.Value)
			gv, _ := connect.AppendJSON(nil, lr.rec.Value)
			if string(wk) != string(gk) || string(wv) != string(gv) || w.Version != lr.rec.Version {
				t.Fatalf("%s-%d offset %d: got key %s value %s version %d, want key %s value %s version %d",
					lr.tp.Topic, lr.tp.Partition, lr.rec.Offset, gk, gv, lr.rec.Version, wk, wv, w.Version)
			}
			got[lr.tp] = append(got[lr.tp], want{seq, sub})
		}
	}
	var tps []runtime.TopicPartition
	for tp := range expect {
		tps = append(tps, tp)
	}
	for tp := range got {
		if _, ok := expect[tp]; !ok {
			tps = append(tps, tp)
		}
	}
	sort.Slice(tps, func(i, j int) bool {
		return tps[i].Topic < tps[j].Topic || tps[i].Topic == tps[j].Topic && tps[i].Partition < tps[j].Partition
	})
	for _, tp := range tps {
		e, g := expect[tp], got[tp]
		for i := 0; i < max(len(e), len(g)); i++ {
			if i >= len(e) || i >= len(g) || e[i] != g[i] {
				t.Fatalf("%s-%d: %d records, want %d; first difference at offset %d: got %v, want %v",
					tp.Topic, tp.Partition, len(g), len(e), i, at(g, i), at(e, i))
			}
		}
	}
}

// eventSeq is the number of the datagen event that made a record.
func eventSeq(r connect.Record) int64 {
	if ev, err := connect.ParseChangeEvent(r.Value); err == nil {
		v, _ := ev.Source.Get("seq")
		seq, _ := connect.AsInt64(v)
		return seq
	}
	return r.Version - 1 // a tombstone carries its delete's version
}

func at[T any](s []T, i int) any {
	if i < len(s) {
		return s[i]
	}
	return "nothing"
}

func partitionCount(log runtime.Log, topic string) (int32, error) {
	info, err := log.Describe(topic)
	if err != nil {
		return 0, err
	}
	return int32(len(info.Partitions)), nil
}

// datagenConfig returns a datagen connector config.
func datagenConfig(events, keys, batch int64, extra ...string) map[string]string {
	cfg := map[string]string{
		"topic.prefix":             "gen",
		"datagen.keys":             strconv.FormatInt(keys, 10),
		"datagen.max.events":       strconv.FormatInt(events, 10),
		"datagen.batch.size":       strconv.FormatInt(batch, 10),
		"offset.flush.interval.ms": "0",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		cfg[extra[i]] = extra[i+1]
	}
	return cfg
}

func settings(t *testing.T, cfg map[string]string) datagen.Settings {
	t.Helper()
	c, errs := datagen.Plugin().Config.Parse(onlyPluginKeys(cfg))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return datagen.SettingsFrom(c)
}

func onlyPluginKeys(cfg map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range cfg {
		if _, ok := datagen.Plugin().Config.Lookup(k); ok {
			out[k] = v
		}
	}
	return out
}
