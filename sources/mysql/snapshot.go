package mysql

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
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
// memory. Chunks of tables keyed by integers (and of tables without a key) are plain queries
// with the last key written in (the text protocol, cheaper to decode); others are prepared
// statements. snapread.go runs the queries and builds the records in goroutines of their own. Each row's Position records the key it was read up to, so a killed snapshot resumes
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

	// the pipeline (snapread.go), after open
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	outs        []chan snapItem  // the converters' batches, read in turn
	next        int              // the converter whose batch comes next
	held        []connect.Record // the last batch, held back until a later one exists
	heldRelease func()           // its Release
	err         error            // the pipeline's error, returned by every later read

	// owned by the fetcher
	ti       int
	after    []any // key of the last row read: the arguments of the next chunk query
	rows     int64
	run      uint32
	stmt     *client.Stmt
	stmtKind int        // 0: first chunk, 1: next chunks
	tq       *textQuery // reads chunk queries in the text protocol; nil: go-mysql does
	progress map[string][2]int64
	ins      []chan *rowSet // the converters' inputs, fed in turn
	spare    chan []cell    // cells of converted row sets, for new ones
	rc       *recycler      // the slabs of routed batches, for new ones
	turn     int            // the converter the next row set goes to
	srcFor   *table         // the table whose shared source block is srcBox
	srcBox   any
	dataHint int // string bytes of the last row set, to size the next
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
	if textQueryUsable(c) && !s.goMySQLText {
		sn.tq = newTextQuery(c)
	}
	stop := context.AfterFunc(ctx, func() { abort(c) })
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
	sn.start()
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

func (sn *snapshotter) nextTable() {
	sn.ti++
	sn.after, sn.rows, sn.run = nil, 0, 0
	if sn.stmt != nil {
		sn.stmt.Close()
		sn.stmt = nil
	}
}

// appendSnapState appends the State of a snapshot position: table ti, rows read of it, the key
// of the last (keyJSON: "i:1","x:6b", empty for none) and run.
func appendSnapState(dst []byte, epoch uint32, ti int, keyJSON []byte, rows int64, run uint32) []byte {
	dst = append(dst, `{"v":1,"epoch":`...)
	dst = strconv.AppendUint(dst, uint64(epoch), 10)
	dst = append(dst, `,"snapshot":{"table":`...)
	dst = strconv.AppendInt(dst, int64(ti), 10)
	if len(keyJSON) > 0 {
		dst = append(dst, `,"after":[`...)
		dst = append(dst, keyJSON...)
		dst = append(dst, ']')
	}
	dst = append(dst, `,"rows":`...)
	dst = strconv.AppendInt(dst, rows, 10)
	if run > 0 {
		dst = append(dst, `,"run":`...)
		dst = strconv.AppendUint(dst, uint64(run), 10)
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
func appendKeyArg(dst []byte, fv *cell) []byte {
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
func appendKeyValue(dst []byte, k kind, fv *cell) []byte {
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
