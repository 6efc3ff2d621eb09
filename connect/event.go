package connect

import (
	"errors"
	"fmt"
	"strconv"
)

// Op is a change event's operation, with Debezium's letters.
type Op byte

const (
	OpCreate   Op = 'c' // insert
	OpUpdate   Op = 'u' // update
	OpDelete   Op = 'd' // delete
	OpRead     Op = 'r' // snapshot read
	OpTruncate Op = 't' // truncate
)

// String returns the op's letter.
func (o Op) String() string {
	if o.Valid() {
		return string(rune(o))
	}
	return fmt.Sprintf("Op(%d)", byte(o))
}

// Boxed returns the op's letter as a value for a Row, without an allocation for the five ops
// (a constant in an interface costs nothing).
func (o Op) Boxed() any {
	switch o {
	case OpCreate:
		return "c"
	case OpUpdate:
		return "u"
	case OpDelete:
		return "d"
	case OpRead:
		return "r"
	case OpTruncate:
		return "t"
	}
	return o.String()
}

// Valid reports whether o is one of the five ops.
func (o Op) Valid() bool {
	switch o {
	case OpCreate, OpUpdate, OpDelete, OpRead, OpTruncate:
		return true
	}
	return false
}

// ParseOp parses a Debezium op letter.
func ParseOp(s string) (Op, error) {
	if len(s) == 1 && Op(s[0]).Valid() {
		return Op(s[0]), nil
	}
	return 0, fmt.Errorf("op %q: want one of c, u, d, r, t", s)
}

// The envelope's field names, Debezium's.
const (
	FieldBefore = "before"
	FieldAfter  = "after"
	FieldSource = "source"
	FieldOp     = "op"
	FieldTsMs   = "ts_ms"
)

// ChangeEvent is a Debezium change event: the row image before and after the change, the
// source block (connector, db, table, snapshot flag and the source's own position fields, in
// the order the source chose) and the op. TsMs is when sluice processed the event; the source's
// commit time is source.ts_ms.
//
//	c: Before nil, After the new row     u: both images     d: Before the old row, After nil
//	r: After the row read by a snapshot  t: neither image (truncate of source.table)
type ChangeEvent struct {
	Before Row
	After  Row
	Source Row
	Op     Op
	TsMs   int64
}

// Row returns the event as the value Row that records carry:
// {"before", "after", "source", "op", "ts_ms"}, in that order.
func (e *ChangeEvent) Row() Row {
	return Row{
		{Name: FieldBefore, Value: nilIfEmptyRow(e.Before)},
		{Name: FieldAfter, Value: nilIfEmptyRow(e.After)},
		{Name: FieldSource, Value: nilIfEmptyRow(e.Source)},
		{Name: FieldOp, Value: e.Op.Boxed()},
		{Name: FieldTsMs, Value: e.TsMs},
	}
}

// nilIfEmptyRow turns a nil Row into an untyped nil so the envelope renders null and compares
// equal to what the parser produces.
func nilIfEmptyRow(r Row) any {
	if r == nil {
		return nil
	}
	return r
}

// MarshalJSON renders the event in Debezium's JSON shape.
func (e *ChangeEvent) MarshalJSON() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return MarshalJSONValue(e.Row())
}

// UnmarshalJSON parses Debezium's JSON shape; see ParseChangeEvent.
func (e *ChangeEvent) UnmarshalJSON(b []byte) error {
	v, err := ParseJSON(b)
	if err != nil {
		return err
	}
	ev, err := ParseChangeEvent(v)
	if err != nil {
		return err
	}
	*e = *ev
	return nil
}

// Validate checks that the images present match the op.
func (e *ChangeEvent) Validate() error {
	if !e.Op.Valid() {
		return fmt.Errorf("change event: invalid op %v", e.Op)
	}
	switch e.Op {
	case OpCreate, OpRead:
		if e.After == nil {
			return fmt.Errorf("change event: op %v needs an after image", e.Op)
		}
	case OpUpdate:
		if e.After == nil {
			return fmt.Errorf("change event: op u needs an after image")
		}
	case OpDelete:
		if e.Before == nil {
			return fmt.Errorf("change event: op d needs a before image")
		}
		if e.After != nil {
			return fmt.Errorf("change event: op d must not have an after image")
		}
	case OpTruncate:
		if e.Before != nil || e.After != nil {
			return fmt.Errorf("change event: op t has no row images")
		}
	}
	return nil
}

// ErrNotChangeEvent is returned by ParseChangeEvent for a value that is not an envelope
// (e.g. a flat row after the unwrap transform).
var ErrNotChangeEvent = errors.New("value is not a change event")

// ParseChangeEvent reads a change event from a value Row of the data model. Unknown envelope
// fields (e.g. Debezium's "transaction" or "ts_us") are ignored. A value without an "op" field
// is not a change event: the error wraps ErrNotChangeEvent.
func ParseChangeEvent(v any) (*ChangeEvent, error) {
	if raw, ok := v.(RawJSON); ok {
		x, err := Materialize(raw)
		if err != nil {
			return nil, fmt.Errorf("change event: %w", err)
		}
		v = x
	}
	row, ok := v.(Row)
	if !ok {
		return nil, fmt.Errorf("change event: %w (got %s)", ErrNotChangeEvent, typeName(v))
	}
	opv, ok := row.Get(FieldOp)
	if !ok {
		return nil, fmt.Errorf("change event: %w (no %q field)", ErrNotChangeEvent, FieldOp)
	}
	ops, ok := opv.(string)
	if !ok {
		return nil, fmt.Errorf("change event: field op: want a string, got %s", typeName(opv))
	}
	op, err := ParseOp(ops)
	if err != nil {
		return nil, fmt.Errorf("change event: %w", err)
	}
	e := &ChangeEvent{Op: op}
	for _, f := range []struct {
		name string
		dst  *Row
	}{{FieldBefore, &e.Before}, {FieldAfter, &e.After}, {FieldSource, &e.Source}} {
		fv, _ := row.Get(f.name)
		switch x := fv.(type) {
		case nil:
		case Row:
			*f.dst = x
		default:
			return nil, fmt.Errorf("change event: field %s: want an object or null, got %s", f.name, typeName(fv))
		}
	}
	if tv, ok := row.Get(FieldTsMs); ok && tv != nil {
		n, err := AsInt64(tv)
		if err != nil {
			return nil, fmt.Errorf("change event: field ts_ms: %w", err)
		}
		e.TsMs = n
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e, nil
}

// AsInt64 converts an integral data-model value (int64, an integral float64, a decimal string)
// to int64.
func AsInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case uint64:
		if x > 1<<63-1 {
			return 0, fmt.Errorf("%d overflows int64", x)
		}
		return int64(x), nil
	case float64:
		if x != float64(int64(x)) {
			return 0, fmt.Errorf("%v is not an integer", x)
		}
		return int64(x), nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not an integer", x)
		}
		return n, nil
	default:
		return 0, fmt.Errorf("want a number, got %s", typeName(v))
	}
}
