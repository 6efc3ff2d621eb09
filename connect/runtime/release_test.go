package runtime_test

import (
	"context"
	"fmt"
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
// took from their values, and every batch is released once.
func TestSourceBatchReleasedAfterEncoding(t *testing.T) {
	const events = 3000
	log := runtimetest.NewLog()
	p := datagen.Plugin()
	inner := p.NewSource
	var src *recyclingSource
	p.Name, p.NewSource = "recycling", func(cfg connect.Config, env connect.Env) (connect.Source, error) {
		in, err := inner(cfg, env)
		src = &recyclingSource{Source: in}
		return src, err
	}
	h := newHarness(t, log, newRegistry(t, append([]connect.Plugin{p}, transforms.Plugins()...)...),
		func(o *runtime.Options) {
			o.TopicDefaults.Partitions = 3
			o.Chain = func(reg *connect.Registry, cfg map[string]string) (connect.Transform, []connect.FieldError) {
				ch, errs := transforms.BuildChain(reg, cfg)
				if ch == nil {
					return nil, errs
				}
				return ch, errs
			}
		})
	cfg := datagenConfig(events, 40, 25,
		"transforms", "route",
		"transforms.route.type", "content_router",
		"transforms.route.topic.expression", "value.source.table")
	h.add("gen", "recycling", cfg)
	h.start()
	waitFor(t, "every event to be committed", func() bool {
		pos, err := h.rt.SourceOffset(t.Context(), "gen")
		return err == nil && string(pos.State) == fmt.Sprintf(`{"v":1,"next":%d}`, events)
	})
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
			if ev, err := connect.ParseChangeEvent(r.Value); err == nil {
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
