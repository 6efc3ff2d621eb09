package connect

import (
	"fmt"
	"time"
)

// Record is one message: what a source emits, what the log stores (encoded) and what a sink
// receives. Key and Value hold values of the data model described in the package comment.
type Record struct {
	Topic string
	// Partition is the log partition; -1 (or any negative) before the record is appended,
	// meaning "choose by key" (murmur2 of the encoded key, Kafka's partitioner).
	Partition int32
	// Offset is the record's offset in its partition; -1 before it is appended.
	Offset    int64
	Timestamp time.Time
	// Key is usually a Row of the primary-key columns; nil when the table has none.
	Key any
	// Value is the payload; nil is a tombstone.
	Value   any
	Headers Headers
	// Version increases per key in source commit order (DESIGN.md §2); 0 means none.
	// Sinks use it to refuse stale writes. It is carried in the log as the header
	// HeaderVersion and survives transforms.
	Version int64
	// Position is the source position of this record (set by sources, so the runtime can resume
	// and de-duplicate exactly once). Sink-side records carry no position.
	Position Position
}

// IsTombstone reports whether the record deletes its key (a nil value).
func (r Record) IsTombstone() bool { return r.Value == nil }

// RawJSON is a key or value that a source rendered as JSON text itself: one complete JSON
// value, exactly as AppendJSON renders the value it stands for (never JSON null: a nil Value
// is the tombstone). AppendJSON copies it unchanged, so a source that renders rows straight
// from its wire format spares building them as Rows and rendering them again. It is a
// rendering, not a type of the data model: the runtime parses it (Materialize) before any
// transform or predicate sees the record, so they only ever meet the data model's types. That
// parse costs more than building Rows would have, so sources render only when the runtime
// says it stores renderings as they are (Env.RawJSON: the connector has no transforms).
type RawJSON []byte

// Materialize returns v with a RawJSON parsed into the value it renders; any other value is
// returned as it is.
func Materialize(v any) (any, error) {
	raw, ok := v.(RawJSON)
	if !ok {
		return v, nil
	}
	x, err := ParseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("raw JSON value: %w", err)
	}
	return x, nil
}

// Header names that sluice itself uses. Users' headers must not start with "__sluice.".
const (
	// HeaderVersion carries Record.Version in the log, as a decimal string.
	HeaderVersion = "__sluice.version"
	// HeaderUnchanged lists, comma-separated, the columns of the row image whose value the
	// source did not deliver (Postgres unchanged TOAST values): sinks keep the stored value.
	HeaderUnchanged = "__sluice.unchanged"
)

// Header is one record header. A nil Value is a null header value.
type Header struct {
	Key   string
	Value []byte
}

// Headers is an ordered list of headers; a key may repeat, as in Kafka.
type Headers []Header

// Get returns the value of the last header named key.
func (h Headers) Get(key string) ([]byte, bool) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Key == key {
			return h[i].Value, true
		}
	}
	return nil, false
}

// Set replaces every header named key by one with the given value, appending it if absent.
func (h Headers) Set(key string, value []byte) Headers {
	out := h.Del(key)
	return append(out, Header{Key: key, Value: value})
}

// Del removes every header named key.
func (h Headers) Del(key string) Headers {
	found := false
	for _, x := range h {
		if x.Key == key {
			found = true
			break
		}
	}
	if !found {
		return h
	}
	out := make(Headers, 0, len(h))
	for _, x := range h {
		if x.Key != key {
			out = append(out, x)
		}
	}
	return out
}

// Clone returns a copy that shares no slice with h.
func (h Headers) Clone() Headers {
	if h == nil {
		return nil
	}
	out := make(Headers, len(h))
	copy(out, h)
	return out
}

// Field is one named value of a Row.
type Field struct {
	Name  string
	Value any
}

// Row is an object of the data model whose field order is kept. Rows are small (table rows),
// so lookups are linear. A nil Row renders as JSON null; an empty non-nil Row as {}.
type Row []Field

// Get returns the value of the field called name.
func (r Row) Get(name string) (any, bool) {
	for i := range r {
		if r[i].Name == name {
			return r[i].Value, true
		}
	}
	return nil, false
}

// Index returns the position of the field called name, or -1.
func (r Row) Index(name string) int {
	for i := range r {
		if r[i].Name == name {
			return i
		}
	}
	return -1
}

// Set returns r with the field called name set to v: replaced in place when present, appended
// otherwise. Like append, it may modify r's backing array.
func (r Row) Set(name string, v any) Row {
	if i := r.Index(name); i >= 0 {
		r[i].Value = v
		return r
	}
	return append(r, Field{Name: name, Value: v})
}

// Delete returns a copy of r without the field called name (r itself is not modified).
func (r Row) Delete(name string) Row {
	i := r.Index(name)
	if i < 0 {
		return r
	}
	out := make(Row, 0, len(r)-1)
	out = append(out, r[:i]...)
	return append(out, r[i+1:]...)
}

// Names returns the field names in order.
func (r Row) Names() []string {
	out := make([]string, len(r))
	for i := range r {
		out[i] = r[i].Name
	}
	return out
}

// Clone returns a deep copy of r (nested rows and arrays are copied too).
func (r Row) Clone() Row {
	if r == nil {
		return nil
	}
	out := make(Row, len(r))
	for i, f := range r {
		out[i] = Field{Name: f.Name, Value: CloneValue(f.Value)}
	}
	return out
}

// CloneValue returns a deep copy of a data-model value.
func CloneValue(v any) any {
	switch x := v.(type) {
	case Row:
		return x.Clone()
	case []any:
		if x == nil {
			return x
		}
		out := make([]any, len(x))
		for i := range x {
			out[i] = CloneValue(x[i])
		}
		return out
	case []byte:
		if x == nil {
			return x
		}
		return append([]byte(nil), x...)
	case RawJSON:
		if x == nil {
			return x
		}
		return append(RawJSON(nil), x...)
	default:
		return v
	}
}
