package postgres

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// buildTuple encodes columns as pgoutput does.
func buildTuple(cols []tupleCol) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, c.kind)
		if c.kind == 't' || c.kind == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.data)))
			b = append(b, c.data...)
		}
	}
	return b
}

func TestParseRowChange(t *testing.T) {
	cols := []tupleCol{{kind: 't', data: []byte("42")}, {kind: 'n'}, {kind: 'u'}, {kind: 't', data: []byte{}}}
	key := []tupleCol{{kind: 't', data: []byte("41")}, {kind: 'n'}, {kind: 'n'}, {kind: 'n'}}
	msg := func(op byte, xid bool, parts ...[]byte) []byte {
		b := []byte{op}
		if xid {
			b = binary.BigEndian.AppendUint32(b, 777)
		}
		b = binary.BigEndian.AppendUint32(b, 16384)
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	cases := []struct {
		name     string
		msg      []byte
		inStream bool
		want     rowChange
	}{
		{"insert", msg('I', false, []byte{'N'}, buildTuple(cols)), false, rowChange{op: 'I', relid: 16384, new: cols}},
		{"insert in stream", msg('I', true, []byte{'N'}, buildTuple(cols)), true, rowChange{op: 'I', relid: 16384, new: cols}},
		{"update", msg('U', false, []byte{'N'}, buildTuple(cols)), false, rowChange{op: 'U', relid: 16384, new: cols}},
		{"update of the key", msg('U', false, []byte{'K'}, buildTuple(key), []byte{'N'}, buildTuple(cols)), false, rowChange{op: 'U', relid: 16384, oldK: 'K', old: key, new: cols}},
		{"delete", msg('D', true, []byte{'O'}, buildTuple(cols)), true, rowChange{op: 'D', relid: 16384, oldK: 'O', old: cols}},
	}
	var rc rowChange
	for _, c := range cases {
		if err := parseRowChange(c.msg, c.inStream, &rc); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := rowChange{op: rc.op, relid: rc.relid, oldK: rc.oldK, old: rc.old, new: rc.new}
		if diff := cmp.Diff(c.want, got, cmp.AllowUnexported(rowChange{}, tupleCol{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	for _, bad := range [][]byte{{}, {'I'}, msg('I', false, []byte{'K'}, buildTuple(key)), msg('D', false, []byte{'N'}, buildTuple(cols)),
		msg('I', false, []byte{'N', 0, 1, 't', 0, 0, 0, 9, 'x'}), msg('U', false, []byte{'N', 0, 1, 'z'})} {
		if err := parseRowChange(bad, false, &rc); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

func FuzzParseRowChange(f *testing.F) {
	f.Add([]byte{'I', 0, 0, 64, 0, 'N', 0, 1, 't', 0, 0, 0, 2, '4', '2'}, false)
	f.Add([]byte{'U', 0, 0, 0, 1, 0, 0, 64, 0, 'K', 0, 1, 'n', 'N', 0, 1, 'u'}, true)
	f.Fuzz(func(t *testing.T, b []byte, inStream bool) {
		var rc rowChange
		if err := parseRowChange(b, inStream, &rc); err != nil {
			return
		}
		for _, c := range append(append([]tupleCol(nil), rc.old...), rc.new...) {
			switch c.kind {
			case 'n', 'u', 't', 'b':
			default:
				t.Fatalf("kind %q accepted", c.kind)
			}
		}
	})
}
