package runtime_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/transforms"
	"github.com/sluice-cdc/sluice/wal"
)

// recyclingSource hands out each batch in memory of its own, as a source that recycles its
// slabs does, and overwrites that memory when the runtime releases the batch: every string
// byte becomes 'X' and every field "released". Topics (taken from a value by a transform) and
// header keys and values live in that memory too.
type recyclingSource struct {
	connect.Source
	// raw: keys and values go out as the JSON they render (connect.RawJSON), in that memory
	raw            bool
	mu             sync.Mutex
	batches, freed int
	releasedTwice  bool
}

// slab is the memory of one batch.
type slab struct {
	data []byte
	rows []connect.Row
}

func (s *slab) str(v string) string {
	if v == "" {
		return ""
	}
	start := len(s.data)
	s.data = append(s.data, v...)
	return unsafe.String(&s.data[start], len(v))
}

func (s *slab) bytes(v string) []byte {
	start := len(s.data)
	s.data = append(s.data, v...)
	return s.data[start:len(s.data):len(s.data)]
}

// own copies v into s.
func (s *slab) own(v any) any {
	switch v := v.(type) {
	case connect.Row:
		r := make(connect.Row, len(v))
		for i, f := range v {
			r[i] = connect.Field{Name: s.str(f.Name), Value: s.own(f.Value)}
		}
		s.rows = append(s.rows, r)
		return r
	case string:
		return s.str(v)
	}
	return v
}

// raw renders v into s as a connect.RawJSON (nil stays nil).
func (s *slab) raw(v any) any {
	if v == nil {
		return nil
	}
	b, err := connect.AppendJSON(nil, v)
	if err != nil {
		panic(err)
	}
	return connect.RawJSON(s.bytes(string(b)))
}

func (s *slab) poison() {
	for i := range s.data {
		s.data[i] = 'X'
	}
	for _, r := range s.rows {
		for i := range r {
			r[i].Value = "released"
		}
	}
}

func (s *recyclingSource) Read(ctx context.Context) (connect.Batch, error) {
	b, err := s.Source.Read(ctx)
	if err != nil || len(b.Records) == 0 {
		return b, err
	}
	// large enough never to move: the strings point into it
	mem := &slab{data: make([]byte, 0, 1<<20)}
	recs := make([]connect.Record, len(b.Records))
	for i, r := range b.Records {
		r.Key = mem.own(r.Key)
		r.Value = mem.own(r.Value)
		if s.raw {
			r.Key, r.Value = mem.raw(r.Key), mem.raw(r.Value)
		}
		r.Headers = connect.Headers{{Key: mem.str("origin"), Value: mem.bytes("datagen")}}
		recs[i] = r
	}
	s.mu.Lock()
	s.batches++
	s.mu.Unlock()
	var once bool
	return connect.Batch{Records: recs, Position: b.Position, Release: func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if once {
			s.releasedTwice = true
			return
		}
		once = true
		s.freed++
		mem.poison()
	}}, nil
}

// A source may reuse a batch's memory once the runtime releases it (connect.Batch.Release):
// the log holds the records as they were read, also their headers and the topics a transform
// took from their values, and every batch is released once. So it does for a source that
// renders its keys and values as JSON itself (connect.RawJSON): the log holds that rendering,
// and a transform sees the values it renders (content_router reads value.source.table).
func TestSourceBatchReleasedAfterEncoding(t *testing.T) {
	for _, tc := range []struct {
		name       string
		raw, chain bool
	}{{"rows", false, true}, {"rendered", true, true}, {"rendered without transforms", true, false}} {
		t.Run(tc.name, func(t *testing.T) { testBatchReleasedAfterEncoding(t, tc.raw, tc.chain) })
	}
}

func testBatchReleasedAfterEncoding(t *testing.T, raw, chain bool) {
	const events = 3000
	log := runtimetest.NewLog()
	var src *recyclingSource
	h := transformHarness(t, log, recyclingPlugin(&src, raw), 3)
	cfg := datagenConfig(events, 40, 25)
	if chain {
		cfg = datagenConfig(events, 40, 25,
			"transforms", "route",
			"transforms.route.type", "content_router",
			"transforms.route.topic.expression", "value.source.table")
	}
	h.add("gen", "recycling", cfg)
	h.start()
	h.waitCommitted(events)
	h.stop()

	// what the log must hold: datagen's records, routed to their table's topic (tombstones,
	// which have no value, keep theirs), in source order per partition
	s := settings(t, cfg)
	type rec struct{ key, value string }
	want := map[runtime.TopicPartition][]rec{}
	topics := map[string]bool{}
	for i := int64(0); i < events; i++ {
		for _, r := range s.Records(i) {
			topic := r.Topic
			if ev, err := connect.ParseChangeEvent(r.Value); err == nil && chain {
				tbl, _ := ev.Source.Get("table")
				topic = tbl.(string)
			}
			topics[topic] = true
			key, _ := connect.AppendJSON(nil, r.Key)
			value, _ := connect.AppendJSON(nil, r.Value)
			n, err := partitionCount(log, topic)
			if err != nil {
				t.Fatalf("topic %s: %v", topic, err)
			}
			tp := runtime.TopicPartition{Topic: topic, Partition: wal.Partition(key, n)}
			want[tp] = append(want[tp], rec{string(key), string(value)})
		}
	}
	got := map[runtime.TopicPartition][]rec{}
	for topic := range topics {
		for _, lr := range readAll(t, log, topic) {
			if len(lr.rec.Headers) != 1 || lr.rec.Headers[0].Key != "origin" || string(lr.rec.Headers[0].Value) != "datagen" {
				t.Fatalf("%s-%d offset %d: headers %v, want origin=datagen", lr.tp.Topic, lr.tp.Partition, lr.rec.Offset, lr.rec.Headers)
			}
			key, _ := connect.AppendJSON(nil, lr.rec.Key)
			value, _ := connect.AppendJSON(nil, lr.rec.Value)
			got[lr.tp] = append(got[lr.tp], rec{string(key), string(value)})
		}
	}
	if len(got) != len(want) {
		t.Fatalf("records in %d partitions, want %d", len(got), len(want))
	}
	for tp, w := range want {
		g := got[tp]
		for i := range max(len(g), len(w)) {
			if i >= len(g) || i >= len(w) || g[i] != w[i] {
				t.Fatalf("%s-%d: %d records, want %d; first difference at offset %d: got %v, want %v", tp.Topic, tp.Partition, len(g), len(w), i, at(g, i), at(w, i))
			}
		}
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.releasedTwice || src.freed != src.batches || src.batches < 10 {
		t.Fatalf("%d batches read, %d released (twice: %v)", src.batches, src.freed, src.releasedTwice)
	}
}

// Records a transform rejects go to the dead-letter topic as they were read, with their
// headers, although their batch's memory is released (and overwritten) once routed; so do
// those of a source that renders its values itself (connect.RawJSON), as it rendered them.
func TestSourceRejectedRecordReleased(t *testing.T) {
	for _, raw := range []bool{false, true} {
		t.Run(fmt.Sprintf("raw=%v", raw), func(t *testing.T) { testRejectedRecordReleased(t, raw) })
	}
}

func testRejectedRecordReleased(t *testing.T, raw bool) {
	const events = 1000
	log := runtimetest.NewLog()
	var src *recyclingSource
	h := transformHarness(t, log, recyclingPlugin(&src, raw), 0)
	// orders get a number for a topic: rejected
	cfg := datagenConfig(events, 40, 25,
		"transforms", "route",
		"transforms.route.type", "content_router",
		"transforms.route.topic.expression", `value.source.table == "orders" ? 0 : value.source.table`,
		"errors.tolerance", "all",
		"errors.deadletterqueue.topic.name", "gen-dlq")
	h.add("gen", "recycling", cfg)
	h.start()
	h.waitCommitted(events)
	h.stop()

	s := settings(t, cfg)
	var want []string
	for i := int64(0); i < events; i++ {
		for _, r := range s.Records(i) {
			ev, err := connect.ParseChangeEvent(r.Value)
			if err != nil {
				continue
			}
			if tbl, _ := ev.Source.Get("table"); tbl != "orders" {
				continue
			}
			key, _ := connect.AppendJSON(nil, r.Key)
			value, _ := connect.AppendJSON(nil, r.Value)
			want = append(want, string(key)+" "+string(value))
		}
	}
	got := readAll(t, log, "gen-dlq")
	if len(got) != len(want) || len(want) < 100 {
		t.Fatalf("%d records in the dead-letter topic, want %d", len(got), len(want))
	}
	for i, lr := range got {
		if len(lr.rec.Headers) == 0 || lr.rec.Headers[0].Key != "origin" || string(lr.rec.Headers[0].Value) != "datagen" {
			t.Fatalf("dead letter %d: headers %v, want origin=datagen first", i, lr.rec.Headers)
		}
		key, _ := connect.AppendJSON(nil, lr.rec.Key)
		value, _ := connect.AppendJSON(nil, lr.rec.Value)
		if g := string(key) + " " + string(value); g != want[i] {
			t.Fatalf("dead letter %d:\n got %s\nwant %s", i, g, want[i])
		}
	}
}

// recyclingPlugin is datagen as a recyclingSource; *last is set to each new instance.
func recyclingPlugin(last **recyclingSource, raw bool) connect.Plugin {
	p := datagen.Plugin()
	inner := p.NewSource
	p.Name, p.NewSource = "recycling", func(cfg connect.Config, env connect.Env) (connect.Source, error) {
		in, err := inner(cfg, env)
		*last = &recyclingSource{Source: in, raw: raw}
		return *last, err
	}
	return p
}

// transformHarness is a harness with the built-in transforms and the source plugin p; topics
// get partitions partitions (0: the default).
func transformHarness(t *testing.T, log runtime.Log, p connect.Plugin, partitions int32) *harness {
	return newHarness(t, log, newRegistry(t, append([]connect.Plugin{p}, transforms.Plugins()...)...),
		func(o *runtime.Options) {
			if partitions > 0 {
				o.TopicDefaults.Partitions = partitions
			}
			o.Chain = transformChain
		})
}

// transformChain builds chains of the built-in transforms.
func transformChain(reg *connect.Registry, cfg map[string]string) (connect.Transform, []connect.FieldError) {
	ch, errs := transforms.BuildChain(reg, cfg)
	if ch == nil {
		return nil, errs
	}
	return ch, errs
}

// rewritingSource emits one record per batch, whose value's region is in the same bytes for
// every batch: Read waits for the last batch's Release and writes the next region there, as a
// source that recycles its memory does (Read must not wait for Ack, but may for Release). A
// topic taken from the region by a transform is therefore another region after the batch, not
// garbage: a map keyed by it, once it has grown, finds the entry of one region for another.
type rewritingSource struct {
	regions  []string // of one length, the region of each record in turn
	mem      []byte
	released chan struct{} // a token: the last batch is released
	n        int
}

func (s *rewritingSource) Open(ctx context.Context, after connect.Position) error {
	if len(after.State) > 0 {
		return fmt.Errorf("resume at %s: not supported", after)
	}
	return nil
}

func (s *rewritingSource) Read(ctx context.Context) (connect.Batch, error) {
	if s.n == len(s.regions) {
		<-ctx.Done()
		return connect.Batch{}, ctx.Err()
	}
	select {
	case <-s.released:
	case <-ctx.Done():
		return connect.Batch{}, ctx.Err()
	}
	copy(s.mem, s.regions[s.n])
	s.n++
	order := binary.BigEndian.AppendUint64(nil, uint64(s.n))
	rec := connect.Record{Topic: "in", Partition: -1, Offset: -1,
		Key:      connect.Row{{Name: "n", Value: int64(s.n)}},
		Value:    connect.Row{{Name: "region", Value: unsafe.String(&s.mem[0], len(s.mem))}, {Name: "n", Value: int64(s.n)}},
		Position: connect.Position{Order: order}}
	pos := connect.Position{Order: order, State: []byte(fmt.Sprintf(`{"next":%d}`, s.n))}
	return connect.Batch{Records: []connect.Record{rec}, Position: pos, Release: func() { s.released <- struct{}{} }}, nil
}

func (s *rewritingSource) Ack(context.Context, connect.Position) error { return nil }
func (s *rewritingSource) Close(context.Context) error                 { return nil }

// The runtime and the transforms keep no topic name in a source's memory past its batch's
// Release: with a topic taken from a value whose bytes the source rewrites after every batch,
// each record is in the topic its own value named, whether the chain routes it further (route
// memoizes topic names) or not (the runtime keeps its own copies of topic names).
func TestSourceTopicFromRewrittenMemory(t *testing.T) {
	const records = 5000
	var names []string // of one length, more than a small map holds
	for i := range 300 {
		names = append(names, fmt.Sprintf("reg.%03d", i))
	}
	for _, tc := range []struct {
		name  string
		chain []string
		topic func(region string) string
	}{
		{"region", []string{"transforms", "region",
			"transforms.region.type", "content_router",
			"transforms.region.topic.expression", "value.region"},
			func(region string) string { return region }},
		{"region then route", []string{"transforms", "region,route",
			"transforms.region.type", "content_router",
			"transforms.region.topic.expression", "value.region",
			"transforms.route.type", "route",
			"transforms.route.regex", `reg\.(\d)(\d)(\d)`,
			"transforms.route.replacement", "out.$3$2$1"},
			func(region string) string { return "out." + region[6:7] + region[5:6] + region[4:5] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 7))
			src := &rewritingSource{mem: make([]byte, len(names[0])), released: make(chan struct{}, 1)}
			src.released <- struct{}{}
			want := map[string][]int64{}
			for i := range records {
				region := names[r.IntN(len(names))]
				src.regions = append(src.regions, region)
				want[tc.topic(region)] = append(want[tc.topic(region)], int64(i+1))
			}
			p := connect.Plugin{Name: "rewriting", Kind: connect.KindSource,
				NewSource: func(connect.Config, connect.Env) (connect.Source, error) { return src, nil }}
			log := runtimetest.NewLog()
			h := transformHarness(t, log, p, 1)
			cfg := map[string]string{"offset.flush.interval.ms": "0"}
			for i := 0; i+1 < len(tc.chain); i += 2 {
				cfg[tc.chain[i]] = tc.chain[i+1]
			}
			h.add("rw", "rewriting", cfg)
			h.start()
			waitFor(t, "every record to be committed", func() bool {
				pos, err := h.rt.SourceOffset(t.Context(), "rw")
				return err == nil && string(pos.State) == fmt.Sprintf(`{"next":%d}`, records)
			})
			h.stop()
			for topic, ns := range want {
				var got []int64
				if _, err := log.Describe(topic); err == nil {
					for _, lr := range readAll(t, log, topic) {
						n, _ := lr.rec.Value.(connect.Row).Get("n")
						got = append(got, n.(int64))
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(ns) {
					t.Fatalf("topic %s holds records %v, want %v", topic, got, ns)
				}
			}
		})
	}
}

// The runtime lets a source render its records as JSON (connect.Env.RawJSON) only when the
// connector has no transforms: transforms read Rows, which a rendering would have to be parsed
// back into.
func TestSourceEnvRawJSON(t *testing.T) {
	for _, chain := range []bool{false, true} {
		t.Run(fmt.Sprintf("transforms=%v", chain), func(t *testing.T) {
			envs := make(chan connect.Env, 8)
			p := datagen.Plugin()
			inner := p.NewSource
			p.Name, p.NewSource = "envcheck", func(cfg connect.Config, env connect.Env) (connect.Source, error) {
				envs <- env
				return inner(cfg, env)
			}
			log := runtimetest.NewLog()
			h := transformHarness(t, log, p, 1)
			var cfg map[string]string
			if chain {
				cfg = datagenConfig(10, 4, 2, "transforms", "route",
					"transforms.route.type", "content_router", "transforms.route.topic.expression", "value.source.table")
			} else {
				cfg = datagenConfig(10, 4, 2)
			}
			h.add("gen", "envcheck", cfg)
			h.start()
			h.waitCommitted(10)
			h.stop()
			env := <-envs
			if env.RawJSON == chain {
				t.Fatalf("with transforms %v the source got RawJSON %v", chain, env.RawJSON)
			}
		})
	}
}
