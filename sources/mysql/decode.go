package mysql

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/sluice-cdc/sluice/connect"
)

// Decoding row images.
//
// go-mysql decodes every value of a rows event into its own Go form (an int32, a datetime
// formatted with fmt, a map of the unsigned columns built for every row), which the source then
// converts into the record value: most of the cost of a binlog row change. For the common
// column types the source decodes row images itself, straight into record values, in the binlog
// reader's goroutine, so that the reader that builds records (and the runtime after it) run in
// parallel with the decoding:
//
//	RowsEventDecodeFunc (decode): go-mysql parses the event header (table, bitmaps); the body
//	    is kept for the event handler
//	event handler (finish): decodes the body with a plan of the table (rowPlan), or with
//	    go-mysql's decoder when the table has a column type outside the plan's (DECIMAL, BIT,
//	    JSON, GEOMETRY, pre-5.6 temporal types), the event is compressed (MariaDB), a partial
//	    JSON update (MySQL) or inside a compressed transaction (MySQL)
//
// Values from a plan are final (what column.binlogValue makes of go-mysql's value, through the
// same helpers); the reader uses them as they are. Tables the configuration does not capture
// are only walked, for their row count.

// rowDecoder decodes the row images of rows events; see above. decode may run on several
// goroutines (a compressed transaction's events are parsed concurrently); everything else runs
// on the binlog reader's goroutine.
type rowDecoder struct {
	s *Source

	mu      sync.Mutex
	pending map[*replication.RowsEvent]pendingRows

	plans    map[uint64]*rowPlan // by table id
	checksum bool
	bx       boxer
	anys     []any // slab of row images
}

type pendingRows struct {
	data []byte // the event body
	pos  int    // where the row images start
}

func newRowDecoder(s *Source) *rowDecoder {
	return &rowDecoder{s: s, pending: map[*replication.RowsEvent]pendingRows{}, plans: map[uint64]*rowPlan{}}
}

// decode is the RowsEventDecodeFunc: it decodes the header and keeps the body for finish.
func (d *rowDecoder) decode(re *replication.RowsEvent, data []byte) error {
	pos, err := re.DecodeHeader(data)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.pending[re] = pendingRows{data: data, pos: pos}
	d.mu.Unlock()
	return nil
}

// finish decodes the row images of the rows events of ev, if any; final reports that the
// values of ev (a rows event) came from a plan.
func (d *rowDecoder) finish(ev *replication.BinlogEvent) (final bool, err error) {
	switch e := ev.Event.(type) {
	case *replication.FormatDescriptionEvent:
		d.checksum = e.ChecksumAlgorithm == replication.BINLOG_CHECKSUM_ALG_CRC32
	case *replication.TableMapEvent:
		d.tableMap(ev, e)
	case *replication.RowsEvent:
		final, err = d.rows(ev.Header.EventType, e)
	case *replication.TransactionPayloadEvent:
		for _, in := range e.Events {
			if re, ok := in.Event.(*replication.RowsEvent); ok {
				if _, err := d.rows(replication.UNKNOWN_EVENT, re); err != nil {
					return false, err
				}
			}
		}
	}
	d.mu.Lock()
	clear(d.pending) // none is left, unless go-mysql parsed events it did not deliver
	d.mu.Unlock()
	return final, err
}

// rows decodes one rows event, with a plan when its type and table allow.
func (d *rowDecoder) rows(typ replication.EventType, re *replication.RowsEvent) (bool, error) {
	d.mu.Lock()
	p, ok := d.pending[re]
	delete(d.pending, re)
	d.mu.Unlock()
	if !ok {
		return false, nil // decoded by go-mysql already
	}
	plan := d.plans[re.TableID]
	switch typ {
	case replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2,
		replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2,
		replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2:
	default:
		plan = nil // compressed, partial JSON, older formats or unknown: go-mysql's
	}
	if plan == nil || !plan.fast || plan.tm != re.Table {
		return false, re.DecodeData(p.pos, p.data)
	}
	rows, err := d.decodeRows(plan, re, p.data[p.pos:])
	if err != nil {
		return false, connect.Permanentf("decode row images of %s.%s: %w", re.Table.Schema, re.Table.Table, err)
	}
	re.Rows = rows
	return true, nil
}

// tableMap keeps the plan of a table map event's table.
func (d *rowDecoder) tableMap(ev *replication.BinlogEvent, tm *replication.TableMapEvent) {
	raw := tableMapBody(ev, d.checksum)
	if old := d.plans[tm.TableID]; old != nil && string(old.raw) == string(raw) {
		old.tm = tm // go-mysql resolves the rows events that follow to this event
		return
	}
	if len(d.plans) >= 1024 {
		clear(d.plans)
	}
	d.plans[tm.TableID] = d.s.newRowPlan(tm, raw)
}

// tableMapBody is a table map event without its header and checksum, to recognise an unchanged
// definition.
func tableMapBody(ev *replication.BinlogEvent, checksum bool) []byte {
	raw := ev.RawData
	if len(raw) > replication.EventHeaderSize {
		raw = raw[replication.EventHeaderSize:]
	}
	if checksum && len(raw) >= 4 {
		raw = raw[:len(raw)-4]
	}
	return raw
}

// rowPlan is how the row images of one table map are decoded.
type rowPlan struct {
	raw  []byte
	tm   *replication.TableMapEvent
	fast bool   // every column has a planned type
	t    *table // nil: not captured (images are only walked)
	cols []colPlan
}

type colOp uint8

const (
	opInt colOp = iota + 1
	opFloat
	opDouble
	opYear
	opDate
	opTime2
	opDateTime2
	opTimestamp2
	opString // 1 or 2 length bytes (by size)
	opBlob   // size length bytes
	opEnum   // size bytes
	opSet    // size bytes
)

type colPlan struct {
	op       colOp
	size     int // bytes of an integer, of a length prefix, of an enum or set
	dec      int // fractional digits of a temporal type
	unsigned bool
}

// newRowPlan plans the decoding of a table map's row images.
func (s *Source) newRowPlan(tm *replication.TableMapEvent, raw []byte) *rowPlan {
	p := &rowPlan{raw: append([]byte(nil), raw...), tm: tm, cols: make([]colPlan, len(tm.ColumnType))}
	unsigned := tm.UnsignedMap()
	for i, typ := range tm.ColumnType {
		meta := tm.ColumnMeta[i]
		c := &p.cols[i]
		c.unsigned = unsigned[i]
		switch typ {
		case gomysql.MYSQL_TYPE_TINY:
			c.op, c.size = opInt, 1
		case gomysql.MYSQL_TYPE_SHORT:
			c.op, c.size = opInt, 2
		case gomysql.MYSQL_TYPE_INT24:
			c.op, c.size = opInt, 3
		case gomysql.MYSQL_TYPE_LONG:
			c.op, c.size = opInt, 4
		case gomysql.MYSQL_TYPE_LONGLONG:
			c.op, c.size = opInt, 8
		case gomysql.MYSQL_TYPE_FLOAT:
			c.op = opFloat
		case gomysql.MYSQL_TYPE_DOUBLE:
			c.op = opDouble
		case gomysql.MYSQL_TYPE_YEAR:
			c.op = opYear
		case gomysql.MYSQL_TYPE_DATE:
			c.op = opDate
		case gomysql.MYSQL_TYPE_TIME2:
			c.op, c.dec = opTime2, int(meta)
		case gomysql.MYSQL_TYPE_DATETIME2:
			c.op, c.dec = opDateTime2, int(meta)
		case gomysql.MYSQL_TYPE_TIMESTAMP2:
			c.op, c.dec = opTimestamp2, int(meta)
		case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING:
			c.op, c.size = opString, lengthBytes(int(meta))
		case gomysql.MYSQL_TYPE_BLOB:
			c.op, c.size = opBlob, int(meta)
		case gomysql.MYSQL_TYPE_ENUM:
			c.op, c.size = opEnum, int(meta&0xFF)
		case gomysql.MYSQL_TYPE_SET:
			c.op, c.size = opSet, int(meta&0xFF)
		case gomysql.MYSQL_TYPE_STRING:
			// the real type and the length are in the metadata (go-mysql's decodeValue)
			real, length := byte(gomysql.MYSQL_TYPE_STRING), int(meta)
			if meta >= 256 {
				b0, b1 := uint8(meta>>8), uint8(meta&0xFF)
				if b0&0x30 != 0x30 {
					length, real = int(uint16(b1)|uint16((b0&0x30)^0x30)<<4), b0|0x30
				} else {
					length, real = int(b1), b0
				}
			}
			switch real {
			case gomysql.MYSQL_TYPE_STRING:
				c.op, c.size = opString, lengthBytes(length)
			case gomysql.MYSQL_TYPE_ENUM:
				c.op, c.size = opEnum, length
			case gomysql.MYSQL_TYPE_SET:
				c.op, c.size = opSet, length
			}
		}
		if c.op == 0 || (c.op == opBlob && (c.size < 1 || c.size > 4)) || (c.op == opEnum && c.size != 1 && c.size != 2) ||
			(c.op == opSet && (c.size < 1 || c.size > 8)) || ((c.op == opTime2 || c.op == opDateTime2 || c.op == opTimestamp2) && c.dec > 6) {
			return p // a column go-mysql decodes
		}
	}
	if s.decodes(string(tm.Schema), string(tm.Table)) {
		t, err := s.tableFromMap(tm)
		if err != nil {
			return p // the reader reports it
		}
		p.t = t
	}
	p.fast = true
	return p
}

func lengthBytes(maxLen int) int {
	if maxLen < 256 {
		return 1
	}
	return 2
}

// decodeRows decodes the row images of an event body (after its header).
func (d *rowDecoder) decodeRows(p *rowPlan, re *replication.RowsEvent, data []byte) (rows [][]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed row image: %v", r)
		}
	}()
	n := int(re.ColumnCount)
	if n != len(p.cols) {
		return nil, fmt.Errorf("rows event has %d columns, its table map %d", n, len(p.cols))
	}
	bitmaps := [][]byte{re.ColumnBitmap1}
	if re.ColumnBitmap2 != nil && re.Type() == replication.EnumRowsEventTypeUpdate {
		bitmaps = append(bitmaps, re.ColumnBitmap2)
	}
	rows = make([][]any, 0, 16)
	for pos := 0; pos < len(data); {
		for _, bm := range bitmaps {
			var row []any
			if p.t != nil {
				if len(d.anys) < n {
					d.anys = make([]any, max(1024, n))
				}
				row = d.anys[:n:n]
				d.anys = d.anys[n:]
			}
			k, err := d.decodeImage(p, data[pos:], bm, row)
			if err != nil {
				return nil, err
			}
			pos += k
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// decodeImage decodes one row image into row (nil: only walk it) and returns its length.
func (d *rowDecoder) decodeImage(p *rowPlan, data, bitmap []byte, row []any) (int, error) {
	present := 0
	for i := range p.cols {
		if bitmap[i>>3]&(1<<(uint(i)&7)) != 0 {
			present++
		}
	}
	nulls := data[:(present+7)/8]
	pos := len(nulls)
	ni := 0
	o := &d.s.opts
	for i := range p.cols {
		if bitmap[i>>3]&(1<<(uint(i)&7)) == 0 {
			continue // not in the image (binlog_row_image is not FULL): null
		}
		isNull := nulls[ni>>3]&(1<<(uint(ni)&7)) != 0
		ni++
		if isNull {
			continue
		}
		cp := &p.cols[i]
		var c *column
		if row != nil {
			c = &p.t.cols[i]
		}
		v, n, err := d.value(cp, c, data[pos:], o)
		if err != nil {
			return 0, fmt.Errorf("column %d: %w", i, err)
		}
		pos += n
		if row != nil {
			row[i] = v
		}
	}
	return pos, nil
}

// value decodes one value of column plan cp; with c nil it only measures it.
func (d *rowDecoder) value(cp *colPlan, c *column, b []byte, o *valueOptions) (any, int, error) {
	bx := &d.bx
	switch cp.op {
	case opInt:
		if c == nil {
			return nil, cp.size, nil
		}
		var u uint64
		switch cp.size {
		case 1:
			u = uint64(b[0])
		case 2:
			u = uint64(binary.LittleEndian.Uint16(b))
		case 3:
			u = uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16
		case 4:
			u = uint64(binary.LittleEndian.Uint32(b))
		case 8:
			u = binary.LittleEndian.Uint64(b)
		}
		if cp.unsigned {
			if cp.size == 8 {
				return c.uintValue(u, o, bx), 8, nil
			}
			return bx.int(int64(u)), cp.size, nil
		}
		shift := 64 - 8*cp.size // sign extension
		return bx.int(int64(u<<shift) >> shift), cp.size, nil
	case opFloat:
		if c == nil {
			return nil, 4, nil
		}
		return float32Value(math.Float32frombits(binary.LittleEndian.Uint32(b))), 4, nil
	case opDouble:
		if c == nil {
			return nil, 8, nil
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), 8, nil
	case opYear:
		if c == nil {
			return nil, 1, nil
		}
		if b[0] == 0 {
			return bx.int(0), 1, nil
		}
		return bx.int(int64(b[0]) + 1900), 1, nil
	case opDate:
		if c == nil {
			return nil, 3, nil
		}
		v := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		return c.dateFromParts(v/(16*32), v/32%16, v%32, bx), 3, nil
	case opTime2:
		n := 3 + (cp.dec+1)/2
		if c == nil {
			return nil, n, nil
		}
		return timeFromMicros(time2Micros(b, cp.dec), o, bx), n, nil
	case opDateTime2:
		n := 5 + (cp.dec+1)/2
		if c == nil {
			return nil, n, nil
		}
		y, mo, dd, h, mi, s, us := dateTime2Parts(b, cp.dec)
		return c.dateTimeFromParts(y, mo, dd, h, mi, s, us, o, bx), n, nil
	case opTimestamp2:
		n := 4 + (cp.dec+1)/2
		if c == nil {
			return nil, n, nil
		}
		sec := int64(binary.BigEndian.Uint32(b))
		us := truncFrac(fracMicros(b[4:], cp.dec), cp.dec)
		if sec == 0 {
			return c.timestampFromParts(0, 0, 0, 0, 0, 0, 0, bx), n, nil
		}
		t := time.Unix(sec, 0).UTC()
		y, mo, dd := t.Date()
		h, mi, s := t.Clock()
		return c.timestampFromParts(y, int(mo), dd, h, mi, s, us, bx), n, nil
	case opString, opBlob:
		var length, n int
		switch cp.size {
		case 1:
			length = int(b[0])
		case 2:
			length = int(binary.LittleEndian.Uint16(b))
		case 3:
			length = int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		case 4:
			length = int(binary.LittleEndian.Uint32(b))
		}
		n = cp.size + length
		if c == nil {
			return nil, n, nil
		}
		raw := b[cp.size:n:n]
		switch c.kind {
		case kindText:
			v, err := c.textString(eventString(raw), bx)
			return v, n, err
		case kindBinary:
			return c.binaryValue(append([]byte(nil), raw...), o), n, nil
		}
		return nil, 0, fmt.Errorf("string value for a %s column", c.kind)
	case opEnum:
		if c == nil {
			return nil, cp.size, nil
		}
		x := int(b[0])
		if cp.size == 2 {
			x = int(binary.LittleEndian.Uint16(b))
		}
		if x >= 1 && x <= len(c.values) {
			return bx.str(c.values[x-1]), cp.size, nil
		}
		return "", cp.size, nil
	case opSet:
		if c == nil {
			return nil, cp.size, nil
		}
		var u uint64
		for i := cp.size - 1; i >= 0; i-- {
			u = u<<8 | uint64(b[i])
		}
		return bx.str(c.setValue(u)), cp.size, nil
	}
	return nil, 0, fmt.Errorf("no plan for column op %d", cp.op)
}

// eventString is bytes of an event body as a string without a copy: event bodies are never
// written again (go-mysql hands out its VARCHAR values the same way).
func eventString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// fracMicros reads the fractional seconds of a temporal value with dec digits (1 to 3 bytes).
func fracMicros(b []byte, dec int) int {
	switch dec {
	case 1, 2:
		return int(b[0]) * 10000
	case 3, 4:
		return int(binary.BigEndian.Uint16(b)) * 100
	case 5, 6:
		return int(b[0])<<16 | int(b[1])<<8 | int(b[2])
	}
	return 0
}

// truncFrac keeps the first dec digits of microseconds (the server stores pairs of digits).
func truncFrac(us, dec int) int {
	if dec >= 6 {
		return us
	}
	p := 1
	for range 6 - dec {
		p *= 10
	}
	return us - us%p
}

// dateTime2Parts decodes a DATETIME2 (5 bytes and 0 to 3 bytes of fraction).
func dateTime2Parts(b []byte, dec int) (y, mo, d, h, mi, s, us int) {
	const intOfs = 0x8000000000
	intPart := int64(b[0])<<32 | int64(b[1])<<24 | int64(b[2])<<16 | int64(b[3])<<8 | int64(b[4])
	intPart -= intOfs
	frac := fracMicros(b[5:], dec)
	if intPart == 0 {
		return 0, 0, 0, 0, 0, 0, 0
	}
	tmp := intPart<<24 + int64(frac)
	if tmp < 0 {
		tmp = -tmp
	}
	ymdhms := tmp >> 24
	ymd, hms := ymdhms>>17, ymdhms%(1<<17)
	ym := ymd >> 5
	return int(ym / 13), int(ym % 13), int(ymd % (1 << 5)), int(hms >> 12), int((hms >> 6) % (1 << 6)), int(hms % (1 << 6)), truncFrac(frac, dec)
}

// time2Micros decodes a TIME2 (3 bytes and 0 to 3 bytes of fraction, or 6 bytes for 5 and 6
// digits) into signed microseconds.
func time2Micros(b []byte, dec int) int64 {
	const intOfs, ofs = 0x800000, 0x800000000000
	be := func(n int) int64 {
		var v int64
		for _, c := range b[:n] {
			v = v<<8 | int64(c)
		}
		return v
	}
	var tmp int64
	switch dec {
	case 1, 2:
		intPart, frac := be(3)-intOfs, int64(b[3])
		if intPart < 0 && frac != 0 {
			intPart++
			frac -= 0x100
		}
		tmp = intPart<<24 + frac*10000
	case 3, 4:
		intPart, frac := be(3)-intOfs, int64(binary.BigEndian.Uint16(b[3:]))
		if intPart < 0 && frac != 0 {
			intPart++
			frac -= 0x10000
		}
		tmp = intPart<<24 + frac*100
	case 5, 6:
		tmp = be(6) - ofs
	default:
		tmp = (be(3) - intOfs) << 24
	}
	neg := tmp < 0
	if neg {
		tmp = -tmp
	}
	hms := tmp >> 24
	h, m, s := (hms>>12)%(1<<10), (hms>>6)%(1<<6), hms%(1<<6)
	us := int64(truncFrac(int(tmp%(1<<24)), dec))
	v := (h*3600+m*60+s)*1_000_000 + us
	if neg {
		v = -v
	}
	return v
}
