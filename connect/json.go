package connect

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// maxDepth bounds the nesting the parser accepts, so hostile input cannot exhaust the stack.
const maxDepth = 256

// AppendJSON appends the JSON rendering of a data-model value to dst. Rows keep their field
// order; []byte renders as base64; NaN and ±Inf render as strings. Other Go integer and float
// kinds, time.Time (RFC 3339, nanoseconds) and map[string]any (sorted keys) are accepted for
// convenience. A value outside the data model is an error.
func AppendJSON(dst []byte, v any) ([]byte, error) {
	return appendValue(dst, v, 0, nil)
}

// JSONMemo lets AppendJSONMemo render once a Row that several values hold, such as the source
// block a batch's change events share. The zero value is ready; its memory is reused.
type JSONMemo struct {
	slots [memoSlots]*memoSlot
	names nameCache
}

// nameCache keeps the renderings (`"name":`) of the field names met since the last Reset, by
// the identity (address and length) of their strings: the columns of a table and the fields of
// an envelope are the same strings in every record of a batch, so each name is escaped once.
// An entry keeps its string alive, so no other string can take its address before Reset.
type nameCache struct {
	e [nameSlots]nameEntry
}

type nameEntry struct {
	name string
	b    []byte
}

// addrHash mixes an address into 64 bits whose top bits index a memo table. A plain
// multiplicative hash maps evenly spaced addresses (Rows of one size, allocated in a run) to
// evenly spaced entries, and two runs of them onto each other; the shifts before and after
// the multiplication break that structure.
func addrHash(p unsafe.Pointer) uint64 {
	x := uint64(uintptr(p))
	x ^= x >> 29
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 32
	return x * 0x94D049BB133111EB
}

// nameSlots is the size of a nameCache's table.
const nameSlots = 1 << nameSlotsBits

const nameSlotsBits = 8

// maxNameBytes bounds a kept rendering of a name, so that a nameCache holds at most
// nameSlots*maxNameBytes (64 KiB): names are data too (hstore keys, the keys of a JSON
// payload a transform parsed) and may be long; a longer one is rendered every time.
const maxNameBytes = 256

// render appends the rendering of field name to dst.
func (c *nameCache) render(dst []byte, name string) []byte {
	if len(name) == 0 {
		return append(dst, `"":`...)
	}
	p := unsafe.StringData(name)
	// a plain multiplicative hash: a batch meets a few dozen names
	e := &c.e[uint64(uintptr(unsafe.Pointer(p)))*0x9E3779B97F4A7C15>>(64-nameSlotsBits)]
	if unsafe.StringData(e.name) == p && len(e.name) == len(name) {
		return append(dst, e.b...)
	}
	start := len(dst)
	dst = append(appendString(dst, name), ':')
	if len(dst)-start <= maxNameBytes {
		if e.b == nil {
			e.b = make([]byte, 0, maxNameBytes)
		}
		e.name, e.b = name, append(e.b[:0], dst[start:]...)
	}
	return dst
}

func (c *nameCache) reset() {
	for i := range c.e {
		c.e[i].name = ""
	}
}

// memoSlots is how many fields of a top-level Row a JSONMemo follows.
const memoSlots = 8

// memoSlot remembers the Rows last seen in one field, in a table indexed by their address, and
// counts the different Rows that followed one another there without a repeat.
type memoSlot struct {
	seen   [memoSeen]memoRow
	misses int
	last   lastRow
}

// lastRow is the Row a field rendered last (while its renderings are kept), field by field: a
// MySQL transaction's source blocks differ from one another in their row number alone, so a
// new one is mostly copied from the one before (see appendRowFrom).
type lastRow struct {
	fields []Field // copies: they keep the values alive, so no other value can take their address
	ends   []int   // where each field's rendering ends in b (after its comma, name and value)
	spare  []int   // the ends of the Row before: memory for the next ends
	b      []byte
}

// maxLastFields bounds the fields of a Row a lastRow follows.
const maxLastFields = 32

func (l *lastRow) reset() {
	clear(l.fields)
	l.fields, l.ends, l.b = l.fields[:0], l.ends[:0], l.b[:0]
}

// memoRow is one Row seen: its identity and, if kept, its rendering.
type memoRow struct {
	first *Field
	n     int
	b     []byte
	kept  bool
}

// memoSeen is how many Rows a field remembers: a MySQL transaction shares one source block per
// row number of its rows events, a few hundred of them with 8 KiB events of short rows, and
// each is met again in every event of the transaction.
const memoSeen = 1 << memoSeenBits

const memoSeenBits = 11

// memoMaxBytes bounds a kept rendering (a source block takes a few hundred bytes); each
// remembered Row's buffer holds exactly that much once it kept one. A JSONMemo thus holds at
// most memoSlots*memoSeen*memoMaxBytes (8 MiB) of renderings, in practice those of the fields
// that hold Rows (before, after, source): at most 1 MiB each, and before and after stop
// keeping after memoMisses (512 KiB each).
const memoMaxBytes = 512

// memoMisses is how many different Rows in a row stop a field's renderings from being kept
// (an after-image never repeats), until a Row repeats there. A MySQL transaction's first rows
// event brings a few hundred new source blocks in a row.
const memoMisses = memoSeen / 2

// Reset forgets the Rows seen: call it before the Rows it saw, or the values in them, may
// change or be freed.
func (m *JSONMemo) Reset() {
	for _, sl := range m.slots {
		if sl != nil {
			for i := range sl.seen {
				sl.seen[i].first, sl.seen[i].n, sl.seen[i].kept = nil, 0, false
			}
			sl.last.reset() // its values may be recycled memory (Batch.Release) from now on
			// misses carries over: a field whose Rows never repeat (an after-image) stays
			// watched only, instead of copying memoMisses renderings again in every batch
		}
	}
	m.names.reset()
}

// AppendJSONMemo is AppendJSON, except that when v is a Row, a Row held directly in one of its
// first fields that is the very Row (same memory, same length) seen in that field by one of
// the last calls is copied from m instead of rendered again, and so is the rendering of a
// field name (at any depth) whose string m saw since its last Reset; a field of such a Row
// that holds the very name and boxed scalar value (string, number, bool, null) of the field at
// its place in the Row rendered before it there is copied from that rendering. The caller must
// Reset m before any Row, value or field name it saw may have been modified or freed; Rows and
// boxed values are not modified in place (see Transform).
func AppendJSONMemo(dst []byte, v any, m *JSONMemo) ([]byte, error) {
	x, ok := v.(Row)
	if m == nil {
		return appendValue(dst, v, 0, nil)
	}
	nc := &m.names
	if !ok || x == nil {
		return appendValue(dst, v, 0, nc)
	}
	dst = append(dst, '{')
	var err error
	for i := range x {
		dst = appendFieldName(dst, i, x[i].Name, nc)
		r, ok := x[i].Value.(Row)
		if !ok || len(r) == 0 || i >= memoSlots {
			if dst, err = appendValue(dst, x[i].Value, 1, nc); err != nil {
				return dst, err
			}
			continue
		}
		sl := m.slots[i]
		if sl == nil {
			sl = new(memoSlot)
			m.slots[i] = sl
		}
		first := &r[0]
		e := &sl.seen[addrHash(unsafe.Pointer(first))>>(64-memoSeenBits)]
		same := e.first == first && e.n == len(r)
		if same && e.kept {
			dst = append(dst, e.b...)
			sl.misses = 0
			continue
		}
		start := len(dst)
		if sl.misses < memoMisses && len(r) <= maxLastFields {
			if dst, err = appendRowFrom(dst, r, &sl.last, nc); err != nil {
				return dst, err
			}
		} else if dst, err = appendValue(dst, x[i].Value, 1, nc); err != nil { // the boxed Row: no new box
			return dst, err
		}
		e.first, e.n = first, len(r)
		if same {
			sl.misses = 0
		} else {
			sl.misses++
		}
		// A field whose Rows keep changing is only watched, not copied, until one repeats.
		if e.kept = sl.misses < memoMisses && len(dst)-start <= memoMaxBytes; e.kept {
			if e.b == nil {
				e.b = make([]byte, 0, memoMaxBytes)
			}
			e.b = append(e.b[:0], dst[start:]...)
		}
	}
	return append(dst, '}'), nil
}

// appendRowFrom renders r (a Row in a field of a top-level Row, at depth 1) as appendValue does,
// copying the rendering of each field that is the same as the field at its place in last: the
// same name and the very same value of a scalar type (the same string or number, boxed at the
// same address; boxed scalars are not changed in place). It then makes r the last Row. last
// must be reset before any value it holds may be changed: JSONMemo.Reset does.
func appendRowFrom(dst []byte, r Row, last *lastRow, nc *nameCache) ([]byte, error) {
	start := len(dst)
	same := len(last.fields) == len(r)
	dst = append(dst, '{')
	ends := last.spare[:0] // not last.ends, which is read below
	for j := range r {
		if same && sameScalar(&r[j], &last.fields[j]) {
			from := 1
			if j > 0 {
				from = last.ends[j-1]
			}
			dst = append(dst, last.b[from:last.ends[j]]...)
		} else {
			dst = appendFieldName(dst, j, r[j].Name, nc)
			var err error
			if dst, err = appendValue(dst, r[j].Value, 2, nc); err != nil {
				last.reset()
				return dst, err
			}
		}
		ends = append(ends, len(dst)-start)
	}
	dst = append(dst, '}')
	if len(dst)-start > memoMaxBytes {
		// not followed: a large value (a document column) would stay in the memo for good
		last.reset()
		if cap(last.b) > memoMaxBytes {
			last.b = nil
		}
		return dst, nil
	}
	last.ends, last.spare = ends, last.ends
	last.fields = append(last.fields[:0], r...)
	last.b = append(last.b[:0], dst[start:]...)
	return dst, nil
}

// sameScalar reports whether two fields have the same name and the very same boxed value of a
// scalar type, so that they render alike.
func sameScalar(a, b *Field) bool {
	if len(a.Name) != len(b.Name) || unsafe.StringData(a.Name) != unsafe.StringData(b.Name) {
		return false
	}
	type eface struct{ typ, data unsafe.Pointer }
	x, y := (*eface)(unsafe.Pointer(&a.Value)), (*eface)(unsafe.Pointer(&b.Value))
	if *x != *y {
		return false
	}
	switch a.Value.(type) {
	case nil, string, int64, int, int32, float64, bool:
		return true
	}
	return false
}

// MarshalJSONValue renders a data-model value as JSON.
func MarshalJSONValue(v any) ([]byte, error) {
	return AppendJSON(make([]byte, 0, 256), v)
}

// MarshalJSON renders the row as a JSON object with its fields in order.
func (r Row) MarshalJSON() ([]byte, error) { return MarshalJSONValue(r) }

// UnmarshalJSON parses a JSON object (or null) into r, keeping field order.
func (r *Row) UnmarshalJSON(b []byte) error {
	v, err := ParseJSON(b)
	if err != nil {
		return err
	}
	switch x := v.(type) {
	case nil:
		*r = nil
	case Row:
		*r = x
	default:
		return fmt.Errorf("row: want a JSON object, got %s", typeName(v))
	}
	return nil
}

func appendValue(dst []byte, v any, depth int, nc *nameCache) ([]byte, error) {
	if depth > maxDepth {
		return dst, errors.New("value nested too deeply")
	}
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if x {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case string:
		return appendString(dst, x), nil
	case int64:
		return appendInt(dst, x), nil
	case RawJSON:
		if len(x) == 0 {
			return dst, errors.New("raw JSON value is empty")
		}
		return append(dst, x...), nil
	case int:
		return appendInt(dst, int64(x)), nil
	case int32:
		return appendInt(dst, int64(x)), nil
	case int16:
		return appendInt(dst, int64(x)), nil
	case int8:
		return appendInt(dst, int64(x)), nil
	case uint64:
		return appendUint(dst, x), nil
	case uint:
		return appendUint(dst, uint64(x)), nil
	case uint32:
		return appendUint(dst, uint64(x)), nil
	case uint16:
		return appendUint(dst, uint64(x)), nil
	case uint8:
		return appendUint(dst, uint64(x)), nil
	case float64:
		return appendFloat(dst, x, 64), nil
	case float32:
		return appendFloat(dst, float64(x), 32), nil
	case []byte:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, x)
		return append(dst, '"'), nil
	case Row:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '{')
		var err error
		for i := range x {
			dst = appendFieldName(dst, i, x[i].Name, nc)
			if dst, err = appendValue(dst, x[i].Value, depth+1, nc); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case []any:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		var err error
		for i := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendValue(dst, x[i], depth+1, nc); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		if x == nil {
			return append(dst, "null"...), nil
		}
		return appendValue(dst, RowFromMap(x), depth, nc)
	case time.Time:
		return appendString(dst, x.Format(time.RFC3339Nano)), nil
	default:
		return dst, fmt.Errorf("value of type %T is outside the data model", v)
	}
}

// appendFieldName appends the name of a Row's i-th field and its colon, after a comma unless
// it is the first.
func appendFieldName(dst []byte, i int, name string, nc *nameCache) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	if nc != nil {
		return nc.render(dst, name)
	}
	dst = appendString(dst, name)
	return append(dst, ':')
}

func appendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	// Like encoding/json: plain notation for ordinary magnitudes, exponent otherwise.
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	n := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		if m := len(dst) - n; m >= 4 && dst[len(dst)-4] == 'e' && dst[len(dst)-3] == '-' && dst[len(dst)-2] == '0' {
			dst[len(dst)-2] = dst[len(dst)-1]
			dst = dst[:len(dst)-1]
		}
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// AppendJSONText appends b, text, as a JSON string: as AppendJSON renders string(b), without
// the copy.
func AppendJSONText(dst, b []byte) []byte {
	return appendString(dst, unsafe.String(unsafe.SliceData(b), len(b)))
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as in encoding/json;
// unlike it, <, > and & are not escaped (the output is not meant for HTML).
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		for i+8 <= len(s) && plainWord(load64(s[i:])) {
			i += 8
		}
		for i < len(s) && plainASCII[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// RowFromMap builds a Row from a map, with the keys in sorted order (a map has no order of its
// own). Nested maps become Rows too.
func RowFromMap(m map[string]any) Row {
	if m == nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	out := make(Row, len(keys))
	for i, k := range keys {
		v := m[k]
		if mm, ok := v.(map[string]any); ok {
			v = RowFromMap(mm)
		}
		out[i] = Field{Name: k, Value: v}
	}
	return out
}

func sortStrings(s []string) {
	// insertion sort: rows are small, and this keeps the package free of reflection-based sorts
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// SyntaxError is a JSON parse error at a byte offset of the input.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("json: %s at offset %d", e.Msg, e.Offset)
}

// ParseJSON parses one JSON value into the data model: objects become Rows (field order kept;
// a repeated name keeps its last value, in the position of its first occurrence), arrays []any,
// integers int64 (uint64 beyond the int64 range), other numbers float64, strings string.
// Trailing non-space input is an error.
//
// The result shares no memory with b. Decoding is the sink side's hot path, so the parser
// allocates in slabs: the text of all strings of one call lives in one buffer, the fields of all
// Rows in one slice, and object keys are interned.
func ParseJSON(b []byte) (any, error) {
	sc, _ := scratchPool.Get().(*parseScratch)
	if sc == nil {
		sc = &parseScratch{}
	}
	p := parser{buf: b, stack: sc.stack[:0], scratch: sc.scratch[:0]}
	p.slab.N = p.slabSize()
	p.sizeSlabs()
	v, err := p.parseAll()
	if cap(p.stack) <= 1024 && cap(p.scratch) <= 64<<10 {
		clear(p.stack[:cap(p.stack)])
		sc.stack, sc.scratch = p.stack[:0], p.scratch[:0]
		scratchPool.Put(sc)
	}
	return v, err
}

// JSONDecoder parses many JSON values, like ParseJSON, sharing allocation slabs between them:
// decoding a chunk of records costs a few allocations in all instead of a dozen per record.
// The price is that a decoded value keeps the slabs of its neighbours alive, so use one
// decoder per bounded group of values that live about as long as each other (a fetched
// chunk), then drop it. A JSONDecoder is not safe for concurrent use.
type JSONDecoder struct {
	p parser
}

// Decode parses one JSON value; see ParseJSON. The result shares no memory with b.
func (d *JSONDecoder) Decode(b []byte) (any, error) {
	d.p.buf, d.p.pos, d.p.shared = b, 0, true
	d.p.slab.N = d.p.slabSize()
	v, err := d.p.parseAll()
	d.p.buf = nil
	return v, err
}

func (p *parser) parseAll() (any, error) {
	p.skipSpace()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.buf) {
		return nil, p.errorf("unexpected %q after the value", p.buf[p.pos])
	}
	return v, nil
}

// parseScratch is the reusable part of a parser (nothing in it is returned to callers).
type parseScratch struct {
	stack   []Field
	scratch []byte
}

var scratchPool sync.Pool

// sizeSlabs sizes the field and row slabs of a one-value parse exactly, from a count of the
// input's colons and braces (an upper bound of fields and objects), so a record's rows cost
// one allocation each for fields and row headers.
func (p *parser) sizeSlabs() {
	if len(p.buf) > 4096 {
		return
	}
	colons := bytes.Count(p.buf, []byte{':'})
	p.fieldSlab = make([]Field, 0, colons)
	p.slab.reserve(bytes.Count(p.buf, []byte{'"'})/2-colons, bytes.Count(p.buf, []byte{'{'}))
}

type parser struct {
	buf []byte
	pos int
	// stack holds the fields of the objects being parsed (nested objects push above their
	// parent's fields); a finished object's fields move to fieldSlab.
	stack     []Field
	fieldSlab []Field
	// text is the arena that string values are cut from (immutable once cut).
	text []byte
	// scratch collects an escaped string before it is cut from text.
	scratch []byte
	// shared: the slabs serve many values (JSONDecoder), so new ones are made large.
	shared bool
	// slab boxes scalar and row values (its N is set from slabSize before a parse).
	slab Slab
	// anySlab holds array elements; arrs the array headers.
	anySlab []any
	arrs    [][]any
}

func (p *parser) errorf(format string, args ...any) error {
	return &SyntaxError{Offset: p.pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	if p.pos < len(p.buf) && p.buf[p.pos] > ' ' {
		return // the common case: compact JSON
	}
	for p.pos < len(p.buf) {
		switch p.buf[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, p.errorf("value nested deeper than %d", maxDepth)
	}
	if p.pos >= len(p.buf) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.buf[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		b, err := p.str()
		if err != nil {
			return nil, err
		}
		return p.slab.String(p.cut(b)), nil
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.errorf("unexpected %q", c)
	}
}

func (p *parser) literal(lit string) error {
	if len(p.buf)-p.pos < len(lit) || string(p.buf[p.pos:p.pos+len(lit)]) != lit {
		return p.errorf("invalid literal, want %s", lit)
	}
	p.pos += len(lit)
	return nil
}

// cut copies b into the text arena and returns it as a string that shares the arena.
func (p *parser) cut(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if cap(p.text)-len(p.text) < len(b) {
		// one arena for the rest of the input; strings never grow when unescaped except for
		// invalid UTF-8 (1 byte becomes 3), which the max covers
		size := max(len(p.buf)-p.pos+len(b), 2*len(b), 64)
		if p.shared {
			size = max(size, 16<<10)
		}
		p.text = make([]byte, 0, size)
	}
	start := len(p.text)
	p.text = append(p.text, b...)
	return unsafe.String(&p.text[start], len(b))
}

// key returns an object key, interned when it is short: column and envelope names repeat in
// every record, so most keys cost no allocation.
func (p *parser) key(b []byte) (string, uint32) {
	h := uint32(2166136261)
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	if len(b) > maxInternLen {
		return p.cut(b), h
	}
	slot := &internTable[h&(internSlots-1)]
	if s := slot.Load(); s != nil && *s == string(b) {
		return *s, h
	}
	s := string(b)
	slot.Store(&s)
	return s, h
}

const (
	maxInternLen = 64
	internSlots  = 4096
)

// internTable is a direct-mapped cache of object keys shared by all parsers: a miss replaces
// the slot, so it holds at most internSlots short strings whatever the input.
var internTable [internSlots]atomic.Pointer[string]

func (p *parser) object(depth int) (any, error) {
	p.pos++ // {
	base := len(p.stack)
	var names uint64 // bit h%64 is set when a name of hash h is among the object's fields
	p.skipSpace()
	if p.pos < len(p.buf) && p.buf[p.pos] == '}' {
		p.pos++
		return Row{}, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.buf) || p.buf[p.pos] != '"' {
			return nil, p.errorf("want an object key")
		}
		kb, err := p.str()
		if err != nil {
			return nil, err
		}
		k, h := p.key(kb)
		p.skipSpace()
		if p.pos >= len(p.buf) || p.buf[p.pos] != ':' {
			return nil, p.errorf("want ':' after object key")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if bit := uint64(1) << (h >> 26); names&bit == 0 {
			names |= bit // a name not seen yet in this object: no need to look for it
			p.stack = append(p.stack, Field{Name: k, Value: v})
		} else {
			p.setField(base, k, v)
		}
		p.skipSpace()
		if p.pos >= len(p.buf) {
			return nil, p.errorf("unexpected end of input in object")
		}
		switch p.buf[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return p.slab.Row(p.finishRow(base)), nil
		default:
			return nil, p.errorf("want ',' or '}' in object, got %q", p.buf[p.pos])
		}
	}
}

// setField adds k: v to the object whose fields start at stack[base], replacing an earlier
// field of the same name. Past 64 fields, duplicates are resolved once in finishRow instead,
// so hostile input with huge objects cannot make parsing quadratic.
func (p *parser) setField(base int, k string, v any) {
	if fields := p.stack[base:]; len(fields) <= 64 {
		for i := range fields {
			if fields[i].Name == k {
				fields[i].Value = v
				return
			}
		}
	}
	p.stack = append(p.stack, Field{Name: k, Value: v})
}

// finishRow moves the fields above base off the stack into a Row cut from the field slab.
func (p *parser) finishRow(base int) Row {
	fields := p.stack[base:]
	if len(fields) > 64 {
		fields = dedupeFields(fields)
	}
	n := len(fields)
	if cap(p.fieldSlab)-len(p.fieldSlab) < n {
		size := max(n, min(32, len(p.buf)/8), len(p.buf)/32)
		if p.shared {
			size = max(size, 512)
		}
		p.fieldSlab = make([]Field, 0, size)
	}
	start := len(p.fieldSlab)
	p.fieldSlab = append(p.fieldSlab, fields...)
	clear(p.stack[base:])
	p.stack = p.stack[:base]
	return Row(p.fieldSlab[start : start+n : start+n])
}

// dedupeFields keeps the last value of each name at the position of its first occurrence.
func dedupeFields(fields []Field) []Field {
	first := make(map[string]int, len(fields))
	out := fields[:0]
	for _, f := range fields {
		if i, ok := first[f.Name]; ok {
			out[i].Value = f.Value
			continue
		}
		first[f.Name] = len(out)
		out = append(out, f)
	}
	return out
}

func (p *parser) array(depth int) (any, error) {
	p.pos++              // [
	base := len(p.stack) // elements wait on the field stack (unnamed) until the array ends
	p.skipSpace()
	if p.pos < len(p.buf) && p.buf[p.pos] == ']' {
		p.pos++
		return []any{}, nil
	}
	for {
		p.skipSpace()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		p.stack = append(p.stack, Field{Value: v})
		p.skipSpace()
		if p.pos >= len(p.buf) {
			return nil, p.errorf("unexpected end of input in array")
		}
		switch p.buf[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return p.finishArray(base), nil
		default:
			return nil, p.errorf("want ',' or ']' in array, got %q", p.buf[p.pos])
		}
	}
}

// finishArray moves the elements above base off the stack into an array cut from a slab.
func (p *parser) finishArray(base int) any {
	elems := p.stack[base:]
	n := len(elems)
	if cap(p.anySlab)-len(p.anySlab) < n {
		p.anySlab = make([]any, 0, max(n, p.slabSize()))
	}
	start := len(p.anySlab)
	for _, e := range elems {
		p.anySlab = append(p.anySlab, e.Value)
	}
	clear(elems)
	p.stack = p.stack[:base]
	if len(p.arrs) == cap(p.arrs) {
		p.arrs = make([][]any, 0, max(p.slabSize()/8, 4))
	}
	p.arrs = append(p.arrs, p.anySlab[start:start+n:start+n])
	return box(typArray, unsafe.Pointer(&p.arrs[len(p.arrs)-1]))
}

// str reads a string token and returns its unescaped bytes, valid only until the next call
// (they alias the input or the parser's scratch buffer).
func (p *parser) str() ([]byte, error) {
	p.pos++ // opening quote
	start := p.pos
	// fast path: printable ASCII without escapes (valid UTF-8 by construction)
	for p.pos < len(p.buf) {
		c := p.buf[p.pos]
		if plainASCII[c] {
			p.pos++
			continue
		}
		if c == '"' {
			s := p.buf[start:p.pos]
			p.pos++
			return s, nil
		}
		break
	}
	out := append(p.scratch[:0], p.buf[start:p.pos]...)
	defer func() { p.scratch = out[:0] }()
	for p.pos < len(p.buf) {
		c := p.buf[p.pos]
		switch {
		case c == '"':
			p.pos++
			return out, nil
		case c < 0x20:
			return nil, p.errorf("control character %#x in string", c)
		case c == '\\':
			if p.pos+1 >= len(p.buf) {
				return nil, p.errorf("unexpected end of input in string escape")
			}
			e := p.buf[p.pos+1]
			p.pos += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, err := p.hex4()
				if err != nil {
					return nil, err
				}
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if p.pos+1 < len(p.buf) && p.buf[p.pos] == '\\' && p.buf[p.pos+1] == 'u' {
						save := p.pos
						p.pos += 2
						if r2, err = p.hex4(); err != nil {
							return nil, err
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							r = dec
						} else {
							p.pos = save
							r = utf8.RuneError
						}
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, p.errorf("invalid escape \\%c", e)
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.buf[p.pos:])
			if r == utf8.RuneError && size == 1 {
				out = append(out, "\uFFFD"...)
			} else {
				out = append(out, p.buf[p.pos:p.pos+size]...)
			}
			p.pos += size
		}
	}
	return nil, p.errorf("unterminated string")
}

// load64 is the little-endian word of the first 8 bytes of s (one load on the usual targets).
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// plainWord reports whether all 8 bytes of w are plainASCII, testing them at once: none below
// 0x20, none at or above 0x80, none a quote or a backslash. (x-0x01..)&^x&0x80.. is non-zero
// exactly when a byte of x is zero, and (x-n*0x01..)&^x&0x80.. when one is below n (n <= 128).
func plainWord(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote := w ^ ones*'"'
	backslash := w ^ ones*'\\'
	special := (w-ones*0x20)&^w | (quote-ones)&^quote | (backslash-ones)&^backslash | w
	return special&highs == 0
}

// plainASCII marks the bytes a JSON string holds as they are: printable ASCII but the quote
// and the backslash.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (p *parser) hex4() (rune, error) {
	if len(p.buf)-p.pos < 4 {
		return 0, p.errorf("short \\u escape")
	}
	var r rune
	for i := 0; i < 4; i++ {
		c := p.buf[p.pos+i]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, p.errorf("invalid hex digit %q in \\u escape", c)
		}
	}
	p.pos += 4
	return r, nil
}

func (p *parser) number() (any, error) {
	start := p.pos
	isInt := true
	if p.buf[p.pos] == '-' {
		p.pos++
	}
	if p.pos >= len(p.buf) {
		return nil, p.errorf("unexpected end of input in number")
	}
	switch c := p.buf[p.pos]; {
	case c == '0':
		p.pos++
	case c >= '1' && c <= '9':
		for p.pos < len(p.buf) && p.buf[p.pos] >= '0' && p.buf[p.pos] <= '9' {
			p.pos++
		}
	default:
		return nil, p.errorf("invalid number")
	}
	if p.pos < len(p.buf) && p.buf[p.pos] == '.' {
		isInt = false
		p.pos++
		d := p.pos
		for p.pos < len(p.buf) && p.buf[p.pos] >= '0' && p.buf[p.pos] <= '9' {
			p.pos++
		}
		if p.pos == d {
			return nil, p.errorf("want digits after '.'")
		}
	}
	if p.pos < len(p.buf) && (p.buf[p.pos] == 'e' || p.buf[p.pos] == 'E') {
		isInt = false
		p.pos++
		if p.pos < len(p.buf) && (p.buf[p.pos] == '+' || p.buf[p.pos] == '-') {
			p.pos++
		}
		d := p.pos
		for p.pos < len(p.buf) && p.buf[p.pos] >= '0' && p.buf[p.pos] <= '9' {
			p.pos++
		}
		if p.pos == d {
			return nil, p.errorf("want digits in exponent")
		}
	}
	text := unsafe.String(&p.buf[start], p.pos-start) // not retained
	if isInt {
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return p.slab.Int(n), nil
		}
		if text[0] != '-' {
			if n, err := strconv.ParseUint(text, 10, 64); err == nil {
				return n, nil
			}
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, p.errorf("invalid number %q", string(text))
	}
	return p.slab.Float(f), nil
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case int64, uint64, float64:
		return "number"
	case Row:
		return "object"
	case []any:
		return "array"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// Boxing. Storing a string, an int64, a float64 or a Row in an interface normally allocates a
// copy of it on the heap, one allocation per value: most of the cost of decoding a record.
// The parser instead copies values into slabs and makes interfaces that point into them, the
// same shape the runtime itself would build. This is sound because an interface's data word
// is an ordinary pointer for the garbage collector, and a slab element is never written again
// after it is boxed (interfaces holding non-pointer types are immutable by the language's
// rules, and nothing else refers to the slab).

type eface struct{ typ, data unsafe.Pointer }

func typeWord(x any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&x)).typ }

var (
	typString  = typeWord("")
	typInt64   = typeWord(int64(0))
	typFloat64 = typeWord(float64(0))
	typRow     = typeWord(Row(nil))
	typRawJSON = typeWord(RawJSON(nil))
	typArray   = typeWord([]any(nil))
)

func box(typ, data unsafe.Pointer) (v any) {
	e := (*eface)(unsafe.Pointer(&v))
	e.typ, e.data = typ, data
	return v
}

// slabSize is how many values a new slab holds: enough for a typical record in one allocation.
func (p *parser) slabSize() int {
	if p.shared {
		return 512
	}
	return min(max(len(p.buf)/24, 8), 1024)
}
