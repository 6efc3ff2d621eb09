package change

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// Kind is what a record asks of the view.
type Kind uint8

const (
	Write  Kind = iota + 1 // write the row image
	Delete                 // delete the row
	Skip                   // nothing to do (truncate events)
)

// Change is one record interpreted.
type Change struct {
	Kind Kind
	// Row is the image to write (Write): without __deleted and without the unchanged columns.
	Row connect.Row
	// Unchanged lists the columns whose stored value must be kept (header __sluice.unchanged).
	Unchanged []string
	// Tombstone is set for a delete that came as a null value (behavior.on.null.values applies).
	Tombstone bool
}

// DeletedField is the field unwrap's rewrite modes add: "true" on a rewritten delete.
const DeletedField = "__deleted"

// Interpret reads a record the way DESIGN.md §2 and the unwrap transform define it:
//
//   - a nil value (tombstone) deletes;
//   - a Debezium change event: op c, u, r write the after image; d deletes; t is skipped (a
//     view is never truncated by an event: see the README);
//   - any other row is a flat row (after unwrap): written, unless its __deleted field is
//     "true", which deletes. __deleted is never stored.
//
// Anything else (a value that is not a row, a malformed envelope) is an error: the record is
// rejected as malformed.
func Interpret(r *connect.Record) (Change, error) {
	if r.Value == nil {
		return Change{Kind: Delete, Tombstone: true}, nil
	}
	ev, err := connect.ParseChangeEvent(r.Value)
	switch {
	case err == nil:
		switch ev.Op {
		case connect.OpCreate, connect.OpUpdate, connect.OpRead:
			row, unchanged := withoutUnchanged(ev.After, r.Headers)
			return Change{Kind: Write, Row: row, Unchanged: unchanged}, nil
		case connect.OpDelete:
			return Change{Kind: Delete}, nil
		default: // OpTruncate
			return Change{Kind: Skip}, nil
		}
	case errors.Is(err, connect.ErrNotChangeEvent):
		row, ok := r.Value.(connect.Row)
		if !ok {
			return Change{}, fmt.Errorf("value is %s, not a row or a change event", kindOf(r.Value))
		}
		if i := row.Index(DeletedField); i >= 0 {
			if isTrue(row[i].Value) {
				return Change{Kind: Delete}, nil
			}
			row = row.Delete(DeletedField)
		}
		row, unchanged := withoutUnchanged(row, r.Headers)
		return Change{Kind: Write, Row: row, Unchanged: unchanged}, nil
	default:
		return Change{}, err
	}
}

func isTrue(v any) bool {
	switch x := v.(type) {
	case string:
		return x == "true"
	case bool:
		return x
	}
	return false
}

// withoutUnchanged returns the columns the header __sluice.unchanged names and row without
// them (they carry no value, or a placeholder, in the image).
func withoutUnchanged(row connect.Row, h connect.Headers) (connect.Row, []string) {
	b, ok := h.Get(connect.HeaderUnchanged)
	if !ok || len(b) == 0 {
		return row, nil
	}
	cols := connect.SplitList(string(b))
	if len(cols) == 0 {
		return row, nil
	}
	for _, c := range cols {
		if row.Index(c) >= 0 {
			row = row.Delete(c)
		}
	}
	return row, cols
}

func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, uint64, float64, int:
		return "a number"
	case []any:
		return "an array"
	case []byte:
		return "bytes"
	}
	return fmt.Sprintf("a %T", v)
}

// KeySeparator joins the columns of a composite key.
const KeySeparator = ':'

// AppendKey appends the stable rendering of a record key to dst (the document id, and the
// ${key} of the Redis key template):
//
//   - a key row of one column renders as that column's value;
//   - a composite key renders its values in column order joined by ':', each with '\' and ':'
//     escaped by a backslash, so that ("a:b", "c") and ("a", "b:c") stay apart;
//   - a value renders as itself when it is a string, as its JSON text otherwise (numbers in
//     shortest form, true/false, bytes and times as their JSON string's content, nested objects
//     and arrays as compact JSON); a null column renders as the empty string;
//   - a key that is not a row (e.g. a string key from the outbox router) renders as a value.
//
// This rendering is part of the view's format: changing it would orphan every stored document.
func AppendKey(dst []byte, key any) ([]byte, error) {
	switch k := key.(type) {
	case nil:
		return dst, errors.New("record has no key (a view needs the primary key to identify the row)")
	case connect.Row:
		switch len(k) {
		case 0:
			return dst, errors.New("record key has no columns")
		case 1:
			return AppendValue(dst, k[0].Value, false)
		}
		var err error
		for i := range k {
			if i > 0 {
				dst = append(dst, KeySeparator)
			}
			if dst, err = AppendValue(dst, k[i].Value, true); err != nil {
				return dst, fmt.Errorf("key column %s: %w", k[i].Name, err)
			}
		}
		return dst, nil
	default:
		return AppendValue(dst, key, false)
	}
}

// AppendValue appends one key value as AppendKey renders it; escape escapes '\' and ':' (the
// columns of a composite key).
func AppendValue(dst []byte, v any, escape bool) ([]byte, error) {
	var s string
	switch x := v.(type) {
	case nil:
		return dst, nil
	case string:
		s = x
	case int64: // the common key: digits and '-' need no escaping
		return strconv.AppendInt(dst, x, 10), nil
	case uint64:
		return strconv.AppendUint(dst, x, 10), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	default:
		b, err := connect.AppendJSON(nil, v)
		if err != nil {
			return dst, err
		}
		if len(b) >= 2 && b[0] == '"' {
			// bytes and times render as JSON strings: keep the content
			u, err := connect.ParseJSON(b)
			if err != nil {
				return dst, err
			}
			s = u.(string)
		} else {
			s = string(b)
		}
	}
	if !escape || !strings.ContainsAny(s, `\:`) {
		return append(dst, s...), nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' || s[i] == KeySeparator {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return dst, nil
}

// Topic is what a topic name supplies to templates: Debezium topics are
// <topic.prefix>.<database|schema>.<table>.
type Topic struct {
	Name  string
	DB    string // the second-to-last dot-separated part ("" when there is none)
	Table string // the last part (the whole name when it has no dot)
}

// SplitTopic splits a topic name into its parts.
func SplitTopic(topic string) Topic {
	p := Topic{Name: topic, Table: topic}
	if i := strings.LastIndexByte(topic, '.'); i >= 0 {
		p.Table = topic[i+1:]
		rest := topic[:i]
		p.DB = rest[strings.LastIndexByte(rest, '.')+1:]
	}
	return p
}
