package mysql

import (
	"bytes"
	"strconv"
	"sync"

	"github.com/sluice-cdc/sluice/connect"
)

// Building records cheaply. Both paths emit one record per row change, so what a record costs
// beyond decoding its row decides the throughput. The envelope, the row images and the key of a
// record are cut from a slab of fields (fieldArena), its values and rows are boxed into slabs
// (boxer), the Orders and States of positions are cut from large byte chunks (posArena), the
// source block is shared: by the records of one transaction, table and row number in the event
// (binlog) or of one table (snapshot), and values every record repeats (op, ts_ms, small
// numbers) are boxed once.

// Indexes of the source block's fields (Debezium's order, see sourceBlock).
const (
	srcVersion = iota
	srcConnector
	srcName
	srcTsMs
	srcSnapshot
	srcDB
	srcSequence
	srcTable
	srcServerID
	srcGTID
	srcFile
	srcPos
	srcRow
	srcThread
	srcQuery
	srcFields
)

// envFields is the number of fields of the envelope {before, after, source, op, ts_ms}.
const envFields = 5

// block is the memory of one record's rows: the envelope, the before and after images and the
// key. Each part is capped, so appending to one (a transform adding a field) copies it instead
// of overwriting the next.
type block struct {
	env, before, after, key connect.Row
}

// fieldArena hands out the fields of records from slabs: one allocation (and one object for
// the garbage collector) per many records instead of one per record.
//
// Slabs must not outlive each other in a chain: a record's fields point to boxed rows (see
// boxer.row) and those point back into fields, so a slab shared by two batches would keep the
// previous batch's slabs alive, and those theirs, back to the first. reset starts a new
// generation at every batch, so that a batch's records point only into its own slabs (and to
// memory of their own, such as a shared source block); a slab is sized from the last batch's
// needs, so small batches stay small.
//
// With a recycler, slabs come from it, are all of the largest size, and the slabs of a
// generation are held for the batch's Release (see recycler.batch).
type fieldArena struct {
	buf        []connect.Field
	used, next int
	rc         *recycler
	held       [][]connect.Field // the generation's slabs (with rc)
}

const (
	minFieldSlab = 64
	// 1023 fields, 32,736 bytes: with the 8-byte header of an object holding pointers, still
	// a small object, recycled without the heap lock (1024 would be a large one)
	maxFieldSlab = 1023
)

// reset starts a new generation of slabs.
func (a *fieldArena) reset() {
	a.next = min(max(a.used, minFieldSlab), maxFieldSlab)
	a.used = 0
	a.buf = nil
	a.held = nil
}

// take cuts n fields from a.
func (a *fieldArena) take(n int) connect.Row {
	if len(a.buf) < n {
		if a.rc == nil {
			a.buf = make([]connect.Field, max(a.next, minFieldSlab, n))
		} else {
			slab := a.rc.fields.get(max(maxFieldSlab, n))
			slab = slab[:cap(slab)]
			a.held = append(a.held, slab)
			a.buf = slab
		}
	}
	a.used += n
	r := a.buf[:n:n]
	a.buf = a.buf[n:]
	if a.rc != nil {
		clear(r) // a recycled slab holds an earlier batch's fields
	}
	return r
}

// newBlock cuts the rows of one record from a.
func (a *fieldArena) newBlock(before, after, key int) block {
	buf := a.take(envFields + before + after + key)
	var b block
	cut := func(k int) connect.Row {
		r := buf[:k:k]
		buf = buf[k:]
		return r
	}
	b.env = cut(envFields)
	b.before = cut(before)
	b.after = cut(after)
	b.key = cut(key)
	return b
}

// envelope fills b.env as connect.ChangeEvent.Row does and returns it boxed. before/after are
// nil for an absent image; source is the boxed source block.
func (b *block) envelope(bx *boxer, before, after connect.Row, source any, op connect.Op, tsMs any) any {
	e := b.env
	e[0] = connect.Field{Name: connect.FieldBefore, Value: bx.row(before)}
	e[1] = connect.Field{Name: connect.FieldAfter, Value: bx.row(after)}
	e[2] = connect.Field{Name: connect.FieldSource, Value: source}
	e[3] = connect.Field{Name: connect.FieldOp, Value: op.Boxed()}
	e[4] = connect.Field{Name: connect.FieldTsMs, Value: tsMs}
	return bx.row(e)
}

// boxedInts holds int64 values 0..4095 boxed once: row numbers, counters and small column
// values are boxed without an allocation (the runtime itself does so only below 256).
var boxedInts = sync.OnceValue(func() []any {
	out := make([]any, 4096)
	for i := range out {
		out[i] = int64(i)
	}
	return out
})

// boxInt boxes n, without allocating for small non-negative values.
func boxInt(n int64) any {
	if n >= 0 && n < 4096 {
		return boxedInts()[n]
	}
	return n
}

// posArena hands out the bytes of positions (Order and State) from large chunks. A cut slice
// is capped, so it never grows into the next one; chunks are never reused.
type posArena struct {
	buf []byte
}

const posChunk = 16 << 10

// reserve makes room for at least n more bytes without moving what was cut before.
func (a *posArena) reserve(n int) {
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, max(posChunk, n))
	}
}

// cut returns the bytes appended since start, capped.
func (a *posArena) cut(start int) []byte { return a.buf[start:len(a.buf):len(a.buf)] }

// statePrefix renders the fixed part of a streaming State, `{"v":1,"epoch":E,"file":"F","pos":P`,
// and stateSuffix the rest after the row count, `,"gtid":"G"}` or `}`, so that a record's State
// is prefix, row and suffix (appendStreamState's layout, byte for byte).
func statePrefix(epoch uint32, file string, pos uint32) []byte {
	return bytes.TrimSuffix(appendStreamState(nil, epoch, file, pos, 0, ""), []byte("}"))
}

func stateSuffix(gtid string) []byte {
	if gtid == "" {
		return []byte("}")
	}
	return append(strconv.AppendQuote([]byte(`,"gtid":`), gtid), '}')
}
