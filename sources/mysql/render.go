package mysql

import (
	"strconv"
	"unicode/utf8"
	"unsafe"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/connect"
)

// A snapshot row is rendered as JSON straight from the fetched values: the record's key and
// value are connect.RawJSON, byte for byte what connect.AppendJSON makes of the Rows the
// stream builds from the same values (TestSnapshotRenderMatchesStream and the type tests
// check it). Building those Rows only to render them again was about a third of the CPU a
// snapshot row cost on its way into the log. Integers, valid UTF-8 text and DATETIMEs are
// rendered from the fetched value; any other value, and any masked one, is converted as usual
// (column.snapshotValue) and rendered from that.

// appendSnapshotJSON appends the JSON of column c's fetched value fv, masked when masked is set
// and the column has a mask.
func (c *column) appendSnapshotJSON(dst []byte, fv *cell, o *valueOptions, bx *boxer, masked bool) ([]byte, error) {
	masked = masked && c.mask != nil
	if !masked {
		switch {
		case fv.Type == gomysql.FieldValueTypeNull:
			return append(dst, "null"...), nil
		case c.kind == kindInt || c.kind == kindUint64 || c.kind == kindYear:
			if fv.Type == gomysql.FieldValueTypeSigned {
				return strconv.AppendInt(dst, fv.AsInt64(), 10), nil
			}
		case c.kind == kindText || c.kind == kindJSON || c.kind == kindEnum || c.kind == kindSet:
			if fv.Type == gomysql.FieldValueTypeString && utf8.Valid(fv.AsString()) {
				return connect.AppendJSONText(dst, fv.AsString()), nil
			}
		case c.kind == kindDateTime:
			// as dateTimeValue, without boxing the number
			y, mo, d, h, mi, sec, usec, _, err := dateParts(fv.AsString())
			if err == nil && mo != 0 && d != 0 {
				return strconv.AppendInt(dst, c.dateTimeNumber(y, mo, d, h, mi, sec, usec, o), 10), nil
			}
		}
	}
	v, err := c.snapshotValue(fv, o, bx)
	if err != nil {
		return dst, err
	}
	if masked {
		v = c.mask(v)
	}
	return connect.AppendJSON(dst, v)
}

// rowJSON renders snapshot rows of one table at a time: the labels (`"name":`) of its
// columns and where each value of the row being rendered went.
type rowJSON struct {
	t      *table
	labels [][]byte
	spans  [][2]int
}

func (rj *rowJSON) use(t *table) {
	if rj.t == t {
		return
	}
	rj.t = t
	rj.labels = make([][]byte, len(t.cols))
	for i := range t.cols {
		l, _ := connect.AppendJSON(nil, t.cols[i].name)
		rj.labels[i] = append(l, ':')
	}
	rj.spans = make([][2]int, len(t.cols))
}

// appendImageKey appends the JSON of a fetched row's image (the columns not excluded, masks
// applied) and then that of its record key (none when the table has no key). It returns dst
// with both and where the image ends.
func (rj *rowJSON) appendImageKey(dst []byte, row []cell, o *valueOptions, bx *boxer) ([]byte, int, error) {
	t := rj.t
	var err error
	dst = append(dst, '{')
	first := true
	for i := range t.cols {
		c := &t.cols[i]
		rj.spans[i] = [2]int{-1, -1}
		if c.excluded {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, rj.labels[i]...)
		start := len(dst)
		if dst, err = c.appendSnapshotJSON(dst, &row[i], o, bx, true); err != nil {
			return dst, 0, err
		}
		if c.mask == nil {
			rj.spans[i] = [2]int{start, len(dst)}
		}
	}
	dst = append(dst, '}')
	end := len(dst)
	if len(t.key) == 0 {
		return dst, end, nil
	}
	// the key holds the unmasked values: copied from the image when it holds them as they are
	for j, i := range t.key {
		if j == 0 {
			dst = append(dst, '{')
		} else {
			dst = append(dst, ',')
		}
		dst = append(dst, rj.labels[i]...)
		if sp := rj.spans[i]; sp[0] >= 0 {
			dst = append(dst, dst[sp[0]:sp[1]]...)
			continue
		}
		if dst, err = t.cols[i].appendSnapshotJSON(dst, &row[i], o, bx, false); err != nil {
			return dst, 0, err
		}
	}
	return append(dst, '}'), end, nil
}

// raw boxes a copy of p, a rendering, as a connect.RawJSON whose bytes live in a slab.
func (b *boxer) raw(p []byte) any {
	s := b.string(p)
	if len(b.raws) == cap(b.raws) {
		b.raws = make([]connect.RawJSON, 0, boxSlab)
	}
	b.raws = append(b.raws, connect.RawJSON(unsafe.Slice(unsafe.StringData(s), len(s))))
	return boxAt(typRawJSON, unsafe.Pointer(&b.raws[len(b.raws)-1]))
}
