package transforms

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluice-cdc/sluice/connect"
)

// fuzzTransforms is the pool random chains draw from: every transform, several option sets,
// some guarded by predicates.
var fuzzTransforms = []map[string]string{
	{"type": "unwrap"},
	{"type": "unwrap", "delete.tombstone.handling.mode": "rewrite", "add.fields": "op,table,source.ts_ms", "add.headers": "op,db"},
	{"type": "unwrap", "delete.tombstone.handling.mode": "rewrite-with-tombstone", "route.by.field": "status", "drop.fields.header.name": "h"},
	{"type": "filter", "condition": `value.after.status != "archived" && op != "t"`},
	{"type": "filter", "condition": `len(value) > 2 || "a" in value || headers.h == "x"`, "null.handling.mode": "evaluate"},
	{"type": "content_router", "topic.expression": `value.status == nil ? nil : "t." + string(value.status)`},
	{"type": "route", "regex": `([^.]+)\.(.*)`, "replacement": "$2.$1"},
	{"type": "logical_table_router", "topic.regex": `(.*)\.(.*)`, "topic.replacement": "$1.all"},
	{"type": "replace_field", "exclude": "a", "renames": "b:bee,id:ID"},
	{"type": "replace_field_key", "include": "id"},
	{"type": "mask_field", "fields": "id,status,a"},
	{"type": "mask_field", "fields": "id", "replacement": "0"},
	{"type": "insert_field", "topic.field": "t", "timestamp.field": "ts", "static.field": "s", "static.value": "v"},
	{"type": "value_to_key", "fields": "id,a"},
	{"type": "extract_field", "field": "after"},
	{"type": "extract_field", "field": "after.status", "field.syntax.version": "V2"},
	{"type": "hoist_field", "field": "wrapped"},
	{"type": "cast", "spec": "id:string,a:int8,b:float32,status:boolean"},
	{"type": "cast_key", "spec": "string"},
	{"type": "timestamp_converter", "field": "ts", "target.type": "string", "format": "yyyy-MM-dd HH:mm:ss.SSS"},
	{"type": "timestamp_converter", "target.type": "Date"},
	{"type": "flatten"},
	{"type": "insert_header", "header": "h", "value.literal": "x"},
	{"type": "drop_headers", "headers": "h,__op"},
	{"type": "header_from", "fields": "id,a", "headers": "hid,ha", "operation": "move"},
	{"type": "outbox", "route.by.field": "status", "table.field.event.key": "id", "table.field.event.id": "id", "table.field.event.payload": "a",
		"table.fields.additional.error.on.missing": "false", "table.fields.additional.placement": "b:envelope"},
	{"type": "drop", "predicate": "tomb"},
	{"type": "drop", "predicate": "topic", "negate": "true"},
	{"type": "insert_header", "header": "vip", "value.literal": "1", "predicate": "expr"},
}

var fuzzPredicates = map[string]string{
	"predicates":                "tomb,topic,expr,hdr",
	"predicates.tomb.type":      "record_is_tombstone",
	"predicates.topic.type":     "topic_name_matches",
	"predicates.topic.pattern":  `db\..*`,
	"predicates.expr.type":      "expression",
	"predicates.expr.condition": `value.id > 3`,
	"predicates.hdr.type":       "has_header_key",
	"predicates.hdr.name":       "h",
}

// bytesSource turns fuzz input into choices; past its end it yields zeros.
type bytesSource struct {
	b []byte
	i int
}

func (s *bytesSource) next() int {
	if s.i >= len(s.b) {
		return 0
	}
	s.i++
	return int(s.b[s.i-1])
}

func (s *bytesSource) intn(n int) int { return s.next() % n }

var fuzzNames = []string{"id", "status", "a", "b", "after", "before", "op", "ts", "source"}

func fuzzValue(s *bytesSource, depth int) any {
	switch s.intn(11) {
	case 0:
		return nil
	case 1:
		return s.next()%2 == 0
	case 2:
		return int64(s.next()) - 128
	case 3:
		return uint64(math.MaxUint64) - uint64(s.next())
	case 4:
		return float64(s.next()) / 7
	case 5:
		return []string{"archived", "new", "db.x", "2023-01-01 00:00:00.000", "42", ""}[s.intn(6)]
	case 6:
		return []byte{byte(s.next())}
	case 7, 8:
		if depth > 0 {
			n := s.intn(5)
			r := make(connect.Row, 0, n)
			for range n {
				r = r.Set(fuzzNames[s.intn(len(fuzzNames))], fuzzValue(s, depth-1))
			}
			return r
		}
		return "leaf"
	case 9:
		if depth > 0 {
			return []any{fuzzValue(s, depth-1), fuzzValue(s, depth-1)}
		}
		return []any{}
	}
	// A change event, the common case.
	ops := []connect.Op{connect.OpCreate, connect.OpUpdate, connect.OpDelete, connect.OpRead, connect.OpTruncate}
	op := ops[s.intn(len(ops))]
	img := func() connect.Row {
		return row("id", int64(s.intn(8)), "status", []string{"archived", "new", "db.x"}[s.intn(3)], "a", fuzzValue(s, 0), "b", fuzzValue(s, 0))
	}
	e := connect.ChangeEvent{Op: op, Source: row("db", "shop", "table", "t", "ts_ms", int64(5))}
	switch op {
	case connect.OpCreate, connect.OpRead:
		e.After = img()
	case connect.OpUpdate:
		e.Before, e.After = img(), img()
	case connect.OpDelete:
		e.Before = img()
	}
	return e.Row()
}

func fuzzRecord(s *bytesSource) connect.Record {
	r := connect.Record{
		Topic:     []string{"db.shop.t", "other", "db.x", ""}[s.intn(4)],
		Partition: int32(s.intn(3)) - 1,
		Offset:    int64(s.intn(3)) - 1,
		Timestamp: time.UnixMilli(int64(s.next()) * 1e9).UTC(),
		Key:       fuzzValue(s, 1),
		Value:     fuzzValue(s, 2),
		Version:   int64(s.next()),
	}
	for range s.intn(3) {
		r.Headers = append(r.Headers, hdr([]string{"h", "__op", connect.HeaderUnchanged, "x"}[s.intn(4)], strconv.Itoa(s.intn(4))))
	}
	return r
}

func fuzzChain(t testing.TB, reg *connect.Registry, s *bytesSource) *Chain {
	cfg := map[string]string{}
	for k, v := range fuzzPredicates {
		cfg[k] = v
	}
	var names string
	for i := range 1 + s.intn(5) {
		name := "t" + strconv.Itoa(i)
		if names != "" {
			names += ","
		}
		names += name
		for k, v := range fuzzTransforms[s.intn(len(fuzzTransforms))] {
			cfg["transforms."+name+"."+k] = v
		}
	}
	cfg["transforms"] = names
	c, errs := BuildChain(reg, cfg)
	if len(errs) > 0 {
		t.Fatalf("fuzz chain config: %v", errs)
	}
	return c
}

// checkChain applies a chain twice to copies of the same record: the results must be equal
// (determinism), the input untouched, and version and sluice headers kept.
func checkChain(t testing.TB, c *Chain, in connect.Record) {
	snapshot := cloneRecord(in)
	out1, keep1, err1 := c.Apply(in)
	out2, keep2, err2 := c.Apply(cloneRecord(snapshot))
	if diff := cmp.Diff(snapshot, in); diff != "" {
		t.Fatalf("chain %v modified its input:\n%s", c.Names(), diff)
	}
	if keep1 != keep2 || fmt.Sprint(err1) != fmt.Sprint(err2) || !cmp.Equal(out1, out2) {
		t.Fatalf("chain %v is not deterministic: (%v, %v) vs (%v, %v)\n%s", c.Names(), keep1, err1, keep2, err2, cmp.Diff(out1, out2))
	}
	if err1 == nil && keep1 {
		if out1.Version != in.Version {
			t.Fatalf("chain %v changed the version %d -> %d", c.Names(), in.Version, out1.Version)
		}
		if v, ok := in.Headers.Get(connect.HeaderUnchanged); ok {
			if _, ok := out1.Headers.Get(connect.HeaderUnchanged); !ok {
				t.Fatalf("chain %v lost the unchanged header %q", c.Names(), v)
			}
		}
	}
}

func FuzzChain(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 10, 20, 3, 40, 50, 60, 10, 80, 90, 10, 5})
	f.Add([]byte{255, 254, 253, 7, 7, 7, 7, 9, 9, 9})
	reg := registry(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &bytesSource{b: data}
		c := fuzzChain(t, reg, s)
		for range 3 {
			checkChain(t, c, fuzzRecord(s))
		}
	})
}

// TestRandomChains runs random chains over random records outside of fuzzing mode. The
// iteration count is SLUICE_SOAK-scaled: 2000 by default.
func TestRandomChains(t *testing.T) {
	n := 2000
	if os.Getenv("SLUICE_SOAK") != "" {
		n = 200000
	}
	reg := registry(t)
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 256)
	for i := range n {
		for j := range buf {
			buf[j] = byte(rng.IntN(256))
		}
		s := &bytesSource{b: buf}
		c := fuzzChain(t, reg, s)
		for range 4 {
			checkChain(t, c, fuzzRecord(s))
		}
		_ = i
	}
}
