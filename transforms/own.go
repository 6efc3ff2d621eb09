package transforms

import (
	"unsafe"

	"github.com/sluice-cdc/sluice/connect"
)

// Rows the chain owns. A transform that builds a new row (unwrap adding fields, replace_field,
// insert_field) pays for a field array and for the interface box Record.Value needs. When an
// earlier step of the same Chain.Apply built the row, nothing else refers to its array or its
// box, so the next such transform may change the row in place and store the result through the
// box: the chain of five common transforms then allocates once per built row instead of once
// per transform. The chain's input is never owned, so what the caller passed in is never
// written.

// ownTransform is a transform that can change a row the chain owns in place.
type ownTransform interface {
	// applyOwned is Apply; owned tells whether r.Value is a row the chain owns. fresh reports
	// whether the returned Value is a row the chain owns (built by this call, or the owned
	// row changed in place).
	applyOwned(r connect.Record, owned bool) (out connect.Record, keep, fresh bool, err error)
}

type eface struct{ typ, data unsafe.Pointer }

var typRow = func() unsafe.Pointer {
	var v any = connect.Row{}
	return (*eface)(unsafe.Pointer(&v)).typ
}()

// rowBox returns the address of the Row that v boxes, or nil when v is not a non-nil Row (the
// runtime may box a nil Row in shared read-only memory, which must never be written).
func rowBox(v any) *connect.Row {
	e := (*eface)(unsafe.Pointer(&v))
	if e.typ != typRow || e.data == nil {
		return nil
	}
	p := (*connect.Row)(e.data)
	if *p == nil {
		return nil
	}
	return p
}

// sameBox reports whether a and b are the same interface box (not merely equal rows).
func sameBox(a, b any) bool {
	ea, eb := (*eface)(unsafe.Pointer(&a)), (*eface)(unsafe.Pointer(&b))
	return ea.typ == eb.typ && ea.data == eb.data && ea.data != nil
}

// setOwned stores row as the record's value through the box of its owned value: no new box.
func setOwned(r connect.Record, row connect.Row) connect.Record {
	if p := rowBox(r.Value); p != nil && row != nil {
		*p = row
		return r
	}
	r.Value = row
	return r
}
