package mysql

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
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

	plan     *snapPlan
	conn     *client.Conn
	vfile    string // this transaction's consistent point, the version of its rows
	vpos     uint32
	vseq     uint32
	started  time.Time
	tables   []*table
	ti       int
	after    []any
	afterEnc []string
	rows     int64
	run      uint32
	stmt     *client.Stmt
	stmtKind int // 0: first chunk, 1: next chunks
	pending  []connect.Record
	progress map[string][2]int64
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
				sn.afterEnc = sp.After
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

func (sn *snapshotter) close() {
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
	for len(sn.pending) == 0 {
		if sn.ti >= len(sn.tables) {
			return connect.Batch{}, true, nil
		}
		if err := sn.chunk(ctx); err != nil {
			return connect.Batch{}, false, err
		}
	}
	n := min(len(sn.pending), sn.s.cfg.maxBatch)
	recs := sn.pending[:n:n]
	sn.pending = sn.pending[n:]
	b := connect.Batch{Records: recs, Position: recs[n-1].Position}
	done := len(sn.pending) == 0 && sn.ti >= len(sn.tables)
	return b, done, nil
}

// chunk reads the next chunk of the current table into pending.
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
	kind := 1
	if first {
		kind = 0
	}
	if sn.stmt == nil || sn.stmtKind != kind {
		if sn.stmt != nil {
			sn.stmt.Close()
		}
		q := chunkQuery(t, mode, first)
		st, err := sn.conn.Prepare(q)
		if err != nil {
			return fmt.Errorf("snapshot %s: prepare %q: %w", id, q, err)
		}
		sn.stmt, sn.stmtKind = st, kind
	}
	if first && sn.epoch > 0 {
		// a re-snapshot (the binlog was lost): rows deleted meanwhile have no delete event, so
		// the table starts over with a truncate event
		sn.pending = append(sn.pending, sn.truncateRecord(t))
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
	stop := context.AfterFunc(ctx, func() { sn.conn.Close() })
	defer stop()

	got := 0
	last := sn.ti == len(sn.tables)-1
	tsMs := sn.started.UnixMilli()
	ver := version(sn.vseq, sn.vpos)
	var res gomysql.Result
	var rowErr error
	err := sn.stmt.ExecuteSelectStreaming(&res, func(row []gomysql.FieldValue) error {
		got++
		sn.rows++
		after := make(connect.Row, 0, len(t.cols))
		for i := range t.cols {
			c := &t.cols[i]
			if c.excluded {
				continue
			}
			v, err := c.snapshotValue(&row[i], &s.opts)
			if err != nil {
				rowErr = fmt.Errorf("snapshot %s: %w", id, err)
				return rowErr
			}
			if c.mask != nil {
				v = c.mask(v)
			}
			after = append(after, connect.Field{Name: c.name, Value: v})
		}
		var key connect.Row
		if len(t.key) > 0 {
			key = make(connect.Row, len(t.key))
			for k, i := range t.key {
				v, err := t.cols[i].snapshotValue(&row[i], &s.opts)
				if err != nil {
					rowErr = fmt.Errorf("snapshot %s: key: %w", id, err)
					return rowErr
				}
				key[k] = connect.Field{Name: t.cols[i].name, Value: v}
			}
		}
		var order []byte
		order = binary.BigEndian.AppendUint32(order, sn.epoch)
		order = append(order, phaseSnapshot)
		order = binary.BigEndian.AppendUint32(order, uint32(sn.ti))
		if mode != keyless {
			sn.after = sn.after[:0]
			sn.afterEnc = sn.afterEnc[:0]
			for _, i := range t.order {
				sn.after = append(sn.after, keyArg(&row[i]))
				sn.afterEnc = append(sn.afterEnc, encodeKeyArg(&row[i]))
			}
		}
		if mode == keyEncodable {
			order = append(order, 0x01)
			for _, i := range t.order {
				order = appendKeyValue(order, t.cols[i].kind, &row[i])
			}
		} else {
			order = append(order, 0x02)
			order = binary.BigEndian.AppendUint32(order, sn.run)
			order = binary.BigEndian.AppendUint64(order, uint64(sn.rows))
		}
		pos := connect.Position{Order: order, State: sn.appendState(nil)}
		src := s.sourceBlock(tsMs, "true", t.db, t.name, 0, nil, sn.vfile, sn.vpos, 0, nil)
		ev := connect.ChangeEvent{After: after, Source: src, Op: connect.OpRead, TsMs: s.now().UnixMilli()}
		rec := connect.Record{Topic: t.topic, Partition: -1, Offset: -1, Timestamp: sn.started, Key: keyOrNil(key), Value: ev.Row(), Version: ver, Position: pos}
		sn.pending = append(sn.pending, rec)
		return nil
	}, nil, args...)
	if rowErr != nil {
		return rowErr
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("snapshot %s: read chunk: %w", id, err)
	}
	s.stats.events.Add(int64(got))
	sn.progress[id] = [2]int64{sn.rows, sn.plan.Totals[sn.ti]}
	if got < limit {
		if last && len(sn.pending) > 0 {
			setSnapshotFlag(sn.pending[len(sn.pending)-1], "last")
		}
		sn.progress[id] = [2]int64{sn.rows, sn.plan.Totals[sn.ti]}
		sn.nextTable()
	}
	p := make(map[string][2]int64, len(sn.progress))
	for k, v := range sn.progress {
		p[k] = v
	}
	s.stats.progress.Store(&p)
	return nil
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

func keyOrNil(k connect.Row) any {
	if k == nil {
		return nil
	}
	return k
}

func setSnapshotFlag(rec connect.Record, flag string) {
	v := rec.Value.(connect.Row)
	src := v[v.Index(connect.FieldSource)].Value.(connect.Row)
	src[src.Index("snapshot")].Value = flag
}

func (sn *snapshotter) nextTable() {
	sn.ti++
	sn.after, sn.afterEnc, sn.rows, sn.run = nil, nil, 0, 0
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
	if len(sn.afterEnc) > 0 {
		dst = append(dst, `,"after":[`...)
		for i, a := range sn.afterEnc {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendQuote(dst, a)
		}
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

// chunkQuery builds the statement that reads one chunk of t.
func chunkQuery(t *table, mode int, first bool) string {
	var b strings.Builder
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
		b.WriteString(" LIMIT ? OFFSET ?")
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
					b.WriteString(" = ?")
				} else {
					b.WriteString(" > ?")
				}
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
	b.WriteString(" LIMIT ?")
	return b.String()
}

// keyArg converts a key value of a result row into a statement argument.
func keyArg(fv *gomysql.FieldValue) any {
	switch fv.Type {
	case gomysql.FieldValueTypeSigned:
		return fv.AsInt64()
	case gomysql.FieldValueTypeUnsigned:
		return fv.AsUint64()
	case gomysql.FieldValueTypeFloat:
		return fv.AsFloat64()
	case gomysql.FieldValueTypeString:
		return append([]byte(nil), fv.AsString()...)
	}
	return nil
}

// encodeKeyArg renders a key value for the stored position: i:, u:, f: or x: (hex bytes).
func encodeKeyArg(fv *gomysql.FieldValue) string {
	switch fv.Type {
	case gomysql.FieldValueTypeSigned:
		return "i:" + strconv.FormatInt(fv.AsInt64(), 10)
	case gomysql.FieldValueTypeUnsigned:
		return "u:" + strconv.FormatUint(fv.AsUint64(), 10)
	case gomysql.FieldValueTypeFloat:
		return "f:" + strconv.FormatFloat(fv.AsFloat64(), 'g', -1, 64)
	case gomysql.FieldValueTypeString:
		return "x:" + hex.EncodeToString(fv.AsString())
	}
	return "n:"
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

var _ = json.Marshal
