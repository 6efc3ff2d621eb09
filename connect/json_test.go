package connect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

func TestAppendJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   any
		want string
	}{
		{"null", nil, `null`},
		{"bools", []any{true, false}, `[true,false]`},
		{"ints", []any{int64(-1), int(2), int32(3), uint64(math.MaxUint64)}, `[-1,2,3,18446744073709551615]`},
		{"floats", []any{1.5, 0.0, 1e21, 1e-7, float32(0.1)}, `[1.5,0,1e+21,1e-7,0.1]`},
		{"special floats", []any{math.NaN(), math.Inf(1), math.Inf(-1)}, `["NaN","Infinity","-Infinity"]`},
		{"escapes", "a\"b\\c\n\t\x01<>&\u2028", `"a\"b\\c\n\t\u0001<>&\u2028"`},
		{"invalid utf8", "a\xffb", `"a\ufffdb"`},
		{"bytes", []byte{0, 1, 2, 255}, `"AAEC/w=="`},
		{"nil bytes", []byte(nil), `null`},
		{"ordered row", Row{{"z", int64(1)}, {"a", int64(2)}}, `{"z":1,"a":2}`},
		{"nil row", Row(nil), `null`},
		{"empty row", Row{}, `{}`},
		{"map sorted", map[string]any{"b": 1, "a": map[string]any{"y": 2, "x": 3}}, `{"a":{"x":3,"y":2},"b":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MarshalJSONValue(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
	if _, err := MarshalJSONValue(struct{}{}); err == nil || err.Error() != "value of type struct {} is outside the data model" {
		t.Fatalf("struct: got %v", err)
	}
}

func TestParseJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
	}{
		{` {"b":1,"a":[true,null,"x"],"c":{}} `, Row{{"b", int64(1)}, {"a", []any{true, nil, "x"}}, {"c", Row{}}}},
		{`{"a":1,"a":2,"b":3}`, Row{{"a", int64(2)}, {"b", int64(3)}}},
		{"\"a\xffb\"", "a\uFFFDb"},                    // invalid UTF-8 becomes U+FFFD
		{"{\"k\xff\":1}", Row{{"k\uFFFD", int64(1)}}}, // in a key too
		{"\"\u00e9t\u00e9\"", "\u00e9t\u00e9"},        // valid UTF-8 stays as it is
		{`9223372036854775807`, int64(math.MaxInt64)},
		{`9223372036854775808`, uint64(1 << 63)},
		{`-9223372036854775809`, float64(-9223372036854775809)},
		{`1.25e2`, 125.0},
		{`"\u00fc\ud83d\ude00\n\/"`, "ü😀\n/"},
		{`"\ud83d"`, "\uFFFD"},
		{`[]`, []any{}},
	} {
		got, err := ParseJSON([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestParseJSONErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, `json: unexpected end of input at offset 0`},
		{`{"a":1`, `json: unexpected end of input in object at offset 6`},
		{`{"a" 1}`, `json: want ':' after object key at offset 5`},
		{`{1:2}`, `json: want an object key at offset 1`},
		{`[1 2]`, `json: want ',' or ']' in array, got '2' at offset 3`},
		{`01`, `json: unexpected '1' after the value at offset 1`},
		{`1.`, `json: want digits after '.' at offset 2`},
		{`"a`, `json: unterminated string at offset 2`},
		{"\"\x01\"", `json: control character 0x1 in string at offset 1`},
		{`"\x"`, `json: invalid escape \x at offset 3`},
		{`tru`, `json: invalid literal, want true at offset 0`},
		{`{} x`, `json: unexpected 'x' after the value at offset 3`},
		{`-`, `json: unexpected end of input in number at offset 1`},
	} {
		_, err := ParseJSON([]byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %q", tc.in, err, tc.want)
		}
	}
	deep := bytes.Repeat([]byte("["), maxDepth+2)
	if _, err := ParseJSON(deep); err == nil {
		t.Error("deep nesting accepted")
	}
}

// FuzzParseJSON checks that the parser never panics, agrees with encoding/json on what is
// valid JSON, and that rendering what it parsed is stable: parse(render(v)) renders the same.
func FuzzParseJSON(f *testing.F) {
	for _, tc := range goldenCases() {
		k, _ := MarshalJSONValue(tc.key)
		v, _ := MarshalJSONValue(tc.value)
		f.Add(k)
		f.Add(v)
	}
	for _, s := range []string{`{"a":[1,2.5,-3e4,"\u00e9"]}`, `"\ud800"`, `1e999`, `{"a":1,"a":{"b":null}}`, `[[[[]]]]`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := ParseJSON(in)
		if valid := json.Valid(in); (err == nil) != valid {
			// encoding/json rejects invalid UTF-8 inside strings only when asked; both accept it.
			if !(err == nil && !valid) {
				t.Fatalf("ParseJSON err=%v but json.Valid=%v for %q", err, valid, in)
			}
		}
		if err != nil {
			return
		}
		out1, err := MarshalJSONValue(v)
		if err != nil {
			t.Fatalf("render parsed value: %v", err)
		}
		if !json.Valid(out1) {
			t.Fatalf("rendered invalid JSON %q from %q", out1, in)
		}
		v2, err := ParseJSON(out1)
		if err != nil {
			t.Fatalf("reparse %q: %v", out1, err)
		}
		out2, _ := MarshalJSONValue(v2)
		v3, _ := ParseJSON(out2)
		out3, _ := MarshalJSONValue(v3)
		if !bytes.Equal(out2, out3) {
			t.Fatalf("rendering not stable: %q then %q", out2, out3)
		}
		// The envelope parser must not panic on anything the JSON parser accepts.
		_, _ = ParseChangeEvent(v)
	})
}

func BenchmarkParseEvent(b *testing.B) {
	ev := ChangeEvent{Op: OpUpdate, Before: customer(1, "a@b.c"), After: customer(1, "d@e.f"), Source: mysqlSource("false", 1, 2)}
	data, _ := ev.MarshalJSON()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := ParseJSON(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenderEvent(b *testing.B) {
	ev := ChangeEvent{Op: OpUpdate, Before: customer(1, "a@b.c"), After: customer(1, "d@e.f"), Source: mysqlSource("false", 1, 2)}
	row := ev.Row()
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var err error
		if buf, err = AppendJSON(buf[:0], row); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// TestParseJSONSurvivesGC checks the slab-boxed values the parser returns stay intact while
// the garbage collector runs and the parser's inputs are overwritten.
func TestParseJSONSurvivesGC(t *testing.T) {
	var want []any
	var got []any
	for i := 0; i < 2000; i++ {
		ev := ChangeEvent{Op: OpUpdate, Before: customer(int64(i)*1000003, fmt.Sprintf("u%d@x.org", i)), After: customer(int64(i), "é\n"), Source: mysqlSource("false", int64(i)<<20, int64(i)), TsMs: int64(i) * 1e12}
		b, err := ev.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		v, err := ParseJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		for j := range b {
			b[j] = 'x' // the result must not alias the input
		}
		want = append(want, ev.Row())
		got = append(got, v)
		if i%100 == 0 {
			runtime.GC()
		}
	}
	runtime.GC()
	for i := range want {
		if diff := cmp.Diff(want[i], got[i]); diff != "" {
			t.Fatalf("event %d changed (-want +got):\n%s", i, diff)
		}
	}
}

func TestParseJSONHugeObjectDuplicates(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("{")
	for i := 0; i < 500; i++ {
		fmt.Fprintf(&b, `"k%d":%d,`, i%100, i)
	}
	b.WriteString(`"end":true}`)
	v, err := ParseJSON(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	row := v.(Row)
	if len(row) != 101 || row[0].Name != "k0" || row[0].Value != int64(400) || row[99].Value != int64(499) || row[100].Name != "end" {
		t.Fatalf("got %d fields, first %v, last %v", len(row), row[0], row[len(row)-1])
	}
}

// A JSONDecoder decodes exactly what ParseJSON decodes, and its shared slabs keep every
// earlier value intact while later ones are decoded and the collector runs.
func TestJSONDecoder(t *testing.T) {
	var d JSONDecoder
	var want, got []any
	for i := 0; i < 3000; i++ {
		ev := ChangeEvent{Op: OpUpdate, Before: customer(int64(i)*7919, fmt.Sprintf("d%d@x.org", i)), After: customer(int64(i), "ü\t"), Source: postgresSource("false", int64(i)<<24), TsMs: int64(i)}
		b, err := ev.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		v, err := d.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := ParseJSON(b)
		if diff := cmp.Diff(ref, v); diff != "" {
			t.Fatalf("value %d differs from ParseJSON (-ParseJSON +Decode):\n%s", i, diff)
		}
		clear(b)
		want, got = append(want, ev.Row()), append(got, v)
		if i%500 == 0 {
			runtime.GC()
		}
	}
	if _, err := d.Decode([]byte(`{"a":`)); err == nil {
		t.Fatal("truncated input decoded")
	}
	if v, err := d.Decode([]byte(`{"after":"ok"}`)); err != nil || cmp.Diff(any(Row{{"after", "ok"}}), v) != "" {
		t.Fatalf("decoder unusable after an error: %v %v", v, err)
	}
	runtime.GC()
	for i := range want {
		if diff := cmp.Diff(want[i], got[i]); diff != "" {
			t.Fatalf("event %d changed (-want +got):\n%s", i, diff)
		}
	}
}

func BenchmarkJSONDecoder(b *testing.B) {
	ev := ChangeEvent{Op: OpUpdate, Before: customer(1, "a@b.c"), After: customer(1, "d@e.f"), Source: mysqlSource("false", 1, 2)}
	data, _ := ev.MarshalJSON()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var d JSONDecoder
	for i := 0; i < b.N; i++ {
		if i%128 == 0 {
			d = JSONDecoder{} // one decoder per fetched chunk, as the runtime uses it
		}
		if _, err := d.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

// AppendJSONMemo renders exactly what AppendJSON renders, over a stream of change events whose
// source blocks are shared in runs, differ between runs (with the same length), take turns in
// a cycle (as a MySQL transaction's blocks per row number do), change every event for longer
// than a field is remembered and then repeat again, next to after-images that never repeat.
func TestAppendJSONMemoSameAsAppendJSON(t *testing.T) {
	source := func(tx int) Row {
		return Row{{Name: "db", Value: "inventory"}, {Name: "table", Value: "orders"}, {Name: "tx", Value: int64(tx)}}
	}
	cycle := []Row{source(-1), source(-2), source(-3), source(-4), source(-5)}
	var m JSONMemo
	var events []any
	shared := source(1)
	fresh := 100 + memoMisses + 300 // from 100 to here a new block every event: stops being kept
	for i := range fresh + 500 {
		switch {
		case i == 10:
			shared = source(2) // a new run, same length
		case i >= 20 && i < 100:
			shared = cycle[i%len(cycle)]
		case i >= 100 && i < fresh:
			shared = source(i)
		case i == fresh:
			shared = source(-1000) // repeats from here on: kept again
		case i >= fresh+200:
			shared = cycle[i%len(cycle)]
		}
		events = append(events, Row{
			{Name: "before", Value: nil},
			{Name: "after", Value: Row{{Name: "id", Value: int64(i)}, {Name: "tags", Value: []any{"a", Row{{Name: "k", Value: int64(i)}}}}}},
			{Name: "source", Value: shared},
			{Name: "op", Value: "c"},
		})
		if i%7 == 0 {
			events = append(events, "not a row", Row{}, Row(nil), []any{shared})
		}
	}
	for round := range 2 {
		for i, ev := range events {
			want, err := AppendJSON(nil, ev)
			if err != nil {
				t.Fatal(err)
			}
			got, err := AppendJSONMemo([]byte("x"), ev, &m)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "x"+string(want) {
				t.Fatalf("round %d, value %d:\n got %s\nwant x%s", round, i, got, want)
			}
		}
		m.Reset()
	}
}

// Rows that land in the same remembered entry, in every order: many blocks each used twice
// running, many blocks in a cycle longer than a field remembers, blocks sharing their first
// field with different lengths, and blocks too large to keep.
func TestAppendJSONMemoCollisions(t *testing.T) {
	block := func(i int) Row { return Row{{Name: "n", Value: int64(i)}, {Name: "m", Value: int64(-i)}} }
	var vals []Row
	for i := range 300 {
		b := block(i)
		vals = append(vals, b, b)
	}
	cycle := make([]Row, memoSeen+200)
	for i := range cycle {
		cycle[i] = block(1000 + i)
	}
	for range 3 {
		vals = append(vals, cycle...)
	}
	full := block(7)
	for range 5 {
		vals = append(vals, full[:1], full[:2], full[:1], full[:1])
	}
	big := Row{{Name: "s", Value: strings.Repeat("x", 2000)}}
	vals = append(vals, big, big, block(8), big)
	var m JSONMemo
	for i, v := range vals {
		ev := Row{{Name: "after", Value: v}, {Name: "source", Value: v}}
		want, _ := AppendJSON(nil, ev)
		got, err := AppendJSONMemo(nil, ev, &m)
		if err != nil || string(got) != string(want) {
			t.Fatalf("value %d: got %s (%v), want %s", i, got, err, want)
		}
	}
	for _, sl := range m.slots {
		for _, e := range sl.seenOrNone() {
			if len(e.b) > memoMaxBytes {
				t.Fatalf("a kept rendering of %d bytes, bound %d", len(e.b), memoMaxBytes)
			}
		}
	}
}

// A Row the memo saw is rendered anew after Reset, even if it was changed in place since (the
// memory of a batch the runtime is done with), and without Reset the memo is what is rendered:
// it does not look at the content of a Row it recognises.
func TestJSONMemoReset(t *testing.T) {
	src := Row{{Name: "table", Value: "a"}}
	ev := Row{{Name: "source", Value: src}}
	var m JSONMemo
	for range 2 {
		if got, _ := AppendJSONMemo(nil, ev, &m); string(got) != `{"source":{"table":"a"}}` {
			t.Fatalf("got %s", got)
		}
	}
	src[0].Value = "b"
	if got, _ := AppendJSONMemo(nil, ev, &m); string(got) != `{"source":{"table":"a"}}` {
		t.Fatalf("without Reset: got %s, want the remembered rendering", got)
	}
	m.Reset()
	if got, _ := AppendJSONMemo(nil, ev, &m); string(got) != `{"source":{"table":"b"}}` {
		t.Fatalf("after Reset: got %s", got)
	}
}

// seenOrNone returns the slot's entries (none for a nil slot).
func (sl *memoSlot) seenOrNone() []memoRow {
	if sl == nil {
		return nil
	}
	return sl.seen[:]
}

// Rendering change events through the memo allocates nothing once the memo has its memory:
// neither the shared source block nor the after-images, each new.
func TestAppendJSONMemoAllocs(t *testing.T) {
	src := Row{{Name: "db", Value: "inventory"}, {Name: "table", Value: "orders"}}
	evs := make([]any, memoMisses+300)
	for i := range evs {
		after := Row{{Name: "id", Value: int64(i)}}
		evs[i] = Row{{Name: "before", Value: nil}, {Name: "after", Value: after}, {Name: "source", Value: src}, {Name: "op", Value: "c"}}
	}
	var m JSONMemo
	buf := make([]byte, 0, 1024)
	for _, ev := range evs[:memoMisses+150] {
		buf, _ = AppendJSONMemo(buf[:0], ev, &m)
	}
	i := memoMisses + 150
	if n := testing.AllocsPerRun(100, func() { buf, _ = AppendJSONMemo(buf[:0], evs[i], &m); i++ }); n != 0 {
		t.Fatalf("%v allocations per event, want 0", n)
	}
}

// appendStringBytewise is appendString's escaping one byte at a time, the reference for its
// word-at-a-time skipping of plain runs.
func appendStringBytewise(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case plainASCII[c]:
			dst = append(dst, c)
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < utf8.RuneSelf:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				dst = append(dst, `\ufffd`...)
			case r == '\u2028' || r == '\u2029':
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			default:
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		i++
	}
	return append(dst, '"')
}

// Every byte that needs escaping (or starts a multi-byte rune) is found wherever it sits in
// the 8-byte words appendString skips plain runs by, and next to every other.
func TestAppendStringWords(t *testing.T) {
	specials := []string{"\"", "\\", "\n", "\x00", "\x1f", "\x7f", " ", "~", "é", "\u2028", "\xff", "\xe2\x80", "€"}
	plain := "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ"
	check := func(s string) {
		t.Helper()
		if got, want := appendString(nil, s), appendStringBytewise(nil, s); string(got) != string(want) {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
		}
	}
	for n := 0; n <= 40; n++ {
		check(plain[:n])
		for at := 0; at <= n; at++ {
			for _, sp := range specials {
				check(plain[:at] + sp + plain[at:n])
				for _, sp2 := range specials {
					check(plain[:at] + sp + sp2 + plain[at:n])
				}
			}
		}
	}
	// every byte value alone in every lane of a word
	for c := 0; c < 256; c++ {
		for at := 0; at < 16; at++ {
			b := []byte(plain[:16])
			b[at] = byte(c)
			check(string(b))
		}
	}
}

// Field names are rendered from the memo's name cache: names that need escaping, names that
// share their first byte's address with different lengths (substrings of one string), more
// names than the cache has entries (collisions), an empty name, and names whose memory is
// rewritten in place between two Resets (as a source's recycled memory is between batches).
func TestJSONMemoFieldNames(t *testing.T) {
	long := "after_id_name"
	names := []string{long[:5], long[:8], long, "", "quo\"te", "tab\there", "é", "\x01ctl", long[6:8]}
	for i := range 600 {
		names = append(names, fmt.Sprintf("col_%d", i))
	}
	mem := []byte("abcdef")
	rewritten := unsafe.String(&mem[0], len(mem))
	var m JSONMemo
	for round := range 3 {
		var row Row
		for i, n := range names {
			row = append(row, Field{Name: n, Value: int64(i)})
		}
		ev := Row{{Name: "after", Value: row}, {Name: rewritten, Value: Row{{Name: rewritten, Value: rewritten}}}}
		for range 2 {
			want, err := AppendJSON(nil, ev)
			if err != nil {
				t.Fatal(err)
			}
			got, err := AppendJSONMemo(nil, ev, &m)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("round %d:\n got %s\nwant %s", round, got, want)
			}
			if !strings.Contains(string(got), `"`+string(mem)+`":{"`+string(mem)+`":`) {
				t.Fatalf("round %d: the rewritten name %q is not rendered as it is now: %s", round, mem, got)
			}
		}
		m.Reset()
		copy(mem, fmt.Sprintf("xyz%03d", round)) // same address and length, new bytes
	}
}

// A MySQL transaction of 1000 short rows spans rows events of a few hundred rows each, and its
// records share one source block per row number: every block is met once per event. The memo
// remembers most of them (a block sharing its memo entry with another is rendered each time),
// so that a block is rendered about once per batch and copied after. A block changed in place
// after its first rendering (which the runtime never does, without a Reset) shows which
// renderings were copied.
func TestJSONMemoRemembersATransactionsBlocks(t *testing.T) {
	const perEvent, events = 300, 4
	blocks := make([]Row, perEvent)
	for i := range blocks {
		blocks[i] = Row{{Name: "file", Value: "mysql-bin.000002"}, {Name: "pos", Value: int64(4711)}, {Name: "row", Value: int64(i)}}
	}
	var m JSONMemo
	rendered := 0
	for e := range events {
		for i, b := range blocks {
			ev := Row{{Name: "after", Value: Row{{Name: "id", Value: int64(e*perEvent + i)}}}, {Name: "source", Value: b}}
			got, err := AppendJSONMemo(nil, ev, &m)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := AppendJSON(nil, ev)
			switch copied := fmt.Sprintf(`"source":{"file":"mysql-bin.000002","pos":4711,"row":%d}}`, i); {
			case e > 0 && strings.HasSuffix(string(got), copied):
			case string(got) == string(want):
				rendered++
			default:
				t.Fatalf("event %d, row %d: got %s, want %s or …%s", e, i, got, want, copied)
			}
		}
		if e == 0 {
			rendered = 0
			for _, b := range blocks {
				b[1].Value = int64(-1) // only a rendering shows this
			}
		}
	}
	if limit := (events - 1) * perEvent * 30 / 100; rendered > limit {
		t.Fatalf("%d of %d source blocks met before were rendered again, want at most %d", rendered, (events-1)*perEvent, limit)
	}
}
