package postgres

import (
	"encoding/binary"
	"fmt"
)

// The row change messages (Insert, Update, Delete) are the bulk of the stream; they are
// parsed here without allocating: a tuple's columns are slices of the message, which stays
// untouched until the row is decoded. Everything else goes through pglogrepl.
//
//	Insert: 'I' [xid int32, in a stream] relid int32 'N' tuple
//	Update: 'U' [xid] relid [('K'|'O') tuple] 'N' tuple
//	Delete: 'D' [xid] relid ('K'|'O') tuple
//	tuple:  ncols int16, per column: 'n' | 'u' | ('t'|'b') len int32 bytes

// tupleCol is one column of a tuple: its kind ('n' null, 'u' unchanged TOAST, 't' text)
// and, for 't', the text.
type tupleCol struct {
	kind byte
	data []byte
}

// rowChange is a parsed Insert, Update or Delete.
type rowChange struct {
	op    byte // 'I', 'U' or 'D'
	relid uint32
	old   []tupleCol // key or old row ('K'/'O'); nil when absent
	new   []tupleCol // new row; nil for a delete
	oldK  byte       // 'K', 'O' or 0

	oldBuf, newBuf []tupleCol // reused from message to message
}

// parseRowChange parses msg into rc, reusing rc's column slices.
func parseRowChange(msg []byte, inStream bool, rc *rowChange) error {
	if len(msg) < 1 {
		return fmt.Errorf("pgoutput: empty message")
	}
	rc.op = msg[0]
	b := msg[1:]
	if inStream {
		if len(b) < 4 {
			return errShort(rc.op)
		}
		b = b[4:]
	}
	if len(b) < 5 {
		return errShort(rc.op)
	}
	rc.relid = binary.BigEndian.Uint32(b)
	b = b[4:]
	rc.old, rc.new, rc.oldK = nil, nil, 0
	var err error
	if b[0] == 'K' || b[0] == 'O' {
		if rc.op == 'I' {
			return fmt.Errorf("pgoutput: insert with an old tuple")
		}
		rc.oldK = b[0]
		if rc.oldBuf, b, err = parseTuple(b[1:], rc.oldBuf); err != nil {
			return err
		}
		rc.old = rc.oldBuf
		if rc.op == 'D' {
			return nil
		}
		if len(b) == 0 {
			return errShort(rc.op)
		}
	}
	if rc.op == 'D' {
		return fmt.Errorf("pgoutput: delete without an old tuple")
	}
	if b[0] != 'N' {
		return fmt.Errorf("pgoutput: %c message: want a new tuple, got %q", rc.op, b[0])
	}
	if rc.newBuf, _, err = parseTuple(b[1:], rc.newBuf); err != nil {
		return err
	}
	rc.new = rc.newBuf
	return nil
}

func errShort(op byte) error { return fmt.Errorf("pgoutput: short %c message", op) }

// parseTuple parses a tuple into cols (reused) and returns the rest of b.
func parseTuple(b []byte, cols []tupleCol) ([]tupleCol, []byte, error) {
	if len(b) < 2 {
		return nil, nil, fmt.Errorf("pgoutput: short tuple")
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	cols = cols[:0]
	for i := 0; i < n; i++ {
		if len(b) < 1 {
			return nil, nil, fmt.Errorf("pgoutput: tuple ends at column %d of %d", i, n)
		}
		c := tupleCol{kind: b[0]}
		b = b[1:]
		switch c.kind {
		case 'n', 'u':
		case 't', 'b':
			if len(b) < 4 {
				return nil, nil, fmt.Errorf("pgoutput: tuple ends at column %d of %d", i, n)
			}
			l := int(binary.BigEndian.Uint32(b))
			b = b[4:]
			if l < 0 || l > len(b) {
				return nil, nil, fmt.Errorf("pgoutput: column %d: length %d beyond the message", i, l)
			}
			c.data = b[:l:l]
			b = b[l:]
		default:
			return nil, nil, fmt.Errorf("pgoutput: column %d: unknown kind %q", i, c.kind)
		}
		cols = append(cols, c)
	}
	return cols, b, nil
}
