package mysql

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"unsafe"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// Reading the snapshot: a pipeline of goroutines started by open and stopped by close.
//
//	fetcher:     runs the chunk queries one after the other on the snapshot connection and
//	             reads each chunk's rows into row sets (cells) of at most max.batch.size rows
//	             (textquery.go: in the text protocol the values stay where the row was read)
//	converters:  (up to 4, by GOMAXPROCS) turn row sets into batches of records, each in turn
//	read:        takes the batches from the converters in the same turn, so in row order
//
// The fetcher hands a chunk over only once the chunk's query is done, so a slow consumer (a
// paused connector) never stalls a query on the server (net_write_timeout); it reads the next
// chunk while the converters work. Each row set becomes one batch; read holds the last batch
// back until a later one exists, so that the snapshot's last record can be marked "last" even
// when the tables after it are empty. Memory is bounded by the channels: about three chunks.

// cell is one value of a fetched row: the parts of a gomysql.FieldValue, with string bytes in
// the row set's data (written once, never changed afterwards).
type cell struct {
	Type gomysql.FieldValueType
	bits uint64 // signed, unsigned or float64 bits
	str  []byte
}

func (c *cell) AsInt64() int64     { return int64(c.bits) }
func (c *cell) AsUint64() uint64   { return c.bits }
func (c *cell) AsFloat64() float64 { return math.Float64frombits(c.bits) }
func (c *cell) AsString() []byte   { return c.str }

// stableString is the cell's string bytes as a string without a copy: the row set's data is
// never written again once the set is handed over.
func (c *cell) stableString() string {
	if len(c.str) == 0 {
		return ""
	}
	return unsafe.String(&c.str[0], len(c.str))
}

// arg is the cell as a statement argument (the key of the next chunk query).
func (c *cell) arg() any {
	switch c.Type {
	case gomysql.FieldValueTypeSigned:
		return c.AsInt64()
	case gomysql.FieldValueTypeUnsigned:
		return c.bits
	case gomysql.FieldValueTypeFloat:
		return c.AsFloat64()
	case gomysql.FieldValueTypeString:
		return append([]byte(nil), c.str...)
	}
	return nil
}

// rowSet is a run of rows of one chunk, converted into one batch.
type rowSet struct {
	t     *table
	mode  int
	ti    int
	rows0 int64 // rows of the table read before the set's first
	run   uint32
	trunc bool // the batch starts with the table's truncate event (a re-snapshot)
	src   any  // the table's shared source block
	n     int
	cells []cell
	data  []byte
	slabs [][]byte  // the data slabs the set's values point into (with rc)
	rc    *recycler // where data slabs come from, nil for fresh ones
	err   error     // the fetcher failed: no rows, the error goes to read in turn
}

func (rs *rowSet) row(i int) []cell {
	nc := len(rs.t.cols)
	return rs.cells[i*nc : (i+1)*nc : (i+1)*nc]
}

// room returns n bytes of the set's data to write a value (or a whole row packet) into.
func (rs *rowSet) room(n int) []byte {
	if cap(rs.data)-len(rs.data) < n {
		// a new slab; the cells cut from the old one keep it
		if rs.rc == nil {
			rs.data = make([]byte, 0, max(2*cap(rs.data), n, 4096))
		} else {
			rs.data = rs.rc.bytes.get(max(bytesSlab, n))
			rs.slabs = append(rs.slabs, rs.data)
		}
	}
	start := len(rs.data)
	rs.data = rs.data[:start+n]
	return rs.data[start : start+n : start+n]
}

// text copies b into the set's data.
func (rs *rowSet) text(b []byte) []byte {
	p := rs.room(len(b))
	copy(p, b)
	return p
}

// add copies a fetched row into the set.
func (rs *rowSet) add(row []gomysql.FieldValue) {
	for i := range row {
		fv := &row[i]
		c := cell{Type: fv.Type}
		switch fv.Type {
		case gomysql.FieldValueTypeSigned, gomysql.FieldValueTypeUnsigned:
			c.bits = fv.AsUint64()
		case gomysql.FieldValueTypeFloat:
			c.bits = math.Float64bits(fv.AsFloat64())
		case gomysql.FieldValueTypeString:
			c.str = rs.text(fv.AsString())
		}
		rs.cells = append(rs.cells, c)
	}
	rs.n++
}

// snapItem is one batch of a converter, or the error that ends the snapshot.
type snapItem struct {
	recs    []connect.Record
	release func() // the batch's Release
	err     error
}

// start starts the fetcher and the converters.
func (sn *snapshotter) start() {
	sn.publishProgress()
	ctx, cancel := context.WithCancel(context.Background())
	sn.cancel = cancel
	k := min(max(runtime.GOMAXPROCS(0), 1), 4)
	perChunk := sn.s.cfg.fetchSize/sn.s.cfg.maxBatch + 1
	// cells come back after conversion: room for the sets of a chunk and those converting
	sn.spare = make(chan []cell, perChunk+k+1)
	// a batch's rendered rows and fetched text fill a few dozen byte slabs, and batches are
	// released only once appended: keep enough for the batches in flight (16 MiB)
	sn.rc = &recycler{keepBytes: 4 * maxPooled}
	for range k {
		in := make(chan *rowSet, perChunk/k+1)
		out := make(chan snapItem, 1)
		sn.ins = append(sn.ins, in)
		sn.outs = append(sn.outs, out)
		cv := &converter{sn: sn, rc: sn.rc}
		cv.fields.rc, cv.bx.rc, cv.bx.vrc = cv.rc, cv.rc, cv.rc
		sn.wg.Add(1)
		go func() {
			defer sn.wg.Done()
			defer close(out)
			cv.run(ctx, in, out)
		}()
	}
	sn.wg.Add(1)
	go func() {
		defer sn.wg.Done()
		defer func() {
			for _, in := range sn.ins {
				close(in)
			}
		}()
		sn.fetch(ctx)
	}()
}

// close stops the pipeline and closes the connection.
func (sn *snapshotter) close() {
	if sn.cancel != nil {
		sn.cancel()
		sn.wg.Wait()
		sn.cancel = nil
	}
	if sn.stmt != nil {
		sn.stmt.Close()
		sn.stmt = nil
	}
	if sn.conn != nil {
		sn.conn.Close()
		sn.conn, sn.tq = nil, nil
	}
}

// read returns the next batch of snapshot records; done is true once every table was read (the
// batch may still hold the last records).
func (sn *snapshotter) read(ctx context.Context) (connect.Batch, bool, error) {
	if sn.err != nil {
		return connect.Batch{}, false, sn.err
	}
	for {
		select {
		case it, ok := <-sn.outs[sn.next]:
			if !ok {
				// the converter next in turn has no more: nor has any other
				recs, release := sn.held, sn.heldRelease
				sn.held, sn.heldRelease = nil, nil
				if n := len(recs); n > 0 {
					snapshot.MarkLast(&recs[n-1])
				}
				return batchOf(recs, release), true, nil
			}
			sn.next = (sn.next + 1) % len(sn.outs)
			if it.err != nil {
				sn.err = it.err
				return connect.Batch{}, false, it.err
			}
			if len(it.recs) == 0 {
				continue
			}
			recs, release := sn.held, sn.heldRelease
			sn.held, sn.heldRelease = it.recs, it.release
			if recs != nil {
				return batchOf(recs, release), false, nil
			}
		case <-ctx.Done():
			return connect.Batch{}, false, ctx.Err()
		}
	}
}

func batchOf(recs []connect.Record, release func()) connect.Batch {
	b := connect.Batch{Records: recs, Release: release}
	if n := len(recs); n > 0 {
		b.Position = recs[n-1].Position
	}
	return b
}

// fetch reads every remaining chunk and hands the row sets to the converters in turn.
func (sn *snapshotter) fetch(ctx context.Context) {
	for sn.ti < len(sn.tables) {
		sets, err := sn.chunk(ctx)
		if err != nil {
			sets = append(sets, &rowSet{err: err})
		}
		for _, rs := range sets {
			select {
			case sn.ins[sn.turn] <- rs:
			case <-ctx.Done():
				return
			}
			sn.turn = (sn.turn + 1) % len(sn.ins)
		}
		if err != nil {
			return
		}
	}
}

// newSet starts a row set of the current table at the current row. Its cells come from a set
// the converters are done with, if any (records never point into cells, only into data).
func (sn *snapshotter) newSet(t *table, mode int, trunc bool, rows int) *rowSet {
	var cells []cell
	select {
	case cells = <-sn.spare:
	default:
	}
	if need := rows * len(t.cols); cap(cells) < need {
		cells = make([]cell, 0, need)
	}
	rs := &rowSet{
		t: t, mode: mode, ti: sn.ti, rows0: sn.rows, run: sn.run, trunc: trunc, src: sn.srcBox,
		cells: cells[:0], rc: sn.rc,
	}
	if sn.rc == nil {
		rs.data = make([]byte, 0, max(sn.dataHint, 4096))
	}
	return rs
}

// chunk reads the next chunk of the current table into row sets.
func (sn *snapshotter) chunk(ctx context.Context) ([]*rowSet, error) {
	s := sn.s
	t := sn.tables[sn.ti]
	id := sn.plan.Tables[sn.ti]
	if t == nil {
		sn.nextTable()
		return nil, nil
	}
	mode := keyMode(t)
	limit := s.cfg.fetchSize
	maxBatch := s.cfg.maxBatch
	first := len(sn.after) == 0 && (mode != keyless || sn.rows == 0)
	var args []any
	switch {
	case mode == keyless:
		args = []any{limit, sn.rows}
	case first:
		args = []any{limit}
	default:
		for i := range t.order {
			for j := 0; j <= i; j++ {
				args = append(args, sn.after[j])
			}
		}
		args = append(args, limit)
	}
	text := textKeys(t, mode) && intArgs(args) && !s.forcePrepared
	if !text {
		kind := 1
		if first {
			kind = 0
		}
		if sn.stmt == nil || sn.stmtKind != kind {
			if sn.stmt != nil {
				sn.stmt.Close()
			}
			q := chunkQuery(t, mode, first, nil)
			st, err := sn.conn.Prepare(q)
			if err != nil {
				return nil, fmt.Errorf("snapshot %s: prepare %q: %w", id, q, err)
			}
			sn.stmt, sn.stmtKind = st, kind
		}
	}
	if sn.srcFor != t {
		sn.srcFor = t
		sn.srcBox = s.sourceBlock(sn.started.UnixMilli(), "true", t.db, t.name, 0, nil, sn.vfile, sn.vpos, 0, nil)
	}
	// a re-snapshot (the binlog was lost): rows deleted meanwhile have no delete event, so the
	// table starts over with a truncate event
	trunc := first && sn.epoch > 0
	room := func(rs *rowSet) int {
		if rs.trunc {
			return maxBatch - 1
		}
		return maxBatch
	}
	var sets []*rowSet
	cur := sn.newSet(t, mode, trunc, min(limit, maxBatch))
	got := 0
	// next is the set the next row goes to
	next := func() *rowSet {
		if cur.n >= room(cur) {
			sets = append(sets, cur)
			sn.dataHint = len(cur.data)
			cur = sn.newSet(t, mode, false, min(limit-got, maxBatch))
		}
		got++
		sn.rows++
		return cur
	}
	perRow := func(row []gomysql.FieldValue) error {
		next().add(row)
		return nil
	}

	conn := sn.conn // close sets sn.conn, maybe before this func has run
	stop := context.AfterFunc(ctx, func() { abort(conn) })
	defer stop()
	var res gomysql.Result
	var err error
	switch {
	case text && sn.tq != nil:
		err = sn.tq.run(chunkQuery(t, mode, first, args), len(t.cols), next)
	case text:
		err = sn.conn.ExecuteSelectStreaming(chunkQuery(t, mode, first, args), &res, perRow, nil)
	default:
		err = sn.stmt.ExecuteSelectStreaming(&res, perRow, nil, args...)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("snapshot %s: read chunk: %w", id, err)
	}
	if cur.n > 0 || cur.trunc {
		sets = append(sets, cur)
	}
	if mode != keyless && got > 0 {
		last := sets[len(sets)-1]
		row := last.row(last.n - 1)
		sn.after = sn.after[:0]
		for _, i := range t.order {
			sn.after = append(sn.after, row[i].arg())
		}
	}
	sn.progress[id] = [2]int64{sn.rows, sn.plan.Totals[sn.ti]}
	if got < limit {
		sn.nextTable()
	}
	sn.publishProgress()
	return sets, nil
}

// publishProgress makes the snapshot's progress the one Stats reports.
func (sn *snapshotter) publishProgress() {
	p := make(map[string][2]int64, len(sn.progress))
	for k, v := range sn.progress {
		p[k] = v
	}
	sn.s.stats.progress.Store(&p)
}

// converter turns row sets into batches; each has its own slabs.
type converter struct {
	sn      *snapshotter
	rc      *recycler // the slabs of released batches
	fields  fieldArena
	bx      boxer
	arena   posArena
	keyJSON []byte
	rj      rowJSON
	rowHint int // room for a row's rendering: twice the largest so far, at most maxRowHint
}

// maxRowHint bounds the room a row's rendering gets in the slab: a larger row outgrows it into
// memory of its own (so one huge row does not make every later row take a slab of its size).
const maxRowHint = 8 << 10

func (cv *converter) run(ctx context.Context, in <-chan *rowSet, out chan<- snapItem) {
	for rs := range in {
		var it snapItem
		if rs.err != nil {
			it.err = rs.err
		} else {
			it.recs, it.release, it.err = cv.convert(rs)
			cv.sn.s.stats.events.Add(int64(len(it.recs)))
			clear(rs.cells) // no string data kept alive by a spare
			select {
			case cv.sn.spare <- rs.cells[:0]:
			default:
			}
		}
		select {
		case out <- it:
		case <-ctx.Done():
			return
		}
		if it.err != nil {
			return
		}
	}
}

// convert makes the batch of a row set.
func (cv *converter) convert(rs *rowSet) ([]connect.Record, func(), error) {
	sn := cv.sn
	s := sn.s
	cv.fields.reset()
	cv.bx.reset()
	n := rs.n
	if rs.trunc {
		n++
	}
	recs := cv.rc.records(n)
	if rs.trunc {
		recs = append(recs, cv.truncateRecord(rs))
	}
	var err error
	if s.env.RawJSON {
		recs, err = cv.rendered(rs, recs)
	} else {
		recs, err = cv.rows(rs, recs)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot %s: %w", sn.plan.Tables[rs.ti], err)
	}
	return recs, cv.rc.batch(&cv.fields, &cv.bx, recs, rs.slabs), nil
}

// rendered appends the records of a row set to recs with their keys and values rendered as
// JSON (render.go), as the runtime stores them when the connector has no transforms
// (connect.Env.RawJSON).
func (cv *converter) rendered(rs *rowSet, recs []connect.Record) ([]connect.Record, error) {
	sn := cv.sn
	opts, t := &sn.s.opts, rs.t
	ver := version(sn.vseq, sn.vpos)
	// the end of every row's value after its image: {"before":null,"after":…,"source":…,"op":"r","ts_ms":…}
	src, err := connect.AppendJSON(nil, rs.src)
	if err != nil {
		return nil, fmt.Errorf("source block: %w", err)
	}
	tail := append(append([]byte(`,"source":`), src...), `,"op":"r","ts_ms":`...)
	tail = append(strconv.AppendInt(tail, sn.s.now().UnixMilli(), 10), '}')
	cv.rj.use(t)
	for r := 0; r < rs.n; r++ {
		row := rs.row(r)
		// the value, then the key, rendered straight into the boxer's slab
		buf, err := cv.rj.appendImage(append(cv.bx.room(cv.rowHint), `{"before":null,"after":`...), row, opts, &cv.bx)
		if err == nil {
			buf = append(buf, tail...)
		}
		end := len(buf)
		if err == nil && len(t.key) > 0 {
			buf, err = cv.rj.appendKey(buf, row, opts, &cv.bx)
		}
		if err != nil {
			return nil, err
		}
		cv.bx.cut(buf)
		cv.rowHint = min(max(cv.rowHint, 2*len(buf)), maxRowHint)
		var key any
		if len(t.key) > 0 {
			key = cv.bx.rawAt(buf[end:])
		}
		recs = append(recs, connect.Record{
			Topic: t.topic, Partition: -1, Offset: -1, Timestamp: sn.started,
			Key: key, Value: cv.bx.rawAt(buf[:end]),
			Version: ver, Position: cv.position(rs, row, rs.rows0+int64(r)+1, r == rs.n-1),
		})
	}
	return recs, nil
}

// rows appends the records of a row set to recs with Rows for keys and values, which a
// connector's transforms read without parsing.
func (cv *converter) rows(rs *rowSet, recs []connect.Record) ([]connect.Record, error) {
	sn := cv.sn
	opts, t := &sn.s.opts, rs.t
	ver := version(sn.vseq, sn.vpos)
	nowMs := cv.bx.int(sn.s.now().UnixMilli())
	nk := len(t.key)
	nkf := nk // key fields of the block
	if t.keyPrefix {
		nkf = 0 // the key shares the image's fields
	}
	for r := 0; r < rs.n; r++ {
		row := rs.row(r)
		blk := cv.fields.newBlock(0, t.nOut, nkf)
		for i := range t.cols {
			c := &t.cols[i]
			if c.excluded {
				continue
			}
			v, err := c.snapshotValue(&row[i], opts, &cv.bx)
			if err != nil {
				return nil, err
			}
			if c.mask != nil {
				v = c.mask(v)
			}
			blk.after[c.out] = connect.Field{Name: c.name, Value: v}
		}
		var key any
		switch {
		case nk > 0 && t.keyPrefix:
			key = cv.bx.row(blk.after[:nk:nk])
		case nk > 0:
			for j, i := range t.key {
				c := &t.cols[i]
				if !c.excluded && c.mask == nil {
					blk.key[j] = blk.after[c.out]
					continue
				}
				v, err := c.snapshotValue(&row[i], opts, &cv.bx)
				if err != nil {
					return nil, fmt.Errorf("key: %w", err)
				}
				blk.key[j] = connect.Field{Name: c.name, Value: v}
			}
			key = cv.bx.row(blk.key)
		}
		recs = append(recs, connect.Record{
			Topic: t.topic, Partition: -1, Offset: -1, Timestamp: sn.started,
			Key: key, Value: blk.envelope(&cv.bx, nil, blk.after, rs.src, connect.OpRead, nowMs),
			Version: ver, Position: cv.position(rs, row, rs.rows0+int64(r)+1, r == rs.n-1),
		})
	}
	return recs, nil
}

// position is the position right after a row, the rows-th of its table. Only the batch's
// last record, whose Position becomes the batch's, gets a State (connect.Position: the runtime
// resumes only from a batch's).
func (cv *converter) position(rs *rowSet, row []cell, rows int64, withState bool) connect.Position {
	sn, t := cv.sn, rs.t
	cv.keyJSON = cv.keyJSON[:0]
	if rs.mode != keyless && withState {
		for j, i := range t.order {
			if j > 0 {
				cv.keyJSON = append(cv.keyJSON, ',')
			}
			cv.keyJSON = append(cv.keyJSON, '"')
			cv.keyJSON = appendKeyArg(cv.keyJSON, &row[i])
			cv.keyJSON = append(cv.keyJSON, '"')
		}
	}
	a := &cv.arena
	a.reserve(96 + len(cv.keyJSON) + 24*len(t.order))
	start := len(a.buf)
	a.buf = binary.BigEndian.AppendUint32(a.buf, sn.epoch)
	a.buf = append(a.buf, phaseSnapshot)
	a.buf = binary.BigEndian.AppendUint32(a.buf, uint32(rs.ti))
	if rs.mode == keyEncodable {
		a.buf = append(a.buf, 0x01)
		for _, i := range t.order {
			a.buf = appendKeyValue(a.buf, t.cols[i].kind, &row[i])
		}
	} else {
		a.buf = append(a.buf, 0x02)
		a.buf = binary.BigEndian.AppendUint32(a.buf, rs.run)
		a.buf = binary.BigEndian.AppendUint64(a.buf, uint64(rows))
	}
	order := a.cut(start)
	if !withState {
		return connect.Position{Order: order}
	}
	start = len(a.buf)
	a.buf = appendSnapState(a.buf, sn.epoch, rs.ti, cv.keyJSON, rows, rs.run)
	return connect.Position{Order: order, State: a.cut(start)}
}

// truncateRecord is the op "t" event that starts a table of a re-snapshot. Its Order sorts
// before the table's rows (0x00 after the table index).
func (cv *converter) truncateRecord(rs *rowSet) connect.Record {
	sn, t := cv.sn, rs.t
	s := sn.s
	var order []byte
	order = binary.BigEndian.AppendUint32(order, sn.epoch)
	order = append(order, phaseSnapshot)
	order = binary.BigEndian.AppendUint32(order, uint32(rs.ti))
	order = append(order, 0x00)
	src := s.sourceBlock(sn.started.UnixMilli(), "true", t.db, t.name, 0, nil, sn.vfile, sn.vpos, 0, nil)
	ev := connect.ChangeEvent{Source: src, Op: connect.OpTruncate, TsMs: s.now().UnixMilli()}
	return connect.Record{Topic: t.topic, Partition: -1, Offset: -1, Timestamp: sn.started, Value: ev.Row(),
		Version: version(sn.vseq, sn.vpos), Position: connect.Position{Order: order, State: appendSnapState(nil, sn.epoch, rs.ti, nil, rs.rows0, rs.run)}}
}
