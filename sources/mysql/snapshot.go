package mysql

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/connect"
)

// The initial snapshot.
//
// One connection opens a REPEATABLE READ transaction WITH CONSISTENT SNAPSHOT and reads the
// binlog position that matches it: on MariaDB from the binlog_snapshot_file/_position status of
// the transaction itself, on MySQL under the global read lock. With snapshot.locking.mode=minimal
// the lock (FLUSH TABLES WITH READ LOCK) is held only while the position and the table
// definitions are read. The plan (tables, estimated rows, the position where streaming starts)
// is stored in env.Store before the first row.
//
// Tables are read one after the other in primary-key order, in chunks of snapshot.fetch.size
// rows (keyset pagination: WHERE key > last ORDER BY key LIMIT n), so no table is ever held in
// memory. Each row's Position records the key it was read up to, so a killed snapshot resumes
// in a new transaction right after the last row the log holds. Rows read by the new transaction
// reflect a later point than the first; streaming still starts at the plan's (first) point, so
// every change after it is replayed, and row versions keep sinks from going backwards.
//
// The chunk reading here is independent of the binlog; it is meant to move into the shared
// sources/snapshot package for incremental snapshots.

// snapPlan is what a snapshot decided at its start, stored under "snapshot/<epoch>".
type snapPlan struct {
	V      int      `json:"v"`
	Epoch  uint32   `json:"epoch"`
	File   string   `json:"file"` // streaming starts here once the snapshot is done
	Pos    uint32   `json:"pos"`
	GTIDs  string   `json:"gtids,omitempty"`
	Tables []string `json:"tables"`
	Totals []int64  `json:"totals"` // estimated rows per table (information_schema.TABLES)
}

const (
	keyless      = 0 // no usable key: OFFSET pages, restarted whole after a crash
	keyEncodable = 1 // integer / binary keys: Orders from the key
	keyOther     = 2 // other keys: keyset pages, Orders from run and row number
)

type snapshotter struct {
	s      *Source
	epoch  uint32
	resume *state

	plan    *snapPlan
	conn    *client.Conn
	vfile   string // this transaction's consistent point, the version of its rows
	vpos    uint32
	vseq    uint32
	started time.Time
	tables  []*table

	// the chunk reader (run), after open
	out    chan snapItem
	cancel context.CancelFunc
	wg     sync.WaitGroup
	err    error // the reader's error, returned by every later read

	// owned by the chunk reader
	ti       int
	after    []any    // key of the last row read: the arguments of the next chunk query
	keyJSON  []byte   // the same key rendered for States: "i:1","x:6b"
	keyVals  []keyVal // the same key, saved from the last row of a chunk
	rows     int64
	run      uint32
	stmt     *client.Stmt
	stmtKind int // 0: first chunk, 1: next chunks
	progress map[string][2]int64
	cur      []connect.Record   // batch being filled
	full     [][]connect.Record // full batches of the chunk being read
	held     []connect.Record   // the last batch read, held back until a later row exists
	fields   fieldArena
	bx       boxer
	arena    posArena
	srcFor   *table // the table whose shared source block is srcBox
	srcBox   any
}

// snapItem is one batch from the chunk reader to read, or its error.
type snapItem struct {
	recs []connect.Record
	done bool // the snapshot's last batch
	err  error
}

// keyVal is one key value of a result row, kept beyond the row's callback.
type keyVal struct {
	typ  gomysql.FieldValueType
	bits uint64 // signed, unsigned or float64 bits
	str  []byte
}

func newSnapshotter(s *Source, epoch uint32, resume *state) *snapshotter {
	return &snapshotter{s: s, epoch: epoch, resume: resume, progress: map[string][2]int64{}}
}

// open starts the snapshot transaction and, on the first run, makes and stores the plan.
func (sn *snapshotter) open(ctx context.Context) error {
	s := sn.s
	c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	sn.conn = c
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	locked := false
	if s.cfg.lockingMinimal {
		if _, err := c.Execute("FLUSH TABLES WITH READ LOCK"); err != nil {
			return fmt.Errorf("snapshot: global read lock: %w", err)
		}
		locked = true
	}
	unlock := func() error {
		if !locked {
			return nil
		}
		locked = false
		if _, err := c.Execute("UNLOCK TABLES"); err != nil {
			return fmt.Errorf("snapshot: unlock: %w", err)
		}
		return nil
	}
	defer unlock()
	if _, err := c.Execute("START TRANSACTION WITH CONSISTENT SNAPSHOT"); err != nil {
		return fmt.Errorf("snapshot: start transaction: %w", err)
	}
	sn.started = s.now()
	if s.flavor == gomysql.MariaDBFlavor {
		r, err := c.Execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
		if err != nil {
			return fmt.Errorf("snapshot: read consistent binlog position: %w", err)
		}
		for i := range r.Values {
			k, _ := r.GetString(i, 0)
			v, _ := r.GetString(i, 1)
			switch strings.ToLower(k) {
			case "binlog_snapshot_file":
				sn.vfile = v
			case "binlog_snapshot_position":
				p, _ := strconv.ParseUint(v, 10, 32)
				sn.vpos = uint32(p)
			}
		}
		if sn.vfile == "" {
			return connect.Permanentf("snapshot: the server reports no binlog_snapshot_file: the binlog is off")
		}
	} else {
		if sn.vfile, sn.vpos, err = s.binlogHead(c); err != nil {
			return err
		}
	}
	if sn.vseq, err = fileSeq(sn.vfile); err != nil {
		return connect.Permanent(err)
	}

	if sn.resume != nil {
		if sn.plan, err = s.history.plan(sn.epoch); err != nil {
			return err
		}
		if sn.plan == nil {
			return connect.Permanentf("snapshot: the plan of snapshot %d is missing from the connector's state store; reset the connector's offsets to start over", sn.epoch)
		}
	} else {
		plan := &snapPlan{V: 1, Epoch: sn.epoch, File: sn.vfile, Pos: sn.vpos}
		if s.flavor == gomysql.MariaDBFlavor {
			if r, err := c.Execute("SELECT BINLOG_GTID_POS(?, ?)", sn.vfile, sn.vpos); err == nil && len(r.Values) > 0 {
				plan.GTIDs, _ = r.GetString(0, 0)
			}
		} else if r, err := c.Execute("SELECT @@GLOBAL.gtid_executed"); err == nil && len(r.Values) > 0 {
			plan.GTIDs, _ = r.GetString(0, 0)
		}
		r, err := c.Execute(`SELECT TABLE_SCHEMA, TABLE_NAME, IFNULL(TABLE_ROWS, 0) FROM information_schema.TABLES
			WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME`)
		if err != nil {
			return fmt.Errorf("snapshot: list tables: %w", err)
		}
		for i := range r.Values {
			db, _ := r.GetString(i, 0)
			name, _ := r.GetString(i, 1)
			total, _ := r.GetInt(i, 2)
			if s.cfg.filter.table(db, name) {
				plan.Tables = append(plan.Tables, db+"."+name)
				plan.Totals = append(plan.Totals, total)
			}
		}
		if s.cfg.snapshotMode == SnapshotNoData {
			plan.Tables, plan.Totals = nil, nil
		}
		sn.plan = plan
	}
	for _, id := range sn.plan.Tables {
		db, name, _ := strings.Cut(id, ".")
		t, _, err := s.readTable(c, db, name)
		if err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		sn.tables = append(sn.tables, t) // nil when the table is gone since the plan was made
	}
	if err := unlock(); err != nil {
		return err
	}
	if sn.resume == nil {
		if err := s.history.putPlan(ctx, sn.plan); err != nil {
			return err
		}
	} else {
		sp := sn.resume.Snapshot
		sn.ti, sn.rows, sn.run = sp.Table, sp.Rows, sp.Run
		if sn.ti < len(sn.tables) && sn.tables[sn.ti] != nil {
			mode := keyMode(sn.tables[sn.ti])
			if len(sp.After) > 0 && mode != keyless {
				if sn.after, err = decodeKeyArgs(sp.After); err != nil {
					return connect.Permanentf("snapshot: stored position: %w", err)
				}
				for i, a := range sp.After {
					if i > 0 {
						sn.keyJSON = append(sn.keyJSON, ',')
					}
					sn.keyJSON = strconv.AppendQuote(sn.keyJSON, a)
				}
			} else {
				sn.rows = 0
			}
			if mode != keyEncodable {
				sn.run++
			}
		}
	}
	for i, id := range sn.plan.Tables {
		done := int64(0)
		if i < sn.ti {
			done = -1
		}
		sn.progress[id] = [2]int64{done, sn.plan.Totals[i]}
	}
	s.log.Info("snapshot started", "tables", len(sn.plan.Tables), "binlog", sn.vfile, "pos", sn.vpos, "resumed", sn.resume != nil)
	// the chunk reader hands over whole chunks and reads the next meanwhile
	sn.out = make(chan snapItem, s.cfg.fetchSize/s.cfg.maxBatch+2)
	rctx, cancel := context.WithCancel(context.Background())
	sn.cancel = cancel
	sn.wg.Add(1)
	go func() {
		defer sn.wg.Done()
		sn.runReader(rctx)
	}()
	return nil
}

// streamStart is where streaming begins once the snapshot is done.
func (sn *snapshotter) streamStart() *state {
	return &state{V: stateVersion, Epoch: sn.epoch, File: sn.plan.File, Pos: sn.plan.Pos}
}

func keyMode(t *table) int {
	if len(t.order) == 0 {
		return keyless
	}
	for _, i := range t.order {
		switch t.cols[i].kind {
		case kindInt, kindUint64, kindYear, kindBinary:
		default:
			return keyOther
		}
	}
	return keyEncodable
}

// close stops the chunk reader and closes the connection.
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
		sn.conn = nil
	}
}

// read returns the next batch of snapshot records; done is true once every table was read (the
// batch may still hold the last records).
func (sn *snapshotter) read(ctx context.Context) (connect.Batch, bool, error) {
	if sn.err != nil {
		return connect.Batch{}, false, sn.err
	}
	select {
	case it := <-sn.out:
		if it.err != nil {
			sn.err = it.err
			return connect.Batch{}, false, it.err
		}
		b := connect.Batch{Records: it.recs}
		if n := len(it.recs); n > 0 {
			b.Position = it.recs[n-1].Position
		}
		return b, it.done, nil
	case <-ctx.Done():
		return connect.Batch{}, false, ctx.Err()
	}
}

// runReader reads every remaining chunk and hands the records to read in batches. The last
// batch read is held back until a later row exists, so that the snapshot's last record can be
// marked "last" even when the tables after it are empty.
func (sn *snapshotter) runReader(ctx context.Context) {
	send := func(it snapItem) bool {
		select {
		case sn.out <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for sn.ti < len(sn.tables) {
		if err := sn.chunk(ctx); err != nil {
			send(snapItem{err: err})
			return
		}
		batches := sn.full
		if len(sn.cur) > 0 {
			batches = append(batches, sn.cur)
			sn.cur = nil
		}
		sn.full = nil
		if len(batches) == 0 {
			continue
		}
		if len(sn.held) > 0 && !send(snapItem{recs: sn.held}) {
			return
		}
		for _, b := range batches[:len(batches)-1] {
			if !send(snapItem{recs: b}) {
				return
			}
		}
		sn.held = batches[len(batches)-1]
	}
	if n := len(sn.held); n > 0 {
		markLast(&sn.held[n-1])
	}
	send(snapItem{recs: sn.held, done: true})
	sn.held = nil
}

// batch starts a batch unless one is being filled; call it before building a record, whose
// memory then comes from the batch's own generation of slabs (see fieldArena).
func (sn *snapshotter) batch() {
	if sn.cur == nil {
		sn.cur = make([]connect.Record, 0, sn.s.cfg.maxBatch)
		sn.fields.reset()
		sn.bx.reset()
	}
}

// add appends a record to the batch being filled.
func (sn *snapshotter) add(r connect.Record) {
	sn.batch()
	sn.cur = append(sn.cur, r)
	if len(sn.cur) == sn.s.cfg.maxBatch {
		sn.full = append(sn.full, sn.cur)
		sn.cur = nil
	}
}

// textKeys reports whether chunks of t are read with plain queries (the text protocol), with
// the key values of the last row written into the statement: tables without a key (OFFSET
// pages) and tables keyed by integers. Other keys are bound to a prepared statement.
func textKeys(t *table, mode int) bool {
	if mode == keyless {
		return true
	}
	for _, i := range t.order {
		switch t.cols[i].kind {
		case kindInt, kindUint64, kindYear:
		default:
			return false
		}
	}
	return true
}

// intArgs reports whether every argument is an integer (a stored position of a table whose key
// type changed since may hold others).
func intArgs(args []any) bool {
	for _, a := range args {
		switch a.(type) {
		case int, int64, uint64:
		default:
			return false
		}
	}
	return true
}

// chunk reads the next chunk of the current table into batches.
func (sn *snapshotter) chunk(ctx context.Context) error {
	s := sn.s
	t := sn.tables[sn.ti]
	id := sn.plan.Tables[sn.ti]
	if t == nil {
		sn.nextTable()
		return nil
	}
	mode := keyMode(t)
	limit := s.cfg.fetchSize
	first := len(sn.after) == 0 && (mode != keyless || sn.rows == 0)
	if first && sn.epoch > 0 {
		// a re-snapshot (the binlog was lost): rows deleted meanwhile have no delete event, so
		// the table starts over with a truncate event
		sn.add(sn.truncateRecord(t))
	}
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
	text := textKeys(t, mode) && intArgs(args)
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
				return fmt.Errorf("snapshot %s: prepare %q: %w", id, q, err)
			}
			sn.stmt, sn.stmtKind = st, kind
		}
	}
	stop := context.AfterFunc(ctx, func() { sn.conn.Close() })
	defer stop()

	if sn.srcFor != t {
		sn.srcFor = t
		sn.srcBox = s.sourceBlock(sn.started.UnixMilli(), "true", t.db, t.name, 0, nil, sn.vfile, sn.vpos, 0, nil)
	}
	rc := rowConverter{sn: sn, t: t, mode: mode, id: id, nowMs: s.now().UnixMilli(), version: version(sn.vseq, sn.vpos)}
	var res gomysql.Result
	var err error
	if text {
		err = sn.conn.ExecuteSelectStreaming(chunkQuery(t, mode, first, args), &res, rc.row, nil)
	} else {
		err = sn.stmt.ExecuteSelectStreaming(&res, rc.row, nil, args...)
	}
	if rc.err != nil {
		return rc.err
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("snapshot %s: read chunk: %w", id, err)
	}
	if mode != keyless && rc.got > 0 {
		sn.after = sn.after[:0]
		for _, kv := range sn.keyVals {
			sn.after = append(sn.after, kv.arg())
		}
	}
	s.stats.events.Add(int64(rc.got))
	sn.progress[id] = [2]int64{sn.rows, sn.plan.Totals[sn.ti]}
	if rc.got < limit {
		sn.nextTable()
	}
	p := make(map[string][2]int64, len(sn.progress))
	for k, v := range sn.progress {
		p[k] = v
	}
	s.stats.progress.Store(&p)
	return nil
}

// rowConverter turns the rows of one chunk into records.
type rowConverter struct {
	sn      *snapshotter
	t       *table
	mode    int
	id      string
	nowMs   any
	version int64
	got     int
	err     error
}

func (rc *rowConverter) row(row []gomysql.FieldValue) error {
	sn, t := rc.sn, rc.t
	opts := &sn.s.opts
	rc.got++
	sn.rows++
	sn.batch()
	nk := len(t.key)
	blk := sn.fields.newBlock(0, t.nOut, nk)
	for i := range t.cols {
		c := &t.cols[i]
		if c.excluded {
			continue
		}
		v, err := c.snapshotValue(&row[i], opts, &sn.bx)
		if err != nil {
			rc.err = fmt.Errorf("snapshot %s: %w", rc.id, err)
			return rc.err
		}
		if c.mask != nil {
			v = c.mask(v)
		}
		blk.after[c.out] = connect.Field{Name: c.name, Value: v}
	}
	var key any
	if nk > 0 {
		for j, i := range t.key {
			c := &t.cols[i]
			if !c.excluded && c.mask == nil {
				blk.key[j] = blk.after[c.out]
				continue
			}
			v, err := c.snapshotValue(&row[i], opts, &sn.bx)
			if err != nil {
				rc.err = fmt.Errorf("snapshot %s: key: %w", rc.id, err)
				return rc.err
			}
			blk.key[j] = connect.Field{Name: c.name, Value: v}
		}
		key = sn.bx.row(blk.key)
	}
	if rc.mode != keyless {
		sn.saveKey(t, row)
	}
	sn.add(connect.Record{
		Topic: t.topic, Partition: -1, Offset: -1, Timestamp: sn.started,
		Key: key, Value: blk.envelope(&sn.bx, nil, blk.after, sn.srcBox, connect.OpRead, rc.nowMs),
		Version: rc.version, Position: sn.position(t, rc.mode, row),
	})
	return nil
}

// saveKey keeps the key of a row beyond its callback: for the State of its position and the
// next chunk query.
func (sn *snapshotter) saveKey(t *table, row []gomysql.FieldValue) {
	if len(sn.keyVals) != len(t.order) {
		sn.keyVals = make([]keyVal, len(t.order))
	}
	sn.keyJSON = sn.keyJSON[:0]
	for j, i := range t.order {
		fv := &row[i]
		kv := &sn.keyVals[j]
		kv.typ = fv.Type
		switch fv.Type {
		case gomysql.FieldValueTypeSigned, gomysql.FieldValueTypeUnsigned:
			kv.bits = fv.AsUint64()
		case gomysql.FieldValueTypeFloat:
			kv.bits = math.Float64bits(fv.AsFloat64())
		case gomysql.FieldValueTypeString:
			kv.str = append(kv.str[:0], fv.AsString()...)
		}
		if j > 0 {
			sn.keyJSON = append(sn.keyJSON, ',')
		}
		sn.keyJSON = append(sn.keyJSON, '"')
		sn.keyJSON = appendKeyArg(sn.keyJSON, fv)
		sn.keyJSON = append(sn.keyJSON, '"')
	}
}

// arg converts a saved key value into a statement argument.
func (kv *keyVal) arg() any {
	switch kv.typ {
	case gomysql.FieldValueTypeSigned:
		return int64(kv.bits)
	case gomysql.FieldValueTypeUnsigned:
		return kv.bits
	case gomysql.FieldValueTypeFloat:
		return math.Float64frombits(kv.bits)
	case gomysql.FieldValueTypeString:
		return append([]byte(nil), kv.str...)
	}
	return nil
}

// position is the position right after the row just read.
func (sn *snapshotter) position(t *table, mode int, row []gomysql.FieldValue) connect.Position {
	a := &sn.arena
	a.reserve(64 + 2*len(sn.keyJSON) + 24*len(t.order))
	start := len(a.buf)
	a.buf = binary.BigEndian.AppendUint32(a.buf, sn.epoch)
	a.buf = append(a.buf, phaseSnapshot)
	a.buf = binary.BigEndian.AppendUint32(a.buf, uint32(sn.ti))
	if mode == keyEncodable {
		a.buf = append(a.buf, 0x01)
		for _, i := range t.order {
			a.buf = appendKeyValue(a.buf, t.cols[i].kind, &row[i])
		}
	} else {
		a.buf = append(a.buf, 0x02)
		a.buf = binary.BigEndian.AppendUint32(a.buf, sn.run)
		a.buf = binary.BigEndian.AppendUint64(a.buf, uint64(sn.rows))
	}
	order := a.cut(start)
	start = len(a.buf)
	a.buf = sn.appendState(a.buf)
	return connect.Position{Order: order, State: a.cut(start)}
}

// truncateRecord is the op "t" event that starts a table of a re-snapshot. Its Order sorts
// before the table's rows (0x00 after the table index).
func (sn *snapshotter) truncateRecord(t *table) connect.Record {
	s := sn.s
	var order []byte
	order = binary.BigEndian.AppendUint32(order, sn.epoch)
	order = append(order, phaseSnapshot)
	order = binary.BigEndian.AppendUint32(order, uint32(sn.ti))
	order = append(order, 0x00)
	src := s.sourceBlock(sn.started.UnixMilli(), "true", t.db, t.name, 0, nil, sn.vfile, sn.vpos, 0, nil)
	ev := connect.ChangeEvent{Source: src, Op: connect.OpTruncate, TsMs: s.now().UnixMilli()}
	return connect.Record{Topic: t.topic, Partition: -1, Offset: -1, Timestamp: sn.started, Value: ev.Row(),
		Version: version(sn.vseq, sn.vpos), Position: connect.Position{Order: order, State: sn.appendState(nil)}}
}

// markLast sets source.snapshot of the snapshot's last record to "last", on a copy of the source
// block the record shares with the others of its table.
func markLast(rec *connect.Record) {
	env, ok := rec.Value.(connect.Row)
	if !ok {
		return
	}
	i := env.Index(connect.FieldSource)
	src, ok := env[i].Value.(connect.Row)
	if i < 0 || !ok {
		return
	}
	own := src.Clone()
	own[own.Index("snapshot")].Value = "last"
	env[i].Value = own
}

func (sn *snapshotter) nextTable() {
	sn.ti++
	sn.after, sn.keyJSON, sn.keyVals, sn.rows, sn.run = nil, nil, nil, 0, 0
	if sn.stmt != nil {
		sn.stmt.Close()
		sn.stmt = nil
	}
}

// appendState appends the State of the position right after the row just read.
func (sn *snapshotter) appendState(dst []byte) []byte {
	dst = append(dst, `{"v":1,"epoch":`...)
	dst = strconv.AppendUint(dst, uint64(sn.epoch), 10)
	dst = append(dst, `,"snapshot":{"table":`...)
	dst = strconv.AppendInt(dst, int64(sn.ti), 10)
	if len(sn.keyJSON) > 0 {
		dst = append(dst, `,"after":[`...)
		dst = append(dst, sn.keyJSON...)
		dst = append(dst, ']')
	}
	dst = append(dst, `,"rows":`...)
	dst = strconv.AppendInt(dst, sn.rows, 10)
	if sn.run > 0 {
		dst = append(dst, `,"run":`...)
		dst = strconv.AppendUint(dst, uint64(sn.run), 10)
	}
	return append(dst, "}}"...)
}

// chunkQuery builds the statement that reads one chunk of t. With args nil it has a ? for each
// argument (a prepared statement); otherwise the arguments, integers, are written into it.
func chunkQuery(t *table, mode int, first bool, args []any) string {
	var b strings.Builder
	arg := func() {
		if args == nil {
			b.WriteString("?")
			return
		}
		switch v := args[0].(type) {
		case int:
			b.WriteString(strconv.Itoa(v))
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case uint64:
			b.WriteString(strconv.FormatUint(v, 10))
		default:
			panic(fmt.Sprintf("chunk query argument of type %T", v)) // textKeys admits integers only
		}
		args = args[1:]
	}
	b.WriteString("SELECT ")
	for i := range t.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteName(t.cols[i].name))
	}
	b.WriteString(" FROM ")
	b.WriteString(quoteName(t.db) + "." + quoteName(t.name))
	if mode == keyless {
		b.WriteString(" LIMIT ")
		arg()
		b.WriteString(" OFFSET ")
		arg()
		return b.String()
	}
	if !first {
		// (k1 > ?) OR (k1 = ? AND k2 > ?) OR ...: a range on the key that both servers can use
		b.WriteString(" WHERE ")
		for i := range t.order {
			if i > 0 {
				b.WriteString(" OR ")
			}
			b.WriteString("(")
			for j := 0; j <= i; j++ {
				if j > 0 {
					b.WriteString(" AND ")
				}
				b.WriteString(quoteName(t.cols[t.order[j]].name))
				if j < i {
					b.WriteString(" = ")
				} else {
					b.WriteString(" > ")
				}
				arg()
			}
			b.WriteString(")")
		}
	}
	b.WriteString(" ORDER BY ")
	for i, k := range t.order {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteName(t.cols[k].name))
	}
	b.WriteString(" LIMIT ")
	arg()
	return b.String()
}

// appendKeyArg renders a key value for the stored position: i:, u:, f: or x: (hex bytes).
func appendKeyArg(dst []byte, fv *gomysql.FieldValue) []byte {
	switch fv.Type {
	case gomysql.FieldValueTypeSigned:
		return strconv.AppendInt(append(dst, "i:"...), fv.AsInt64(), 10)
	case gomysql.FieldValueTypeUnsigned:
		return strconv.AppendUint(append(dst, "u:"...), fv.AsUint64(), 10)
	case gomysql.FieldValueTypeFloat:
		return strconv.AppendFloat(append(dst, "f:"...), fv.AsFloat64(), 'g', -1, 64)
	case gomysql.FieldValueTypeString:
		return hex.AppendEncode(append(dst, "x:"...), fv.AsString())
	}
	return append(dst, "n:"...)
}

func decodeKeyArgs(enc []string) ([]any, error) {
	out := make([]any, len(enc))
	for i, e := range enc {
		tag, v, ok := strings.Cut(e, ":")
		if !ok {
			return nil, fmt.Errorf("malformed key value %q", e)
		}
		var err error
		switch tag {
		case "i":
			out[i], err = strconv.ParseInt(v, 10, 64)
		case "u":
			out[i], err = strconv.ParseUint(v, 10, 64)
		case "f":
			out[i], err = strconv.ParseFloat(v, 64)
		case "x":
			out[i], err = hex.DecodeString(v)
		default:
			err = fmt.Errorf("unknown tag")
		}
		if err != nil {
			return nil, fmt.Errorf("malformed key value %q: %v", e, err)
		}
	}
	return out, nil
}

// appendKeyValue appends the order-preserving encoding of one key value.
func appendKeyValue(dst []byte, k kind, fv *gomysql.FieldValue) []byte {
	switch fv.Type {
	case gomysql.FieldValueTypeSigned:
		return appendKeyInt(dst, fv.AsInt64())
	case gomysql.FieldValueTypeUnsigned:
		if k == kindUint64 {
			return binary.BigEndian.AppendUint64(dst, fv.AsUint64())
		}
		return appendKeyInt(dst, int64(fv.AsUint64()))
	case gomysql.FieldValueTypeString:
		return appendKeyBytes(dst, fv.AsString())
	}
	return dst
}
