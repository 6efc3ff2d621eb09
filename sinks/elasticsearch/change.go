package elasticsearch

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// What a record means to a view. The Redis sink applies the same rules (sinks/redis/change.go
// is a copy of this file); both are pinned by the same test table (change_test.go in each
// package), so a record maps to the same id in every view.

// changeKind is what a record asks of the view.
type changeKind uint8

const (
	changeWrite  changeKind = iota + 1 // write the row image
	changeDelete                       // delete the row
	changeSkip                         // nothing to do (truncate events)
)

// change is one record interpreted.
type change struct {
	kind changeKind
	// row is the image to write (changeWrite): without __deleted and without the unchanged
	// columns.
	row connect.Row
	// unchanged lists the columns whose stored value must be kept (header __sluice.unchanged).
	unchanged []string
	// tombstone is set for a delete that came as a null value (behavior.on.null.values applies).
	tombstone bool
}

// deletedField is the field unwrap's rewrite modes add: "true" on a rewritten delete.
const deletedField = "__deleted"

// interpret reads a record the way DESIGN.md §2 and the unwrap transform define it:
//
//   - a nil value (tombstone) deletes;
//   - a Debezium change event: op c, u, r write the after image; d deletes; t is skipped (a
//     view is never truncated by an event: see the README);
//   - any other row is a flat row (after unwrap): written, unless its __deleted field is
//     "true", which deletes. __deleted is never stored.
//
// Anything else (a value that is not a row, a malformed envelope) is an error: the record is
// rejected as malformed.
func interpret(r *connect.Record) (change, error) {
	if r.Value == nil {
		return change{kind: changeDelete, tombstone: true}, nil
	}
	ev, err := connect.ParseChangeEvent(r.Value)
	switch {
	case err == nil:
		switch ev.Op {
		case connect.OpCreate, connect.OpUpdate, connect.OpRead:
			row, unchanged := withoutUnchanged(ev.After, r.Headers)
			return change{kind: changeWrite, row: row, unchanged: unchanged}, nil
		case connect.OpDelete:
			return change{kind: changeDelete}, nil
		default: // OpTruncate
			return change{kind: changeSkip}, nil
		}
	case errors.Is(err, connect.ErrNotChangeEvent):
		row, ok := r.Value.(connect.Row)
		if !ok {
			return change{}, fmt.Errorf("value is %s, not a row or a change event", kindOf(r.Value))
		}
		if i := row.Index(deletedField); i >= 0 {
			if isTrue(row[i].Value) {
				return change{kind: changeDelete}, nil
			}
			row = row.Delete(deletedField)
		}
		row, unchanged := withoutUnchanged(row, r.Headers)
		return change{kind: changeWrite, row: row, unchanged: unchanged}, nil
	default:
		return change{}, err
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

// keySeparator joins the columns of a composite key.
const keySeparator = ':'

// appendKey appends the stable rendering of a record key to dst (the document id, and the
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
func appendKey(dst []byte, key any) ([]byte, error) {
	switch k := key.(type) {
	case nil:
		return dst, errors.New("record has no key (a view needs the primary key to identify the row)")
	case connect.Row:
		switch len(k) {
		case 0:
			return dst, errors.New("record key has no columns")
		case 1:
			return appendKeyValue(dst, k[0].Value, false)
		}
		var err error
		for i := range k {
			if i > 0 {
				dst = append(dst, keySeparator)
			}
			if dst, err = appendKeyValue(dst, k[i].Value, true); err != nil {
				return dst, fmt.Errorf("key column %s: %w", k[i].Name, err)
			}
		}
		return dst, nil
	default:
		return appendKeyValue(dst, key, false)
	}
}

func appendKeyValue(dst []byte, v any, escape bool) ([]byte, error) {
	var s string
	switch x := v.(type) {
	case nil:
		return dst, nil
	case string:
		s = x
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
		if s[i] == '\\' || s[i] == keySeparator {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return dst, nil
}

// topicParts are the placeholders a topic name supplies: Debezium topics are
// <topic.prefix>.<database|schema>.<table>.
type topicParts struct {
	topic, db, table string
}

func splitTopic(topic string) topicParts {
	p := topicParts{topic: topic, table: topic}
	if i := strings.LastIndexByte(topic, '.'); i >= 0 {
		p.table = topic[i+1:]
		rest := topic[:i]
		p.db = rest[strings.LastIndexByte(rest, '.')+1:]
	}
	return p
}

// template is a name template with ${...} placeholders.
type template struct {
	parts []tmplPart
}

type tmplPart struct {
	lit string
	ph  string // placeholder name; "" for a literal
}

// parseTemplate parses s; allowed lists the placeholders it may use (a name ending in "."
// allows every placeholder with that prefix, e.g. "key." for ${key.id}).
func parseTemplate(s string, allowed ...string) (template, error) {
	var t template
	for len(s) > 0 {
		i := strings.Index(s, "${")
		if i < 0 {
			t.parts = append(t.parts, tmplPart{lit: s})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, tmplPart{lit: s[:i]})
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return t, fmt.Errorf("unclosed placeholder in %q", s)
		}
		name := s[i+2 : i+j]
		ok := false
		for _, a := range allowed {
			if strings.HasSuffix(a, ".") {
				ok = ok || strings.HasPrefix(name, a) && len(name) > len(a)
			} else {
				ok = ok || name == a
			}
		}
		if !ok {
			return t, fmt.Errorf("unknown placeholder ${%s}; use %s", name, placeholderList(allowed))
		}
		t.parts = append(t.parts, tmplPart{ph: name})
		s = s[i+j+1:]
	}
	return t, nil
}

func placeholderList(allowed []string) string {
	out := make([]string, len(allowed))
	for i, a := range allowed {
		if strings.HasSuffix(a, ".") {
			out[i] = "${" + a + "<column>}"
		} else {
			out[i] = "${" + a + "}"
		}
	}
	return strings.Join(out, ", ")
}

// static reports whether the template has no placeholder.
func (t template) static() bool {
	for _, p := range t.parts {
		if p.ph != "" {
			return false
		}
	}
	return true
}

// render appends the template's rendering; value supplies each placeholder.
func (t template) render(dst []byte, value func(dst []byte, ph string) ([]byte, error)) ([]byte, error) {
	var err error
	for _, p := range t.parts {
		if p.ph == "" {
			dst = append(dst, p.lit...)
			continue
		}
		if dst, err = value(dst, p.ph); err != nil {
			return dst, err
		}
	}
	return dst, nil
}
