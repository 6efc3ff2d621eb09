package connect

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// A field name the memo saw is rendered from the memo until Reset (at the top level, in a
// nested Row and in a Row inside an array alike), and from its bytes again after Reset, even
// when its memory was rewritten in place with the same length since (a source's recycled
// memory, after Batch.Release).
func TestJSONMemoNameReset(t *testing.T) {
	mem := []byte("abc")
	name := unsafe.String(&mem[0], len(mem))
	ev := Row{{Name: name, Value: Row{{Name: name, Value: []any{Row{{Name: name, Value: int64(1)}}}}}}}
	var m JSONMemo
	render := func() string {
		got, err := AppendJSONMemo(nil, ev, &m)
		if err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	if got, want := render(), `{"abc":{"abc":[{"abc":1}]}}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	copy(mem, "xyz") // without Reset, which the runtime never does
	if got, want := render(), `{"abc":{"abc":[{"abc":1}]}}`; got != want {
		t.Fatalf("without Reset: got %s, want the remembered rendering %s", got, want)
	}
	m.Reset()
	if got, want := render(), `{"xyz":{"xyz":[{"xyz":1}]}}`; got != want {
		t.Fatalf("after Reset: got %s, want %s", got, want)
	}
}

// A name the memo remembers stays alive until Reset, so that the collector cannot give its
// memory to another name of the same length (a transform builds new names for every record,
// and a collection may run in the middle of a batch).
func TestJSONMemoNamesOutliveTheirRecords(t *testing.T) {
	var m JSONMemo
	for i := range 60 {
		ev := Row{{Name: fmt.Sprintf("col_%04d", i), Value: int64(i)}, {Name: strings.Repeat(string(rune('a'+i%26)), 40), Value: int64(i)}}
		want, _ := AppendJSON(nil, ev)
		got, err := AppendJSONMemo(nil, ev, &m)
		if err != nil || string(got) != string(want) {
			t.Fatalf("record %d: got %s (%v), want %s", i, got, err, want)
		}
		runtime.GC()
	}
}

// A field whose Rows never repeat (an after-image) stops having its renderings copied into the
// memo after memoMisses of them, and stays so over Reset: later batches copy none.
func TestJSONMemoMissesCarryOverReset(t *testing.T) {
	var m JSONMemo
	i := 0
	batch := func(n int) {
		m.Reset()
		for range n {
			ev := Row{{Name: "after", Value: Row{{Name: "id", Value: int64(i)}}}}
			if _, err := AppendJSONMemo(nil, ev, &m); err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	batch(memoMisses + 10)
	for b := range 3 {
		batch(100)
		kept := 0
		for _, e := range m.slots[0].seenOrNone() {
			if e.kept {
				kept++
			}
		}
		if kept != 0 {
			t.Fatalf("batch %d: %d after-images copied into the memo, want 0", b, kept)
		}
	}
}

// The memo's renderings of field names are bounded whatever the names: names are data too
// (hstore keys, the keys of a JSON payload parsed by a transform) and may be long.
func TestJSONMemoNameCacheBounded(t *testing.T) {
	var m JSONMemo
	for i := range 64 {
		ev := Row{{Name: strings.Repeat("\x01", 1<<16) + fmt.Sprint(i), Value: int64(i)}, {Name: fmt.Sprint("short", i), Value: int64(i)}}
		want, _ := AppendJSON(nil, ev)
		got, err := AppendJSONMemo(nil, ev, &m)
		if err != nil || string(got) != string(want) {
			t.Fatalf("name %d: rendered %d bytes (%v), want %d", i, len(got), err, len(want))
		}
	}
	m.Reset()
	held := 0
	for _, e := range m.names.e {
		held += cap(e.b)
	}
	if limit := nameSlots * maxNameBytes; held > limit {
		t.Fatalf("the memo holds %d bytes of name renderings after Reset, want at most %d", held, limit)
	}
}

// Every kept rendering of a Row has a buffer of exactly memoMaxBytes, so that the memo's
// bound holds: growing one past it would keep more than memoSlots*memoSeen*memoMaxBytes.
func TestJSONMemoRenderingsBounded(t *testing.T) {
	var m JSONMemo
	for i := range 3000 {
		src := Row{{Name: "s", Value: strings.Repeat("x", i%600)}}
		ev := Row{{Name: "after", Value: src}, {Name: "source", Value: src}}
		for range 2 {
			if _, err := AppendJSONMemo(nil, ev, &m); err != nil {
				t.Fatal(err)
			}
		}
	}
	for f, sl := range m.slots {
		for _, e := range sl.seenOrNone() {
			if e.b != nil && cap(e.b) != memoMaxBytes {
				t.Fatalf("field %d: a rendering buffer of %d bytes, want %d", f, cap(e.b), memoMaxBytes)
			}
		}
	}
}

// A field name too long for the memo to keep is rendered from its own bytes every time it is
// met, the second time as the first: the memo neither keeps it nor answers for it with what
// its entry held before.
func TestJSONMemoLongNameRepeats(t *testing.T) {
	short := "id"
	long := strings.Repeat("k", maxNameBytes) // rendered with its quotes and colon: too long to keep
	var m JSONMemo
	for i := range 3 {
		for _, ev := range []Row{{{Name: short, Value: int64(i)}}, {{Name: long, Value: int64(i)}}} {
			want, _ := AppendJSON(nil, ev)
			got, err := AppendJSONMemo(nil, ev, &m)
			if err != nil || string(got) != string(want) {
				t.Fatalf("pass %d: got %.40q... (%d bytes, %v), want %.40q... (%d bytes)", i, got, len(got), err, want, len(want))
			}
		}
	}
}

// Each entry of the name cache holds at most maxNameBytes of rendering, whatever names of at
// most that length met at it one after the other (a shorter, then the longest kept, both at
// one address).
func TestJSONMemoNameBufferBounded(t *testing.T) {
	mem := []byte(strings.Repeat("n", maxNameBytes))
	longest := maxNameBytes - len(`"":`)
	for first := 1; first <= longest; first++ {
		var m JSONMemo
		for _, n := range []int{first, longest} {
			ev := Row{{Name: unsafe.String(&mem[0], n), Value: int64(n)}}
			want, _ := AppendJSON(nil, ev)
			got, err := AppendJSONMemo(nil, ev, &m)
			if err != nil || string(got) != string(want) {
				t.Fatalf("name of %d bytes: got %q (%v), want %q", n, got, err, want)
			}
		}
		kept := 0
		for _, e := range m.names.e {
			if cap(e.b) > maxNameBytes {
				t.Fatalf("names of %d then %d bytes: a rendering buffer of %d bytes, want at most %d", first, longest, cap(e.b), maxNameBytes)
			}
			if e.b != nil {
				kept++
			}
		}
		if kept != 1 {
			t.Fatalf("%d entries hold a rendering, want 1 (both names had one address)", kept)
		}
	}
}

// Blocks that differ from the one before in some fields only (a MySQL transaction's source
// blocks differ in their row number) render as AppendJSON renders them: fields copied from the
// block before are the ones with the same name and the very same scalar value; a value that
// differs, a field renamed, a block of another length, and values of the same address that
// are not scalars (a Row, a list, bytes, all changed in place) render anew.
func TestJSONMemoCopiesUnchangedFields(t *testing.T) {
	shared := []any{"0.1.0", "mysql", int64(1796057681576), "mariadb-bin.000003", int64(1234567), nil, 3.5, true}
	nested := Row{{Name: "k", Value: "a"}}
	list := []any{"x"}
	raw := []byte("ab")
	// boxed once, so every block holds them at the same address
	nestedV, listV, rawV := any(nested), any(list), any(raw)
	block := func(row int64) Row {
		r := Row{{Name: "row", Value: row}, {Name: "nested", Value: nestedV}, {Name: "list", Value: listV}, {Name: "raw", Value: rawV}}
		for i, v := range shared {
			r = append(r, Field{Name: fieldNames[i], Value: v})
		}
		return r
	}
	var m JSONMemo
	for i := range 40 {
		b := block(int64(i * 37 % 1500)) // from one digit to four: the fields after it move
		switch i {
		case 10:
			shared[2] = int64(42) // a new value: rendered anew from here on
		case 20:
			b = b[:len(b)-1] // another length
		case 25:
			b[len(b)-1].Name = "other" // a field renamed at its place
		case 30:
			nested[0].Value = "changed in place"
			list[0] = "changed in place"
			raw[0] = 'z'
		}
		ev := Row{{Name: "source", Value: b}} // rendered before the next changes in place
		want, _ := AppendJSON(nil, ev)
		got, err := AppendJSONMemo([]byte("x"), ev, &m)
		if err != nil || string(got) != "x"+string(want) {
			t.Fatalf("block %d:\n got %s (%v)\nwant x%s", i, got, err, want)
		}
	}
	if len(m.slots[0].last.fields) == 0 {
		t.Fatal("the memo did not follow the blocks field by field")
	}
}

var fieldNames = []string{"version", "connector", "ts_ms", "file", "pos", "query", "score", "flag"}

// A value of recycled memory (a source's boxed number, rewritten in place once its batch was
// released) renders with its new content after Reset, though at the same address.
func TestJSONMemoResetForgetsFieldsOfRecycledMemory(t *testing.T) {
	slab := make([]int64, 1)
	boxed := func() any { // as a source boxes into a slab it recycles
		var v any = int64(0)
		(*[2]unsafe.Pointer)(unsafe.Pointer(&v))[1] = unsafe.Pointer(&slab[0])
		return v
	}
	var m JSONMemo
	for batch := range 3 {
		slab[0] = int64(1000 + batch)
		for row := range 3 {
			ev := Row{{Name: "source", Value: Row{{Name: "pos", Value: boxed()}, {Name: "row", Value: int64(row)}}}}
			want := fmt.Sprintf(`{"source":{"pos":%d,"row":%d}}`, 1000+batch, row)
			if got, err := AppendJSONMemo(nil, ev, &m); err != nil || string(got) != want {
				t.Fatalf("batch %d, row %d: got %s (%v), want %s", batch, row, got, err, want)
			}
		}
		m.Reset()
	}
}

// The memo's memory stays bounded whatever the Rows it follows field by field: a Row with a
// large value (a document column of an after-image) is rendered, not kept for copying.
func TestJSONMemoLastRowBounded(t *testing.T) {
	var m JSONMemo
	doc := strings.Repeat("x", 1<<20)
	for i := range 3 {
		ev := Row{{Name: "after", Value: Row{{Name: "id", Value: int64(i)}, {Name: "doc", Value: doc}}}}
		want, _ := AppendJSON(nil, ev)
		got, err := AppendJSONMemo(nil, ev, &m)
		if err != nil || string(got) != string(want) {
			t.Fatalf("row %d: got %d bytes (%v), want %d", i, len(got), err, len(want))
		}
	}
	m.Reset()
	if c := cap(m.slots[0].last.b); c > memoMaxBytes {
		t.Fatalf("after Reset the memo holds %d bytes of a rendering it follows, want at most %d", c, memoMaxBytes)
	}
}

// A field is copied from the Row rendered before only when its value has the very same type
// as well as the same box, and its name the same length as well as the same bytes: Go boxes
// true and int64(1) at one address (and so do false and 0), and a name may be a prefix of the
// one before it, cut from the same string.
func TestJSONMemoCopiesOnlyTheSameTypeAndName(t *testing.T) {
	vb, vi := any(memoTrue), any(memoOne) // boxed at run time, as a source's values are
	if (*[2]unsafe.Pointer)(unsafe.Pointer(&vb))[1] != (*[2]unsafe.Pointer)(unsafe.Pointer(&vi))[1] {
		t.Fatal("true and int64(1) are not boxed at one address: this test no longer tests anything")
	}
	names := "flags"
	var m JSONMemo
	for i := range 8 {
		// first true and 1 by turns under one name, then 1 under "fla" and "flag" by turns
		v, name := vb, names[:4]
		if i%2 == 1 || i >= 4 {
			v = vi
		}
		if i >= 4 {
			name = names[:3+i%2]
		}
		ev := Row{{Name: "source", Value: Row{{Name: name, Value: v}, {Name: "row", Value: int64(1000 + i)}}}}
		want, _ := AppendJSON(nil, ev)
		got, err := AppendJSONMemo(nil, ev, &m)
		if err != nil || string(got) != string(want) {
			t.Fatalf("block %d: got %s (%v), want %s", i, got, err, want)
		}
	}
}

var (
	memoTrue = true
	memoOne  = int64(1)
)
