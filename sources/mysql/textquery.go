package mysql

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// A textQuery runs a snapshot chunk's query in the text protocol and reads the rows straight
// into a row set: each row packet is read once, from the socket's buffer into the set's data,
// and its values are cut from it in place. go-mysql's streaming select (which the rest of the
// source uses) reads a row through two pooled buffers, parses it into FieldValues with a copy
// of every string, and the set copied each string again: that was most of what fetching cost
// per row. The cells are those go-mysql would have made (the type from the column's
// definition: integers of the integer types, floats of FLOAT and DOUBLE, the text of anything
// else); TestTextQueryCells compares the two on every type.
//
// The query goes out through go-mysql's connection (its packet framing and sequence); the
// reply is read from the network connection under it with a buffer of the textQuery's own.
// That is sound because the protocol is request and reply: once go-mysql has read a reply in
// full its buffer is empty, and once a textQuery has read one in full so is its own. A reply
// read in part (an error) leaves the connection unusable: the textQuery says so (broken) and
// the snapshot opens a new one, as it does after any failed chunk.
type textQuery struct {
	conn         *client.Conn
	br           *bufio.Reader
	deprecateEOF bool // the server ends a reply with an OK packet, without an EOF after the columns
	queryAttrs   bool // COM_QUERY carries a (here empty) set of query attributes
	seq          uint8
	pkt          []byte                   // the packet being read that is not a row
	kinds        []gomysql.FieldValueType // of each column of the reply, as go-mysql parses its text
	broken       bool
}

// maxPacket is the payload length that says a packet goes on in the next one.
const maxPacket = 1<<24 - 1

func newTextQuery(conn *client.Conn) *textQuery {
	q := &textQuery{conn: conn, br: bufio.NewReaderSize(conn.Conn.Conn, 64<<10)}
	// the capabilities both sides agreed on, which go-mysql's own reader goes by; HasCapability
	// answers what the client asked for, not what the server granted
	for _, c := range strings.Split(conn.CapabilityString(), "|") {
		switch c {
		case gomysql.CapNames[gomysql.CLIENT_DEPRECATE_EOF]:
			q.deprecateEOF = true
		case gomysql.CapNames[gomysql.CLIENT_QUERY_ATTRIBUTES]:
			q.queryAttrs = true
		}
	}
	return q
}

// usable says whether the text protocol can be read this way on the connection: not when it is
// compressed.
func textQueryUsable(conn *client.Conn) bool {
	return conn.Conn.Compression == gomysql.MYSQL_COMPRESS_NONE
}

// run sends query, whose result has ncols columns, and adds every row of the result to the set
// next returns for it.
func (q *textQuery) run(query string, ncols int, next func() *rowSet) error {
	if q.broken {
		return errors.New("the connection is unusable after a failed read")
	}
	q.broken = true // until the reply was read in full
	if err := q.send(query); err != nil {
		return err
	}
	if err := q.columns(); err != nil {
		return err
	}
	if len(q.kinds) != ncols {
		return fmt.Errorf("the query returned %d columns where %d were due", len(q.kinds), ncols)
	}
	for {
		h, err := q.br.Peek(5)
		if err != nil {
			return q.readErr(err)
		}
		n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		if h[3] != q.seq {
			return fmt.Errorf("packet %d of the reply where %d was due", h[3], q.seq)
		}
		switch {
		case h[4] == gomysql.EOF_HEADER && n < maxPacket:
			// EOF, or OK: the end of the rows
			if _, err := q.packet(); err != nil {
				return err
			}
			q.broken = false
			return nil
		case h[4] == gomysql.ERR_HEADER:
			p, err := q.packet()
			if err != nil {
				return err
			}
			q.broken = false // the error packet ends the reply
			return q.conn.HandleErrorPacket(append([]byte(nil), p...))
		}
		rs := next()
		var row []byte
		if n < maxPacket {
			q.seq++
			q.br.Discard(4)
			row = rs.room(n)
			if _, err := io.ReadFull(q.br, row); err != nil {
				return q.readErr(err)
			}
		} else {
			p, err := q.packet()
			if err != nil {
				return err
			}
			row = rs.text(p)
			if cap(q.pkt) > 1<<20 {
				q.pkt = nil // a huge row's buffer is not kept for the rest of the snapshot
			}
		}
		if err := q.cells(rs, row); err != nil {
			return err
		}
	}
}

// send writes the COM_QUERY packet.
func (q *textQuery) send(query string) error {
	buf := make([]byte, 4, 4+3+len(query))
	buf = append(buf, gomysql.COM_QUERY)
	if q.queryAttrs {
		buf = append(buf, 0, 1) // no parameters, one parameter set
	}
	buf = append(buf, query...)
	q.conn.ResetSequence()
	if err := q.conn.WritePacket(buf); err != nil {
		return fmt.Errorf("send the query: %w", err)
	}
	q.seq = q.conn.Sequence
	return nil
}

// columns reads the reply up to its rows: the column count and definitions.
func (q *textQuery) columns() error {
	p, err := q.packet()
	if err != nil {
		return err
	}
	switch p[0] {
	case gomysql.ERR_HEADER:
		q.broken = false
		return q.conn.HandleErrorPacket(append([]byte(nil), p...))
	case gomysql.OK_HEADER:
		q.broken = false
		return errors.New("the query returned no result set")
	}
	count, _, n := gomysql.LengthEncodedInt(p)
	if n != len(p) || count == 0 || count > 4096 {
		return fmt.Errorf("malformed column count packet %x", p)
	}
	q.kinds = q.kinds[:0]
	for range count {
		p, err := q.packet()
		if err != nil {
			return err
		}
		f, err := gomysql.FieldData(append([]byte(nil), p...)).Parse()
		if err != nil {
			return fmt.Errorf("column definition: %w", err)
		}
		q.kinds = append(q.kinds, textKind(f))
	}
	if !q.deprecateEOF {
		p, err := q.packet()
		if err != nil {
			return err
		}
		if p[0] != gomysql.EOF_HEADER {
			return fmt.Errorf("malformed reply: %x where the end of the column definitions was due", p)
		}
	}
	return nil
}

// textKind is how go-mysql's text parser (RowData.ParseText) reads a column's values.
func textKind(f *gomysql.Field) gomysql.FieldValueType {
	switch f.Type {
	case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_INT24,
		gomysql.MYSQL_TYPE_LONGLONG, gomysql.MYSQL_TYPE_LONG, gomysql.MYSQL_TYPE_YEAR:
		if f.Flag&gomysql.UNSIGNED_FLAG != 0 {
			return gomysql.FieldValueTypeUnsigned
		}
		return gomysql.FieldValueTypeSigned
	case gomysql.MYSQL_TYPE_FLOAT, gomysql.MYSQL_TYPE_DOUBLE:
		return gomysql.FieldValueTypeFloat
	}
	return gomysql.FieldValueTypeString
}

// packet reads the next packet whole (all its parts) into q.pkt, valid until the next call.
func (q *textQuery) packet() ([]byte, error) {
	q.pkt = q.pkt[:0]
	for {
		var h [4]byte
		if _, err := io.ReadFull(q.br, h[:]); err != nil {
			return nil, q.readErr(err)
		}
		n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		if h[3] != q.seq {
			return nil, fmt.Errorf("packet %d of the reply where %d was due", h[3], q.seq)
		}
		q.seq++
		start := len(q.pkt)
		q.pkt = slices.Grow(q.pkt, n)[:start+n]
		if _, err := io.ReadFull(q.br, q.pkt[start:]); err != nil {
			return nil, q.readErr(err)
		}
		if n < maxPacket {
			break
		}
	}
	if len(q.pkt) == 0 {
		return nil, errors.New("empty packet in the reply")
	}
	return q.pkt, nil
}

func (q *textQuery) readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("read the reply: connection closed: %w", gomysql.ErrBadConn)
	}
	return fmt.Errorf("read the reply: %w", err)
}

// cells cuts the values of a row packet p, which lives in rs's data, into rs's cells.
func (q *textQuery) cells(rs *rowSet, p []byte) error {
	pos := 0
	for _, k := range q.kinds {
		if pos >= len(p) {
			return fmt.Errorf("malformed row packet: %d values where %d were due", len(rs.cells)%len(q.kinds), len(q.kinds))
		}
		var l uint64
		switch b := p[pos]; {
		case b < 0xfb:
			l, pos = uint64(b), pos+1
		case b == 0xfb:
			rs.cells = append(rs.cells, cell{Type: gomysql.FieldValueTypeNull})
			pos++
			continue
		case b == 0xfc && pos+3 <= len(p):
			l, pos = uint64(binary.LittleEndian.Uint16(p[pos+1:])), pos+3
		case b == 0xfd && pos+4 <= len(p):
			l, pos = uint64(p[pos+1])|uint64(p[pos+2])<<8|uint64(p[pos+3])<<16, pos+4
		case b == 0xfe && pos+9 <= len(p):
			l, pos = binary.LittleEndian.Uint64(p[pos+1:]), pos+9
		default:
			return fmt.Errorf("malformed row packet: length prefix %#x at byte %d", b, pos)
		}
		if l > uint64(len(p)-pos) {
			return fmt.Errorf("malformed row packet: a value of %d bytes at byte %d of %d", l, pos, len(p))
		}
		v := p[pos : pos+int(l) : pos+int(l)]
		pos += int(l)
		c := cell{Type: k}
		switch k {
		case gomysql.FieldValueTypeSigned:
			n, err := snapshot.ParseInt(v)
			if err != nil {
				return fmt.Errorf("integer %q: %w", v, err)
			}
			c.bits = uint64(n)
		case gomysql.FieldValueTypeUnsigned:
			n, err := snapshot.ParseUint(v)
			if err != nil {
				return fmt.Errorf("integer %q: %w", v, err)
			}
			c.bits = n
		case gomysql.FieldValueTypeFloat:
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				return fmt.Errorf("number %q: %w", v, err)
			}
			c.bits = math.Float64bits(f)
		default:
			c.str = v
		}
		rs.cells = append(rs.cells, c)
	}
	if pos != len(p) {
		return fmt.Errorf("malformed row packet: %d bytes after the last of %d values", len(p)-pos, len(q.kinds))
	}
	rs.n++
	return nil
}
