package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/connect"

	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// table is how a captured table's rows become records: its columns with their decoders,
// filters and masks, and which columns make the record key.
type table struct {
	relid    uint32
	schema   string
	name     string
	topic    string
	captured bool
	id       string // schema.name: the data collection of snapshot requests
	signal   bool   // the signal table (signal.data.collection): its inserts are signals
	// the incremental snapshot's chunk key columns (indexes into cols), for the key
	// names they were found for
	incrKey      []int
	incrKeyNames []string
	// boxed once for the source blocks
	boxSchema, boxName any
	cols               []column
	key                []int // indexes into cols of the record key columns; nil: the key is null
	keyNames           []string

	// scratch, reused row after row
	vals []any
	kind []byte
	// the JSON rendering's (render.go): column labels, and where each value went
	labels [][]byte
	spans  [][2]int

	// slab is what rows and common values are built from (the source's; nil: the heap).
	// Tables are decoded only on the goroutine that runs Read.
	slab *connect.Slab
}

type column struct {
	name   string
	typ    uint32
	typmod int32
	decode decodeFunc
	fast   byte // fastText, fastInt or fastTimestamptz: decoded in place from the slab; 0: by decode
	keep   bool
	masks  []columnMask
}

// newTable builds the model of a table from its columns (as pgoutput sends them) and the
// catalog's key columns.
func (s *Source) newTable(ctx context.Context, relid uint32, schema, name string, defs []colDef, catalogKey []string) (*table, error) {
	t := &table{
		relid:    relid,
		schema:   schema,
		name:     name,
		topic:    s.set.prefix + "." + schema + "." + name,
		captured: s.set.filter.table(schema, name),
		id:       schema + "." + name,
	}
	t.signal = s.set.incr.SignalTableEnabled() && strings.EqualFold(t.id, s.set.incr.SignalTable)
	t.boxSchema, t.boxName = t.schema, t.name
	t.slab = &s.slab
	if !t.captured && !t.signal {
		return t, nil
	}
	for _, d := range defs {
		dec, err := s.types.decoder(ctx, d.Type, d.Typmod)
		if err != nil {
			return nil, fmt.Errorf("table %s.%s column %s: %w", schema, name, d.Name, err)
		}
		t.cols = append(t.cols, column{
			name: d.Name, typ: d.Type, typmod: d.Typmod, decode: dec, fast: fastKind(dec, d.Type),
			keep:  s.set.filter.column(schema, name, d.Name),
			masks: s.set.masksFor(schema, name, d.Name),
		})
	}
	keyNames := s.set.keyColumnsFor(schema, name)
	if keyNames == nil {
		keyNames = catalogKey
	}
	for _, kn := range keyNames {
		i := t.colIndex(kn)
		if i < 0 {
			s.log.Warn("key column is not among the published columns: records of the table get a null key",
				"table", schema+"."+name, "column", kn)
			t.key = nil
			break
		}
		t.key = append(t.key, i)
	}
	if t.key != nil {
		t.keyNames = keyNames
	}
	t.vals = make([]any, len(t.cols))
	t.kind = make([]byte, len(t.cols))
	return t, nil
}

func (t *table) colIndex(name string) int {
	for i := range t.cols {
		if t.cols[i].name == name {
			return i
		}
	}
	return -1
}

// Kinds of a column value in a row being decoded (pgoutput's tuple kinds).
const (
	kindNull      = 'n'
	kindText      = 't'
	kindUnchanged = 'u'
	kindBinary    = 'b' // pgoutput's binary kind; here only from a snapshot's chunk query
)

// decode fills t.vals and t.kind from the values of one row. get returns the kind and the
// bytes of column i: its text, or for kindBinary its binary form.
func (t *table) decode(get func(i int) (byte, []byte)) error {
	for i := range t.cols {
		k, b := get(i)
		t.kind[i] = k
		t.vals[i] = nil
		if k != kindText && k != kindBinary {
			continue
		}
		v, err := t.decodeCol(i, k, b)
		if err != nil {
			return err
		}
		t.vals[i] = v
	}
	return nil
}

// decodeCol decodes the value of column i, of kind kindText or kindBinary.
func (t *table) decodeCol(i int, k byte, b []byte) (any, error) {
	var v any
	var err error
	switch c := &t.cols[i]; {
	case k == kindBinary:
		v, err = t.decodeBinary(c, b)
	case c.fast == fastText && t.slab != nil:
		v = t.slab.String(t.slab.Text(b))
	case c.fast == fastTimestamptz && t.slab != nil:
		var buf [48]byte
		if out, ok := appendUTCInstant(buf[:0], b); ok {
			v = t.slab.String(t.slab.Text(out))
		} else {
			v, err = c.decode(b)
		}
	case c.fast == fastInt && t.slab != nil:
		if n, perr := snapshot.ParseInt(b); perr == nil {
			v = t.slab.Int(n)
		} else {
			v, err = c.decode(b) // its error names the text
		}
	default:
		v, err = c.decode(b)
	}
	if err != nil {
		// the same text fails the same way after a reconnect: retrying cannot help
		return nil, t.colError(i, err)
	}
	return v, nil
}

func (t *table) colError(i int, err error) error {
	return connect.Permanent(fmt.Errorf("table %s.%s column %s: %w", t.schema, t.name, t.cols[i].name, err))
}

// decodeBinary decodes a value in binary form: only timestamptz columns come so (see
// chunkQuery.binaryTimestamptz). Years 1 to 9999 are formatted straight into the slab, as
// appendUTCInstant formats the server's text; any other value (infinities, BC dates, years
// past 9999) is decoded from the text the server would have sent, so both forms decode alike.
func (t *table) decodeBinary(c *column, b []byte) (any, error) {
	if c.fast != fastTimestamptz || len(b) != 8 {
		return nil, fmt.Errorf("binary value of %d bytes for a column of type %d", len(b), c.typ)
	}
	us := int64(binary.BigEndian.Uint64(b))
	if t.slab != nil {
		var buf [32]byte // on the stack: only the slab keeps the text
		if out, ok := appendUTCMicros(buf[:0], us); ok {
			return t.slab.String(t.slab.Text(out)), nil
		}
	}
	return c.decode(appendTimestamptzText(make([]byte, 0, 48), us))
}

// image returns the row image of the decoded row (kept columns, masks applied; unchanged
// values left out) and the names of the unchanged columns.
func (t *table) image() (connect.Row, []string) {
	row := t.fields(len(t.cols))[:0]
	var unchanged []string
	for i := range t.cols {
		c := &t.cols[i]
		if !c.keep {
			continue
		}
		if t.kind[i] == kindUnchanged {
			unchanged = append(unchanged, c.name)
			continue
		}
		v := t.vals[i]
		for m := range c.masks {
			v = c.masks[m].apply(v)
		}
		row = append(row, connect.Field{Name: c.name, Value: v})
	}
	return row, unchanged
}

// imageKey returns image() and keyRow() with one allocation for both rows.
func (t *table) imageKey() (connect.Row, []string, connect.Row) {
	buf := t.fields(len(t.cols) + len(t.key))[:0]
	var unchanged []string
	for i := range t.cols {
		c := &t.cols[i]
		if !c.keep {
			continue
		}
		if t.kind[i] == kindUnchanged {
			unchanged = append(unchanged, c.name)
			continue
		}
		v := t.vals[i]
		for m := range c.masks {
			v = c.masks[m].apply(v)
		}
		buf = append(buf, connect.Field{Name: c.name, Value: v})
	}
	img := buf[:len(buf):len(buf)]
	if t.key == nil {
		return img, unchanged, nil
	}
	key := buf[len(buf):len(buf)]
	for _, i := range t.key {
		key = append(key, connect.Field{Name: t.cols[i].name, Value: t.vals[i]})
	}
	return img, unchanged, key
}

// keyRow returns the record key of the decoded row, or nil when the table has no key.
func (t *table) keyRow() connect.Row {
	if t.key == nil {
		return nil
	}
	k := t.fields(len(t.key))
	for j, i := range t.key {
		k[j] = connect.Field{Name: t.cols[i].name, Value: t.vals[i]}
	}
	return k
}

// fields returns a row of n zero fields, from the slab when the table has one.
func (t *table) fields(n int) connect.Row {
	if t.slab == nil {
		return make(connect.Row, n)
	}
	return t.slab.Fields(n)
}

// boxRow returns r (not nil) as an interface, boxed from the slab when the table has one.
func (t *table) boxRow(r connect.Row) any {
	if t.slab == nil {
		return r
	}
	return t.slab.Row(r)
}

// event is what a record is made from: its images, key, source block and position.
type event struct {
	op        connect.Op
	before    connect.Row
	after     connect.Row
	unchanged []string
	key       connect.Row
	tombstone bool

	lsn     pglogrepl.LSN // of the change
	commit  time.Time
	version pglogrepl.LSN
	source  any // the source block: a connect.Row, boxed once where it is shared; nil: built from src*
	pos     connect.Position

	srcTs, srcSeq, srcTx, srcLSN any // a stream record's own source fields
}

// record builds the connect.Record of an event. The value is ChangeEvent.Row()'s shape, built
// directly so that the per-batch processing time is boxed once.
func (s *Source) record(t *table, ev *event) connect.Record {
	r := connect.Record{
		Topic:     t.topic,
		Partition: -1,
		Offset:    -1,
		Timestamp: ev.commit,
		Version:   int64(ev.version),
		Position:  ev.pos,
	}
	if ev.key != nil {
		r.Key = t.boxRow(ev.key)
	}
	if ev.tombstone {
		return r
	}
	var env connect.Row
	if ev.source == nil {
		// the source block is this record's own: one allocation for both rows
		buf := t.fields(5 + 12)
		env = buf[:5:5]
		src := buf[5:]
		s.fillSource(src, t, ev.srcTs, "false", ev.srcSeq, ev.srcTx, ev.srcLSN)
		env[2] = connect.Field{Name: connect.FieldSource, Value: t.boxRow(src)}
	} else {
		env = t.fields(5)
		env[2] = connect.Field{Name: connect.FieldSource, Value: ev.source}
	}
	env[0] = connect.Field{Name: connect.FieldBefore, Value: t.rowOrNil(ev.before)}
	env[1] = connect.Field{Name: connect.FieldAfter, Value: t.rowOrNil(ev.after)}
	env[3] = connect.Field{Name: connect.FieldOp, Value: ev.op.Boxed()}
	env[4] = connect.Field{Name: connect.FieldTsMs, Value: s.nowMs}
	r.Value = t.boxRow(env)
	if len(ev.unchanged) > 0 {
		r.Headers = connect.Headers{{Key: connect.HeaderUnchanged, Value: []byte(strings.Join(ev.unchanged, ","))}}
	}
	return r
}

func (t *table) rowOrNil(r connect.Row) any {
	if r == nil {
		return nil
	}
	return t.boxRow(r)
}

// sourceRow builds a source block (Debezium's PostgreSQL fields in Debezium's order).
func (s *Source) sourceRow(t *table, tsMs, snapshot, sequence, txID, lsn any) connect.Row {
	src := make(connect.Row, 12)
	s.fillSource(src, t, tsMs, snapshot, sequence, txID, lsn)
	return src
}

func (s *Source) fillSource(src connect.Row, t *table, tsMs, snapshot, sequence, txID, lsn any) {
	src[0] = connect.Field{Name: "version", Value: Version}
	src[1] = connect.Field{Name: "connector", Value: "postgresql"}
	src[2] = connect.Field{Name: "name", Value: s.boxPrefix}
	src[3] = connect.Field{Name: "ts_ms", Value: tsMs}
	src[4] = connect.Field{Name: "snapshot", Value: snapshot}
	src[5] = connect.Field{Name: "db", Value: s.boxDB}
	src[6] = connect.Field{Name: "sequence", Value: sequence}
	src[7] = connect.Field{Name: "schema", Value: t.boxSchema}
	src[8] = connect.Field{Name: "table", Value: t.boxName}
	src[9] = connect.Field{Name: "txId", Value: txID}
	src[10] = connect.Field{Name: "lsn", Value: lsn}
	src[11] = connect.Field{Name: "xmin", Value: nil}
}

// sameKey reports whether two raw key texts are equal.
func sameKey(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) || !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
