package postgres

import (
	"encoding/binary"
	"strconv"

	"github.com/sluice-cdc/sluice/connect"

	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// A snapshot row is rendered as JSON straight from the values the server sent: the record's
// key and value are connect.RawJSON, byte for byte what connect.AppendJSON makes of the Rows
// that decode, imageKey and record build from the same values (TestRenderMatchesRows checks
// every type the source knows). Building those Rows only to render them again was about a
// third of the CPU a snapshot row cost on its way into the log. The common types (integers,
// text, timestamptz) are rendered from their wire form; any other value, and any masked one,
// is decoded as usual and rendered from its decoded value.

// jsonLabel returns `"name":` of column i, rendered once per table.
func (t *table) jsonLabel(i int) []byte {
	if len(t.labels) != len(t.cols) {
		t.labels = make([][]byte, len(t.cols))
		for j := range t.cols {
			l, _ := connect.AppendJSON(nil, t.cols[j].name)
			t.labels[j] = append(l, ':')
		}
	}
	return t.labels[i]
}

// appendCol appends the JSON of column i's value, of kind k and wire form b, with the
// column's masks applied when masked is set.
func (t *table) appendCol(dst []byte, i int, k byte, b []byte, masked bool) ([]byte, error) {
	c := &t.cols[i]
	masked = masked && len(c.masks) > 0
	if !masked {
		var buf [48]byte
		switch {
		case k == kindNull:
			return append(dst, "null"...), nil
		case k == kindBinary:
			if c.fast == fastTimestamptz && len(b) == 8 {
				if out, ok := appendUTCMicros(buf[:0], int64(binary.BigEndian.Uint64(b))); ok {
					return connect.AppendJSONText(dst, out), nil
				}
			}
		case c.fast == fastText:
			return connect.AppendJSONText(dst, b), nil
		case c.fast == fastTimestamptz:
			if out, ok := appendUTCInstant(buf[:0], b); ok {
				return connect.AppendJSONText(dst, out), nil
			}
		case c.fast == fastInt:
			if plainInt(b) {
				return append(dst, b...), nil
			}
			if n, err := snapshot.ParseInt(b); err == nil {
				return strconv.AppendInt(dst, n, 10), nil
			}
		}
	}
	var v any
	if k == kindText || k == kindBinary {
		var err error
		if v, err = t.decodeCol(i, k, b); err != nil {
			return dst, err
		}
	}
	if masked {
		for m := range c.masks {
			v = c.masks[m].apply(v)
		}
	}
	out, err := connect.AppendJSON(dst, v)
	if err != nil {
		return dst, t.colError(i, err)
	}
	return out, nil
}

// appendImage appends the JSON of the row image of one row: the kept columns, masks applied;
// get returns the kind and the wire form of column i.
func (t *table) appendImage(dst []byte, get func(i int) (byte, []byte)) ([]byte, error) {
	if len(t.spans) != len(t.cols) {
		t.spans = make([][2]int, len(t.cols))
	}
	var err error
	dst = append(dst, '{')
	first := true
	for i := range t.cols {
		t.spans[i] = [2]int{-1, -1}
		if !t.cols[i].keep {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, t.jsonLabel(i)...)
		start := len(dst)
		k, b := get(i)
		if dst, err = t.appendCol(dst, i, k, b, true); err != nil {
			return dst, err
		}
		if len(t.cols[i].masks) == 0 {
			t.spans[i] = [2]int{start, len(dst)}
		}
	}
	return append(dst, '}'), nil
}

// appendKey appends the JSON of the record key of the row whose image dst holds (see
// appendImage); the table has a key.
func (t *table) appendKey(dst []byte, get func(i int) (byte, []byte)) ([]byte, error) {
	var err error
	// the key holds the unmasked values: copied from the image when it holds them as they are
	for j, i := range t.key {
		if j == 0 {
			dst = append(dst, '{')
		} else {
			dst = append(dst, ',')
		}
		dst = append(dst, t.jsonLabel(i)...)
		if sp := t.spans[i]; sp[0] >= 0 {
			dst = append(dst, dst[sp[0]:sp[1]]...)
			continue
		}
		k, b := get(i)
		if dst, err = t.appendCol(dst, i, k, b, false); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// plainInt reports whether b is an integer's text as strconv.AppendInt writes it, the server's
// form: an optional '-', then 1 to 18 digits, the first not 0 unless it is the only one (and
// then without the '-').
func plainInt(b []byte) bool {
	d := b
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 18 || (d[0] == '0' && (len(d) > 1 || len(b) > 1)) {
		return false
	}
	for _, c := range d {
		if c-'0' > 9 {
			return false
		}
	}
	return true
}
