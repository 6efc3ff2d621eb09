package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// The snapshot reads every captured table inside one REPEATABLE READ transaction: the one
// that imported the snapshot the slot exported when it was created, so the snapshot holds
// exactly the transactions committed before the slot's consistent point, and the stream
// starts there. Tables are read one after the other, in (schema, name) order, each in chunks
// of snapshot.fetch.size rows in key order:
//
//	SELECT <columns> FROM t WHERE (k1, k2) > ($1, $2) ORDER BY k1, k2 LIMIT n
//
// (the primary key, else the replica identity index, else ctid), so no table is ever held in
// memory and every row's position names the key after which the next chunk starts.
//
// After a crash the exported snapshot is gone. The snapshot then goes on after the stored
// key in a new transaction, and the stream still starts at the slot's consistent point: the
// rows read later may be newer than that point, and the stream replays every change since
// then on top of them, so the derived state ends up equal to the tables (each row is read
// once; each change is streamed once).
//
// The chunk reader (chunkQuery, the key handling) depends only on a connection and a table
// description. The incremental snapshot (incremental.go) builds queries of its own.

// snapshotter is the state of a running snapshot.
type snapshotter struct {
	s       *Source
	lsn     pglogrepl.LSN // where the stream starts; the version of the rows
	started time.Time
	tables  []tableRef
	next    int    // index in tables of the table being read
	index   uint32 // its index in snapshot order (the position's table_index)
	cur     *snapTable
	rr      *pgconn.ResultReader
	held    *connect.Record // the last row read, held back until it is known whether it is the last
	// marks hold what the position states of the last two rows read need (marks[last] is the
	// held row's): a row's State is built only when a batch ends at it, the row before the
	// held one, so that rows carry only their Order.
	marks  [2]rowMark
	last   int
	inTx   bool
	resume *snapshotPos
	// qctx bounds the chunk queries, whose rows are read over several Read calls; a Read
	// whose own context ends while it waits for rows cancels it.
	qctx   context.Context
	cancel context.CancelFunc

	// pool holds the slab chunks of released batches; heldGen is the generation of the held
	// row (see release)
	pool    connect.SlabPool
	heldGen *slabGen
	recs    recordsPool
	rowHint int // room for a row's rendering: twice the largest so far, at most maxRowHint
}

// maxRowHint bounds the room a row's rendering gets in the slab: a larger row outgrows it into
// memory of its own (so one huge row does not make every later row take a chunk of its size).
const maxRowHint = 8 << 10

// slabGen is the slab chunks and the record slice of one snapshot batch. They go back to the
// pool once the batch is released and, if the batch's last row was held back, the next batch,
// which carries that row, too.
type slabGen struct {
	sn     *snapshotter
	chunks *connect.SlabChunks
	recs   []connect.Record
	refs   atomic.Int32
}

func (g *slabGen) unref() {
	if g != nil && g.refs.Add(-1) == 0 {
		g.sn.pool.Put(g.chunks)
		g.sn.recs.put(g.recs)
	}
}

// release ends the slab generation of the batch of recs (held: its last row is held back for
// the next batch) and returns the batch's Release.
func (sn *snapshotter) release(recs []connect.Record, held bool) func() {
	g := &slabGen{sn: sn, chunks: sn.s.slab.Detach(), recs: recs}
	g.refs.Store(1)
	if held {
		g.refs.Store(2)
	}
	prev := sn.heldGen
	sn.heldGen = nil
	if held {
		sn.heldGen = g
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			g.unref()
			prev.unref()
		})
	}
}

// recordsPool keeps a few record slices of released batches.
type recordsPool struct {
	mu   sync.Mutex
	free [][]connect.Record
}

func (p *recordsPool) get(n int) []connect.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := len(p.free); k > 0 && cap(p.free[k-1]) >= n {
		r := p.free[k-1]
		p.free = p.free[:k-1]
		return r[:0]
	}
	return make([]connect.Record, 0, n)
}

func (p *recordsPool) put(r []connect.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r != nil && len(p.free) < 8 {
		p.free = append(p.free, r[:0])
	}
}

// rowMark is what the position state after a snapshot row needs, in reused memory.
type rowMark struct {
	prefix  []byte // its table's snapshotStatePrefix
	rows    uint64
	attempt uint32
	keyBuf  []byte
	key     [][]byte // into keyBuf
}

// mark notes the row just read as the last one.
func (sn *snapshotter) mark(cur *snapTable) {
	sn.last ^= 1
	m := &sn.marks[sn.last]
	m.prefix, m.rows, m.attempt = cur.statePrefix, cur.rows, cur.attempt
	m.keyBuf, m.key = m.keyBuf[:0], m.key[:0]
	for _, k := range cur.lastKey {
		start := len(m.keyBuf)
		m.keyBuf = append(m.keyBuf, k...)
		m.key = append(m.key, m.keyBuf[start:len(m.keyBuf):len(m.keyBuf)])
	}
}

// stateBeforeLast is the position state after the row read before the last one.
func (sn *snapshotter) stateBeforeLast() []byte {
	m := &sn.marks[sn.last^1]
	return snapshotState(m.prefix, m.rows, m.key, m.attempt)
}

// snapTable is the table being read.
type snapTable struct {
	ref       tableRef
	t         *table
	chunk     chunkQuery
	rows      uint64
	lastKey   [][]byte // text of the chunk key of the last row read; nil before the first
	chunkRows int
	enc       []keyEncoder // the chunk key's order-preserving encoders; nil: counter Orders
	attempt   uint32

	statePrefix []byte // of the rows' position states
	source      any    // the source block (a connect.Row), the same for every row of the table
	sourceJSON  []byte // source, rendered
	tail        []byte // the end of a row's value after its image: source, op, ts_ms (tailMs)
	tailMs      int64
	keyBuf      []byte // holds lastKey's bytes
	orderBuf    []byte
}

// chunkQuery reads a table in key order, one chunk at a time.
type chunkQuery struct {
	first   string   // the first chunk
	next    string   // the chunks after a key
	keyCols []int    // positions of the chunk key in the select list
	keyOIDs []uint32 // their types, for the parameters
	ncols   int      // columns of the row image at the start of the select list
	nsel    int      // columns of the select list
	// formats is the result format of each column of the select list; nil: all text
	formats []int16
}

// binaryTimestamptz makes the chunk queries return the row image's timestamptz columns (those
// table.decode formats itself) in binary form, unless they are in the chunk key, whose text
// the next chunk's query takes: the server then skips formatting them as text, a large part
// of its work per row of such a table (table.decodeBinary formats them instead).
func (q *chunkQuery) binaryTimestamptz(t *table) {
	for i := 0; i < q.ncols && i < len(t.cols); i++ {
		if t.cols[i].fast != fastTimestamptz || slices.Contains(q.keyCols, i) {
			continue
		}
		if q.formats == nil {
			q.formats = make([]int16, q.nsel) // pgtype.TextFormatCode is 0
		}
		q.formats[i] = pgtype.BinaryFormatCode
	}
}

// checkBinary verifies that the columns read in binary form are still timestamptz columns
// (their type changed since the table's columns were read: the snapshot cannot go on).
func (q *chunkQuery) checkBinary(fds []pgconn.FieldDescription) error {
	for i, f := range q.formats {
		if f != pgtype.BinaryFormatCode {
			continue
		}
		if i >= len(fds) || fds[i].DataTypeOID != pgtype.TimestamptzOID || fds[i].Format != pgtype.BinaryFormatCode {
			return fmt.Errorf("column %d of the chunk query is no longer a timestamptz in binary form; the table's type changed during the snapshot: restart the connector to read it again", i+1)
		}
	}
	return nil
}

// binary reports whether column i of the select list comes in binary form.
func (q *chunkQuery) binary(i int) bool {
	return q.formats != nil && q.formats[i] == pgtype.BinaryFormatCode
}

// newChunkQuery builds the chunk queries of a table whose row image has the given columns.
// keyNames is the chunk key (primary key or replica identity index); nil reads in ctid order.
func newChunkQuery(schema, name string, cols []colDef, keyNames []string, keyTypes map[string]uint32, limit int) chunkQuery {
	q := chunkQuery{ncols: len(cols)}
	sel := make([]string, 0, len(cols)+len(keyNames)+1)
	for _, c := range cols {
		sel = append(sel, quoteIdent(c.Name))
	}
	var order []string
	if keyNames == nil {
		sel = append(sel, "ctid")
		q.keyCols = []int{len(sel) - 1}
		q.keyOIDs = []uint32{pgtype.TIDOID}
		order = []string{"ctid"}
	} else {
		for _, k := range keyNames {
			i := -1
			for j, c := range cols {
				if c.Name == k {
					i = j
					break
				}
			}
			if i < 0 {
				sel = append(sel, quoteIdent(k))
				i = len(sel) - 1
			}
			q.keyCols = append(q.keyCols, i)
			q.keyOIDs = append(q.keyOIDs, keyTypes[k])
			order = append(order, quoteIdent(k))
		}
	}
	q.nsel = len(sel)
	from := " FROM " + qualified(schema, name)
	orderBy := " ORDER BY " + strings.Join(order, ", ") + " LIMIT " + strconv.Itoa(limit)
	q.first = "SELECT " + strings.Join(sel, ", ") + from + orderBy
	params := make([]string, len(order))
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	q.next = "SELECT " + strings.Join(sel, ", ") + from +
		" WHERE (" + strings.Join(order, ", ") + ") > (" + strings.Join(params, ", ") + ")" + orderBy
	return q
}

// start runs the chunk after lastKey (the first chunk when nil); the rows come in text form,
// except the columns binaryTimestamptz chose.
func (q *chunkQuery) start(ctx context.Context, c *pgconn.PgConn, lastKey [][]byte) *pgconn.ResultReader {
	formats := q.formats
	if formats == nil {
		formats = []int16{pgtype.TextFormatCode}
	}
	if lastKey == nil {
		return c.ExecParams(ctx, q.first, nil, nil, nil, formats)
	}
	return c.ExecParams(ctx, q.next, lastKey, q.keyOIDs, nil, formats)
}

// openSnapshot begins the snapshot transaction on the catalog connection.
func (s *Source) openSnapshot(ctx context.Context, lsn pglogrepl.LSN, resume *snapshotPos, exported string) (*snapshotter, error) {
	sn := &snapshotter{s: s, lsn: lsn, started: s.now(), resume: resume}
	sn.qctx, sn.cancel = context.WithCancel(context.Background())
	if _, err := s.cat.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"); err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	sn.inTx = true
	if exported != "" {
		if _, err := s.cat.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(exported)); err != nil {
			sn.close(ctx)
			return nil, fmt.Errorf("import snapshot %s: %w", exported, err)
		}
	}
	if lsn == 0 {
		// initial_only: no slot; the rows carry the WAL position of the snapshot
		if resume != nil {
			sn.lsn = resume.LSN
		} else if err := s.cat.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&sn.lsn); err != nil {
			sn.close(ctx)
			return nil, fmt.Errorf("snapshot wal position: %w", err)
		}
	}
	tables, err := capturedTables(ctx, s.cat, &s.set.filter)
	if err != nil {
		sn.close(ctx)
		return nil, err
	}
	if resume != nil {
		// go on with the stored table, or the first after it if it is gone
		sn.index = resume.TableIndex
		for len(tables) > 0 && (tables[0].Schema < resume.Schema || tables[0].Schema == resume.Schema && tables[0].Name < resume.Table) {
			tables = tables[1:]
		}
		if len(tables) == 0 || tables[0].Schema != resume.Schema || tables[0].Name != resume.Table {
			sn.index++
			sn.resume = nil
		}
	}
	sn.tables = tables
	s.log.Info("snapshot started", "tables", len(tables), "lsn", sn.lsn, "resumed", resume != nil)
	return sn, nil
}

// close ends the snapshot transaction.
func (sn *snapshotter) close(ctx context.Context) {
	if sn.rr != nil {
		_, _ = sn.rr.Close()
		sn.rr = nil
	}
	if sn.inTx && sn.s.cat != nil && !sn.s.cat.IsClosed() {
		_, _ = sn.s.cat.Exec(ctx, "ROLLBACK")
	}
	sn.inTx = false
	sn.cancel()
}

// openTable prepares the next table: its columns, keys and decoders.
func (sn *snapshotter) openTable(ctx context.Context) error {
	s := sn.s
	ref := sn.tables[sn.next]
	defs, err := tableColumns(ctx, s.cat, ref.OID, s.set.publication)
	if err != nil {
		return err
	}
	keyNames, err := keyColumns(ctx, s.cat, ref.OID)
	if err != nil {
		return err
	}
	t, err := s.newTable(ctx, ref.OID, ref.Schema, ref.Name, defs, keyNames)
	if err != nil {
		return err
	}
	keyTypes := map[string]uint32{}
	collations := map[string]string{}
	if keyNames != nil {
		rows, err := s.cat.Query(ctx, `
SELECT a.attname, a.atttypid,
       CASE WHEN a.attcollation = 0 THEN ''
            WHEN co.collname = 'default' THEN (SELECT datcollate::text FROM pg_database WHERE datname = current_database())
            ELSE co.collname::text END
FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation
WHERE a.attrelid = $1 AND a.attname = ANY ($2)`, ref.OID, keyNames)
		if err != nil {
			return fmt.Errorf("key types of %s: %w", ref, err)
		}
		for rows.Next() {
			var n, coll string
			var oid uint32
			if err := rows.Scan(&n, &oid, &coll); err != nil {
				rows.Close()
				return fmt.Errorf("key types of %s: %w", ref, err)
			}
			keyTypes[n], collations[n] = oid, coll
		}
		rows.Close()
	}
	st := &snapTable{ref: ref, t: t, chunk: newChunkQuery(ref.Schema, ref.Name, defs, keyNames, keyTypes, s.set.fetchSize)}
	st.chunk.binaryTimestamptz(t)
	// the key form of the Order when every chunk key column can be encoded
	if keyNames == nil {
		st.enc = []keyEncoder{encodeTIDKey}
	} else {
		for _, k := range keyNames {
			e := keyEncoderFor(s.types.m, keyTypes[k], collations[k])
			if e == nil {
				st.enc = nil
				s.log.Info("snapshot rows of the table are numbered: a crash while it is read repeats the rows in flight",
					"table", ref.String(), "key_column", k)
				break
			}
			st.enc = append(st.enc, e)
		}
	}
	st.statePrefix = snapshotStatePrefix(s.epoch, sn.lsn, ref.Schema, ref.Name, sn.index)
	st.source = s.sourceRow(t, sn.started.UnixMilli(), "true", nil, nil, int64(sn.lsn))
	src, err := connect.AppendJSON(nil, st.source)
	if err != nil {
		return fmt.Errorf("snapshot of %s: source block: %w", ref, err)
	}
	st.sourceJSON = src
	if r := sn.resume; r != nil && r.Schema == ref.Schema && r.Table == ref.Name {
		st.rows = r.Rows
		st.attempt = r.Attempt
		if r.Key != nil {
			st.lastKey = make([][]byte, len(r.Key))
			for i, k := range r.Key {
				st.lastKey[i] = []byte(k)
			}
			if st.enc == nil {
				// a new attempt: its rows sort after everything the last one may have
				// appended beyond the stored position
				st.attempt++
			}
		}
		sn.resume = nil
	}
	sn.cur = st
	return nil
}

// readSnapshot returns the next batch of snapshot rows. The last row read is held back until
// the next one is known, so that the snapshot's very last row is marked "last".
func (s *Source) readSnapshot(ctx context.Context) (connect.Batch, error) {
	sn := s.snap
	recs := sn.recs.get(s.set.maxBatch + 1)
	if sn.held != nil {
		recs = append(recs, *sn.held)
		sn.held = nil
	}
	stop := context.AfterFunc(ctx, sn.cancel)
	defer stop()
	finished := false
	for len(recs) <= s.set.maxBatch && !finished {
		if err := ctx.Err(); err != nil {
			return connect.Batch{}, err
		}
		if sn.cur == nil {
			if sn.next >= len(sn.tables) {
				finished = true
				break
			}
			if err := sn.openTable(ctx); err != nil {
				return connect.Batch{}, err
			}
		}
		cur := sn.cur
		if sn.rr == nil {
			sn.rr = cur.chunk.start(sn.qctx, s.cat.PgConn(), cur.lastKey)
			cur.chunkRows = 0
		}
		if sn.rr.NextRow() {
			rec, err := sn.row(cur, sn.rr.Values())
			if err != nil {
				return connect.Batch{}, err
			}
			recs = append(recs, rec)
			continue
		}
		_, err := sn.rr.Close()
		sn.rr = nil
		if err != nil {
			return connect.Batch{}, fmt.Errorf("snapshot of %s: %w", cur.ref, err)
		}
		s.st.addRows(cur.ref.String(), int64(cur.chunkRows))
		if cur.chunkRows < s.set.fetchSize {
			s.log.Info("snapshot of table done", "table", cur.ref.String(), "rows", cur.rows)
			sn.cur = nil
			sn.next++
			sn.index++
		}
	}
	if !finished {
		if len(recs) == 0 {
			return connect.Batch{}, fmt.Errorf("snapshot: no progress")
		}
		last := recs[len(recs)-1]
		sn.held = &last
		recs = recs[:len(recs)-1]
		// the batch ends at the row read before the held one
		pos := recs[len(recs)-1].Position
		return connect.Batch{Records: recs, Position: connect.Position{Order: pos.Order, State: withIncr(sn.stateBeforeLast(), s.incr.State())},
			Release: sn.release(recs, true)}, nil
	}
	b, err := s.finishSnapshot(ctx, recs)
	if err == nil {
		b.Release = sn.release(recs, false)
	}
	return b, err
}

// row builds the record of one snapshot row.
func (sn *snapshotter) row(cur *snapTable, vals [][]byte) (connect.Record, error) {
	s := sn.s
	t := cur.t
	if len(vals) < cur.chunk.ncols {
		return connect.Record{}, fmt.Errorf("snapshot of %s: a row of %d columns, want %d", cur.ref, len(vals), cur.chunk.ncols)
	}
	if cur.chunkRows == 0 && cur.chunk.formats != nil && sn.rr != nil {
		if err := cur.chunk.checkBinary(sn.rr.FieldDescriptions()); err != nil {
			return connect.Record{}, connect.Permanent(fmt.Errorf("snapshot of %s: %w", cur.ref, err))
		}
	}
	get := func(i int) (byte, []byte) {
		if vals[i] == nil {
			return kindNull, nil
		}
		if cur.chunk.binary(i) {
			return kindBinary, vals[i]
		}
		return kindText, vals[i]
	}
	var buf []byte
	var end int
	var err error
	if s.env.RawJSON {
		if buf, end, err = sn.render(cur, get); err != nil {
			return connect.Record{}, err
		}
	} else if err = t.decode(get); err != nil {
		return connect.Record{}, err
	}
	// the chunk key, kept (in reused buffers) for the next chunk's query
	cur.keyBuf = cur.keyBuf[:0]
	cur.lastKey = cur.lastKey[:0]
	for _, i := range cur.chunk.keyCols {
		start := len(cur.keyBuf)
		cur.keyBuf = append(cur.keyBuf, vals[i]...)
		cur.lastKey = append(cur.lastKey, cur.keyBuf[start:len(cur.keyBuf):len(cur.keyBuf)])
	}
	var order []byte
	if cur.enc != nil {
		order = cur.orderBuf[:0]
		for j, i := range cur.chunk.keyCols {
			if order, err = cur.enc[j](order, vals[i]); err != nil {
				return connect.Record{}, connect.Permanent(fmt.Errorf("snapshot of %s: %w", cur.ref, err))
			}
		}
		cur.orderBuf = order
	}
	cur.rows++
	cur.chunkRows++
	pos := connect.Position{Order: snapshotOrder(&s.posSlab, s.epoch, sn.index, order, cur.attempt, cur.rows)}
	sn.mark(cur)
	s.st.events.Add(1)
	if !s.env.RawJSON {
		// Rows, for the connector's transforms
		after, _, key := t.imageKey()
		return s.record(t, &event{op: connect.OpRead, after: after, key: key, commit: sn.started, version: sn.lsn,
			source: cur.source, pos: pos}), nil
	}
	r := connect.Record{Topic: t.topic, Partition: -1, Offset: -1, Timestamp: sn.started, Version: int64(sn.lsn), Position: pos}
	if t.key != nil {
		r.Key = s.slab.RawJSON(buf[end:])
	}
	r.Value = s.slab.RawJSON(buf[:end])
	return r, nil
}

// render renders a snapshot row's value and then its key as JSON straight into the slab (see
// render.go), returning both and where the value ends. It is how rows are made when the
// runtime stores them as they are (connect.Env.RawJSON).
func (sn *snapshotter) render(cur *snapTable, get func(i int) (byte, []byte)) ([]byte, int, error) {
	s, t := sn.s, cur.t
	// the envelope ChangeEvent.Row renders: {"before":null,"after":…,"source":…,"op":"r","ts_ms":…}
	if now := s.nowMs.(int64); cur.tail == nil || cur.tailMs != now {
		cur.tail = append(append(cur.tail[:0], `,"source":`...), cur.sourceJSON...)
		cur.tail = strconv.AppendInt(append(cur.tail, `,"op":"r","ts_ms":`...), now, 10)
		cur.tail, cur.tailMs = append(cur.tail, '}'), now
	}
	buf, err := t.appendImage(append(s.slab.Room(sn.rowHint), envelopeHead...), get)
	if err != nil {
		return nil, 0, err
	}
	buf = append(buf, cur.tail...)
	end := len(buf)
	if t.key != nil {
		if buf, err = t.appendKey(buf, get); err != nil {
			return nil, 0, err
		}
	}
	s.slab.Cut(buf)
	sn.rowHint = min(max(sn.rowHint, 2*len(buf)), maxRowHint)
	return buf, end, nil
}

// envelopeHead starts a snapshot record's value (see snapshotter.row).
const envelopeHead = `{"before":null,"after":`

// finishSnapshot ends the snapshot: the last row is marked "last", the transaction ends and
// the batch carries the position where the stream starts.
func (s *Source) finishSnapshot(ctx context.Context, recs []connect.Record) (connect.Batch, error) {
	sn := s.snap
	if n := len(recs); n > 0 {
		snapshot.MarkLast(&recs[n-1])
	}
	if _, err := s.cat.Exec(ctx, "COMMIT"); err != nil {
		return connect.Batch{}, fmt.Errorf("end snapshot: %w", err)
	}
	sn.inTx = false
	s.snap = nil
	s.cur = position{Epoch: s.epoch, LSN: sn.lsn, End: sn.lsn}
	s.st.snapRun.Store(false)
	s.st.snapDone.Store(true)
	s.log.Info("snapshot done", "lsn", sn.lsn, "took", s.now().Sub(sn.started).Round(time.Millisecond))
	if s.set.snapshotMode == SnapshotInitialOnly {
		s.phase = phaseDone
	} else {
		s.phase = phaseStreaming // the stream connects on the next Read
	}
	return connect.Batch{Records: recs, Position: s.encodeCur()}, nil
}
