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

// appendValue appends the JSON of the fetched value fv of column i, masked when masked is set
// and the column has a mask.
func (rj *rowJSON) appendValue(dst []byte, i int, fv *cell, o *valueOptions, bx *boxer, masked bool) ([]byte, error) {
	c := &rj.t.cols[i]
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
			// as dateTimeValue, without boxing the number; rows in key order often share a
			// date, whose day number is then computed once
			y, mo, d, h, mi, sec, usec, _, err := dateParts(fv.AsString())
			if err == nil && mo != 0 && d != 0 {
				dc := &rj.days[i]
				if dc.y != y || dc.mo != mo || dc.d != d {
					*dc = dayCache{y: y, mo: mo, d: d, days: daysFromCivil(y, mo, d)}
				}
				return strconv.AppendInt(dst, c.dateTimeFromDays(dc.days, h, mi, sec, usec, o), 10), nil
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

// dayCache is the day number of the date a DATETIME column held in the row before.
type dayCache struct {
	y, mo, d int
	days     int64
}

// rowJSON renders snapshot rows of one table at a time: the labels (`"name":`) of its
// columns and where each value of the row being rendered went.
type rowJSON struct {
	t      *table
	labels [][]byte
	spans  [][2]int
	days   []dayCache
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
	rj.days = make([]dayCache, len(t.cols))
}

// appendImage appends the JSON of a fetched row's image: the columns not excluded, masks
// applied.
func (rj *rowJSON) appendImage(dst []byte, row []cell, o *valueOptions, bx *boxer) ([]byte, error) {
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
		if dst, err = rj.appendValue(dst, i, &row[i], o, bx, true); err != nil {
			return dst, err
		}
		if c.mask == nil {
			rj.spans[i] = [2]int{start, len(dst)}
		}
	}
	return append(dst, '}'), nil
}

// appendKey appends the JSON of the record key of the row whose image dst holds (see
// appendImage); the table has a key.
func (rj *rowJSON) appendKey(dst []byte, row []cell, o *valueOptions, bx *boxer) ([]byte, error) {
	var err error
	// the key holds the unmasked values: copied from the image when it holds them as they are
	for j, i := range rj.t.key {
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
		if dst, err = rj.appendValue(dst, i, &row[i], o, bx, false); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// room returns the unused room of the slab that renderings are cut from, with at least n
// bytes, to append a rendering to; cut then takes what was appended. Renderings have a slab
// of their own: a value converted while one is appended (boxer.string) must not write there.
func (b *boxer) room(n int) []byte {
	if cap(b.render)-len(b.render) < n {
		if b.vrc == nil {
			b.render = make([]byte, 0, max(bytesSlab, n))
		} else {
			b.render = b.vrc.bytes.get(max(bytesSlab, n))
			b.held.bytes = append(b.held.bytes, b.render)
		}
	}
	return b.render[len(b.render):len(b.render)]
}

// cut takes p, appended to what room returned, out of the slab for good (unless appending
// outgrew the room: p is then memory of its own). Its parts are boxed with rawAt.
func (b *boxer) cut(p []byte) {
	free := b.render[len(b.render):cap(b.render)]
	if len(p) > 0 && len(free) >= len(p) && &free[0] == &p[0] {
		b.render = b.render[:len(b.render)+len(p)]
	}
}

// rawAt boxes p, a rendering that the slab never writes again (only snapshot.MarkLast edits
// the last record's own bytes before the batch is handed over), as a connect.RawJSON.
func (b *boxer) rawAt(p []byte) any {
	if len(b.raws) == cap(b.raws) {
		if b.vrc == nil {
			b.raws = make([]connect.RawJSON, 0, boxSlab)
		} else {
			b.raws = b.vrc.raws.get(boxSlab)
			b.held.raws = append(b.held.raws, b.raws)
		}
	}
	b.raws = append(b.raws, connect.RawJSON(p[:len(p):len(p)]))
	return boxAt(typRawJSON, unsafe.Pointer(&b.raws[len(b.raws)-1]))
}
