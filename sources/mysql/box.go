package mysql

import (
	"unsafe"

	"github.com/sluice-cdc/sluice/connect"
)

// Boxing without an allocation per value.
//
// Storing an int64, a string or a Row in an interface normally copies it into its own small
// heap object: several allocations per record, most of a record's cost after its decoding. A
// boxer copies values into slabs instead and makes interfaces that point into them, the shape
// the runtime itself builds (connect's JSON parser does the same). This is sound because an
// interface's data word is an ordinary pointer for the garbage collector (a slab lives while
// any interface points into it), and a slab element is never written again after it is boxed
// (appends only fill unused capacity; a full slab is replaced, never reused), so the boxed
// values are as immutable as the language makes them.
//
// Boxed rows point into a fieldArena and its fields back to boxed rows: reset, called with the
// arena's, starts a new generation of row slabs (see fieldArena). Ints, strings and string data
// point nowhere back, so their slabs carry over.
//
// A boxer belongs to one goroutine. The zero boxer is ready; a nil *boxer boxes the usual way.
//
// With a recycler (rc), row slabs come from it and are held for the batch's Release (see
// recycler.batch), after which they are written again. With vrc too, so are the slabs of ints,
// strings and data: reset then starts new ones, so nothing boxed for one batch may be used by
// a later one (the snapshot recycles both; the binlog stream only rows, since its values are
// mostly the decoder's).
type boxer struct {
	ints  []int64
	strs  []string
	bytes []byte // string data

	rows           []connect.Row
	rowsUsed, next int
	render         []byte            // renderings' data (see room)
	raws           []connect.RawJSON // headers of renderings

	rc, vrc *recycler
	held    generation // the generation's slabs (with rc)
}

// reset starts a new generation of row slabs (of every slab, with vrc).
func (b *boxer) reset() {
	b.next = min(max(b.rowsUsed, 16), boxSlab)
	b.rowsUsed = 0
	b.rows = nil
	if b.vrc != nil {
		b.ints, b.strs, b.bytes, b.render, b.raws = nil, nil, nil, nil, nil
	}
	if b.rc != nil {
		b.held = generation{}
	}
}

// detach moves the generation's slabs to g.
func (b *boxer) detach(g *generation) {
	g.rows, g.ints, g.strs, g.bytes, g.raws = b.held.rows, b.held.ints, b.held.strs, b.held.bytes, b.held.raws
	b.held = generation{}
}

const (
	boxSlab      = 512      // values per int, string and row slab
	bytesSlab    = 32 << 10 // bytes per string data slab
	maxSlabBytes = 1 << 10  // longer strings get their own allocation
)

type eface struct{ typ, data unsafe.Pointer }

func typeWord(x any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&x)).typ }

var (
	typInt64   = typeWord(int64(0))
	typString  = typeWord("")
	typRow     = typeWord(connect.Row(nil))
	typRawJSON = typeWord(connect.RawJSON(nil))
)

func boxAt(typ, data unsafe.Pointer) (v any) {
	e := (*eface)(unsafe.Pointer(&v))
	e.typ, e.data = typ, data
	return v
}

// int boxes n (small values come from boxInt's table).
func (b *boxer) int(n int64) any {
	if n >= 0 && n < 4096 || b == nil {
		return boxInt(n)
	}
	if len(b.ints) == cap(b.ints) {
		if b.vrc == nil {
			b.ints = make([]int64, 0, boxSlab)
		} else {
			b.ints = b.vrc.ints.get(boxSlab)
			b.held.ints = append(b.held.ints, b.ints)
		}
	}
	b.ints = append(b.ints, n)
	return boxAt(typInt64, unsafe.Pointer(&b.ints[len(b.ints)-1]))
}

// str boxes s.
func (b *boxer) str(s string) any {
	if b == nil || s == "" {
		return s
	}
	if len(b.strs) == cap(b.strs) {
		if b.vrc == nil {
			b.strs = make([]string, 0, boxSlab)
		} else {
			b.strs = b.vrc.strs.get(boxSlab)
			b.held.strs = append(b.held.strs, b.strs)
		}
	}
	b.strs = append(b.strs, s)
	return boxAt(typString, unsafe.Pointer(&b.strs[len(b.strs)-1]))
}

// row boxes r; a nil Row stays an untyped nil (JSON null).
func (b *boxer) row(r connect.Row) any {
	if r == nil {
		return nil
	}
	if b == nil {
		return r
	}
	if len(b.rows) == cap(b.rows) {
		if b.rc == nil {
			b.rows = make([]connect.Row, 0, max(b.next, 16))
		} else {
			b.rows = b.rc.rows.get(boxSlab)
			b.held.rows = append(b.held.rows, b.rows)
		}
	}
	b.rowsUsed++
	b.rows = append(b.rows, r)
	return boxAt(typRow, unsafe.Pointer(&b.rows[len(b.rows)-1]))
}

// string copies p into a string whose bytes live in a slab (never written again).
func (b *boxer) string(p []byte) string {
	if b == nil || len(p) > maxSlabBytes {
		return string(p)
	}
	if len(p) == 0 {
		return ""
	}
	if cap(b.bytes)-len(b.bytes) < len(p) {
		if b.vrc == nil {
			b.bytes = make([]byte, 0, bytesSlab)
		} else {
			b.bytes = b.vrc.bytes.get(bytesSlab)
			b.held.bytes = append(b.held.bytes, b.bytes)
		}
	}
	start := len(b.bytes)
	b.bytes = append(b.bytes, p...)
	return unsafe.String(&b.bytes[start], len(p))
}
