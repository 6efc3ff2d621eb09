package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
)

// tailLine is one line of `sluice topics tail`.
type tailLine struct {
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Timestamp int64           `json:"timestamp"`
	Key       json.RawMessage `json:"key"`
	Value     json.RawMessage `json:"value"`
	Headers   map[string]any  `json:"headers"`
}

func tail(t *testing.T, log runtime.Log, topic string, opts runtime.TailOptions) ([]tailLine, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var lines []tailLine
	err := runtime.Tail(ctx, log, topic, opts, func(b []byte) error {
		var l tailLine
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Errorf("line %s: %v", b, err)
		}
		lines = append(lines, l)
		return nil
	})
	return lines, err
}

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

// Tail (`sluice topics tail`) renders every record of a topic as a JSON line with its place,
// the key and the Debezium change event, in order per partition; --partition, --max-messages
// and the start at the end (without --from-beginning) select what it shows.
func TestTail(t *testing.T) {
	const topic = "gen.inventory.customers"
	log := runtimetest.NewLog()
	h := newHarness(t, log, newRegistry(t), func(o *runtime.Options) { o.TopicDefaults.Partitions = 2 })
	h.add("gen", "datagen", datagenConfig(60, 6, 10, "datagen.tables", "customers"))
	h.start()
	h.waitCommitted(60)
	h.stop()
	want := readAll(t, log, topic)

	lines, err := tail(t, log, topic, runtime.TailOptions{FromBeginning: true, Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want one per record (%d)", len(lines), len(want))
	}
	byPlace := map[runtime.TopicPartition]map[int64]connect.Record{}
	perPart := map[int32]int{}
	for _, w := range want {
		if byPlace[w.tp] == nil {
			byPlace[w.tp] = map[int64]connect.Record{}
		}
		byPlace[w.tp][w.rec.Offset] = w.rec
		perPart[w.tp.Partition]++
	}
	if len(perPart) != 2 {
		t.Fatalf("records in %d partitions, want 2", len(perPart))
	}
	next := map[int32]int64{}
	tombstones := 0
	for _, l := range lines {
		if l.Topic != topic || l.Offset != next[l.Partition] {
			t.Fatalf("line %s-%d offset %d, want %s-%d offset %d", l.Topic, l.Partition, l.Offset, topic, l.Partition, next[l.Partition])
		}
		next[l.Partition]++
		r := byPlace[runtime.TopicPartition{Topic: topic, Partition: l.Partition}][l.Offset]
		wk, _ := connect.AppendJSON(nil, r.Key)
		wv := []byte("null")
		if r.Value != nil {
			wv, _ = connect.AppendJSON(nil, r.Value)
		}
		if diff := cmp.Diff(jsonValue(t, wk), jsonValue(t, l.Key)); diff != "" {
			t.Fatalf("offset %d key (-want +got):\n%s", l.Offset, diff)
		}
		if diff := cmp.Diff(jsonValue(t, wv), jsonValue(t, l.Value)); diff != "" {
			t.Fatalf("offset %d value (-want +got):\n%s", l.Offset, diff)
		}
		if l.Timestamp != r.Timestamp.UnixMilli() {
			t.Fatalf("offset %d timestamp %d, want %d", l.Offset, l.Timestamp, r.Timestamp.UnixMilli())
		}
		if r.Value == nil {
			tombstones++
			continue
		}
		// The value is the Debezium envelope.
		var env map[string]json.RawMessage
		if err := json.Unmarshal(l.Value, &env); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"after", "before", "op", "source", "ts_ms"}, keysOfRaw(env)); diff != "" {
			t.Fatalf("offset %d value fields (-want +got):\n%s", l.Offset, diff)
		}
	}
	if tombstones == 0 {
		t.Fatal("no tombstone among the records: the test proves little about deletes")
	}

	one, err := tail(t, log, topic, runtime.TailOptions{FromBeginning: true, Partition: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != perPart[1] {
		t.Fatalf("partition 1: %d lines, want %d", len(one), perPart[1])
	}
	for _, l := range one {
		if l.Partition != 1 {
			t.Fatalf("--partition 1 showed a record of partition %d", l.Partition)
		}
	}
	if some, err := tail(t, log, topic, runtime.TailOptions{FromBeginning: true, Partition: -1, Max: 5}); err != nil || len(some) != 5 {
		t.Fatalf("Max 5: %d lines, %v", len(some), err)
	}
	if end, err := tail(t, log, topic, runtime.TailOptions{Partition: -1}); err != nil || len(end) != 0 {
		t.Fatalf("from the end: %d lines, %v; want none", len(end), err)
	}
	if _, err := tail(t, log, topic, runtime.TailOptions{Partition: 7}); err == nil || err.Error() != "tail gen.inventory.customers: no partition 7 (the topic has 2)" {
		t.Fatalf("a partition the topic lacks: %v", err)
	}
}

func keysOfRaw(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
