package mysql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// Incremental and blocking snapshots (sources/snapshot) while the binlog stream goes on.
//
// The stream's producer goroutine drives the engine at the boundaries between transactions of
// the binlog. A chunk is read on a connection of its own while the producer processes no
// further event:
//
//	START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY
//	SHOW STATUS LIKE 'binlog_snapshot_%'      MariaDB: the binlog position P of exactly this read
//	SELECT ... WHERE (key) > (after) [AND (filter)] ORDER BY key LIMIT n
//	COMMIT
//
// On MariaDB the read holds every transaction that starts before P in the binlog and none that
// starts at or after it (the server takes both under its commit order), so the window is exact:
// Low = High = P. The chunk's rows that a transaction starting at or after P changes are
// dropped when the stream delivers that change; the rest are emitted once the stream has
// passed P, with P as their version. Nothing is written to the server. A transaction is in the
// binlog (and may reach the stream) a moment before it is visible to reads: a read whose P is
// not above the last transaction the stream processed is done again.
//
// MySQL has no such status: the window runs from SHOW MASTER STATUS (SHOW BINARY LOG STATUS)
// before the read (Low) to the same after it (High), as in DBLog. A transaction whose binlog
// write is before Low but whose commit was not visible yet when the read began is not caught
// by that window; the MySQL flavor is not tested here (see the README).
//
// The next chunk is read, and converted into records, in the background while the last one
// goes to the log (Engine.Prefetch); the stream does not go on until it is registered. On
// MariaDB the rows are converted while the query streams the rest of the chunk (the read's
// position, their version, is known before it). A chunk
// goes to the log in batches of at most max.batch.size records; all but the last carry the
// position before the chunk, so a restart from one of them reads the chunk again.
//
// A blocking snapshot keeps the transaction open and emits the table chunk by chunk from it
// while the stream waits. Chunks are read in the order of the record key (message.key.columns,
// else the primary key); a row is told apart by the JSON of its record key on both paths.

// incr is the incremental snapshot machinery of the source. The engine's control methods run
// on any goroutine; everything else on the stream's producer goroutine.
type incr struct {
	e   *snapshot.Engine
	set snapshot.Settings
	raw map[string]string // the capture filter as configured

	fresh       bool // a snapshot of every table begins: earlier requests are moot
	conns       []*client.Conn
	models      map[string]*incrModel
	engineOrder []byte // Order of the last record or batch the engine made
	pf          *snapshot.ReadAhead[openResult]
	// parts are the batches of an emitted chunk not returned yet: a chunk goes to the log in
	// batches of at most max.batch.size records, before the stream goes on
	parts []connect.Batch

	keyJSON []byte // the stream's de-duplication keys
}

// incrModel is how a task's table is read.
type incrModel struct {
	t    *table
	keys []int // columns of the chunk key (the record key), in order
	text bool  // integer keys: the chunk query is plain text with the last key written in
}

// incrCaptureKeys are the configuration keys that decide which tables are captured.
var incrCaptureKeys = []string{KeyDatabaseInclude, KeyDatabaseExclude, KeyTableInclude, KeyTableExclude}

func newIncr(s *Source, cfg connect.Config) *incr {
	set := snapshot.SettingsFrom(cfg)
	set.Watermark = snapshot.WatermarkPosition // the only kind: validate refuses message
	in := &incr{set: set, models: map[string]*incrModel{}, raw: map[string]string{}}
	for _, k := range incrCaptureKeys {
		in.raw[k] = strings.Join(cfg.List(k), ",")
	}
	in.e = snapshot.New(snapshot.Options{
		Settings:  set,
		Connector: s.env.Connector,
		Logger:    s.log,
		Store:     s.env.Store,
		Now:       func() time.Time { return s.now() },
		Tables:    s.snapshotTables,
		Lag:       s.incrLag,
	})
	return in
}

// incrLag is how far the stream is behind the server, for incremental.snapshot.max.lag.ms:
// the last batch's lag while decoded events wait (that lag stays as it was while the server is
// idle), else 0. On the producer's goroutine.
func (s *Source) incrLag() time.Duration {
	m := s.strm
	if m == nil || len(m.events) == 0 {
		return 0
	}
	return time.Duration(max(s.stats.behindMs.Load(), 0)) * time.Millisecond
}

// SnapshotSignal applies a snapshot signal (execute-snapshot, stop-snapshot, pause-snapshot,
// resume-snapshot with Debezium's data object) from the admin API or the signal topic; it
// returns once the signal is stored, with the status. Any goroutine.
func (s *Source) SnapshotSignal(ctx context.Context, origin, id, typ string, data []byte) ([]byte, error) {
	if s.cfg.snapshotMode == SnapshotInitialOnly {
		return nil, connect.Permanent(fmt.Errorf("%w: snapshot.mode=initial_only: the connector does not stream, so it takes no incremental snapshots (use another snapshot.mode)", snapshot.ErrRequest))
	}
	if strings.EqualFold(strings.TrimSpace(typ), snapshot.SignalExecute) {
		var r snapshot.Request
		if json.Unmarshal(data, &r) == nil && r.SurrogateKey != "" {
			return nil, connect.Permanent(fmt.Errorf("%w: surrogate-key is not supported by the MySQL source: set message.key.columns for the table (a unique, non-null column list) instead", snapshot.ErrRequest))
		}
	}
	return s.incr.e.Signal(ctx, typ, data, origin, id)
}

// SnapshotStatus returns the incremental snapshot status document. Any goroutine.
func (s *Source) SnapshotStatus() []byte { return s.incr.e.StatusJSON() }

// CommitNow reports whether the runtime should commit the position at once: an emitted chunk
// waits for its acknowledgement before the next one. Any goroutine.
func (s *Source) CommitNow() bool { return s.incr.e.CommitNow() }

// snapshotTables lists the captured tables with their chunk keys, the record key columns (any
// goroutine: it uses a connection of its own).
func (s *Source) snapshotTables(ctx context.Context) ([]snapshot.Table, error) {
	c, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { abort(c) })
	defer stop()
	return s.tablesWithKeys(c, s.cfg.filter)
}

func (s *Source) tablesWithKeys(c *client.Conn, f *filter) ([]snapshot.Table, error) {
	r, err := c.Execute(`SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	var out []snapshot.Table
	for i := range r.Values {
		db, _ := r.GetString(i, 0)
		name, _ := r.GetString(i, 1)
		if !f.table(db, name) {
			continue
		}
		t, _, err := s.readTable(c, db, name)
		if err != nil {
			return nil, err
		}
		if t == nil {
			continue // dropped meanwhile
		}
		out = append(out, snapshot.Table{ID: t.id(), Key: keyNames(t)})
	}
	return out, nil
}

// keyNames are the names of a table's record key columns (nil: it has none).
func keyNames(t *table) []string {
	var key []string
	for _, k := range t.key {
		key = append(key, t.cols[k].name)
	}
	return key
}

// captureFilters is the part of the configuration that decides which tables are captured.
func (s *Source) captureFilters() map[string]string { return s.incr.raw }

// addedTables lists the tables captured now that the old filter did not capture.
func (s *Source) addedTables(ctx context.Context, old map[string]string) ([]snapshot.Table, error) {
	raw := map[string]string{}
	for k, v := range old {
		if v != "" {
			raw[k] = v
		}
	}
	of, err := newFilter(connect.NewConfig(configDef(), raw))
	if err != nil {
		return nil, fmt.Errorf("stored capture filter: %w", err)
	}
	now, err := s.snapshotTables(ctx)
	if err != nil {
		return nil, err
	}
	var out []snapshot.Table
	for _, t := range now {
		db, name, _ := strings.Cut(t.ID, ".")
		if !of.table(db, name) {
			out = append(out, t)
		}
	}
	return out, nil
}

// openIncr restores the engine from the stored position's state and records the capture
// filter; Open calls it before the stream's producer starts.
func (s *Source) openIncr(ctx context.Context, state []byte) error {
	in := s.incr
	if err := in.e.Open(ctx, state); err != nil {
		return err
	}
	if in.fresh {
		in.e.Skip()
	}
	if s.cfg.snapshotMode == SnapshotInitialOnly {
		return nil
	}
	return in.e.ConfigChanged(ctx, in.raw, in.fresh, s.addedTables)
}

// closeIncr releases the snapshot connections and drops the open windows (the producer has
// stopped).
func (s *Source) closeIncr() {
	in := s.incr
	in.dropPrefetch()
	in.parts = nil
	in.e.Reset()
	for i, c := range in.conns {
		if c != nil {
			c.Close()
		}
		in.conns[i] = nil
	}
	clear(in.models)
}

// withIncr returns a State (a JSON object) with the incremental snapshot state added.
func (s *Source) withIncr(state []byte) []byte { return withIncrState(state, s.incr.e.State()) }

// withIncrState returns a State with an incremental snapshot state added.
func withIncrState(state, inc []byte) []byte {
	if len(inc) == 0 || len(state) == 0 || state[len(state)-1] != '}' {
		return state
	}
	out := make([]byte, 0, len(state)+len(inc)+16)
	out = append(out, state[:len(state)-1]...)
	out = append(out, `,"incremental":`...)
	out = append(out, inc...)
	return append(out, '}')
}

// incrPosition completes a stream batch position: the incremental state in its State, and an
// Order not below the last one the engine made (a heartbeat right after a chunk, at the same
// binlog position, must not go back).
func (s *Source) incrPosition(p connect.Position) connect.Position {
	p.State = s.withIncr(p.State)
	if o := s.incr.engineOrder; len(o) > 0 && string(o) > string(p.Order) {
		p.Order = o
	}
	return p
}

// mark is a binlog position as a watermark: file number << 32 | position.
func mark(seq, pos uint32) snapshot.Mark { return snapshot.Mark(uint64(seq)<<32 | uint64(pos)) }

// incrConn returns the i-th connection of the snapshot reads, connecting if need be.
func (s *Source) incrConn(ctx context.Context, i int) (*client.Conn, error) {
	in := s.incr
	for len(in.conns) <= i {
		in.conns = append(in.conns, nil)
	}
	if c := in.conns[i]; c != nil {
		return c, nil
	}
	c, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := c.Execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		c.Close()
		return nil, fmt.Errorf("snapshot connection: %w", err)
	}
	in.conns[i] = c
	return c, nil
}

// dropConn forgets a snapshot connection that failed.
func (s *Source) dropConn(c *client.Conn) {
	for i, x := range s.incr.conns {
		if x == c {
			c.Close()
			s.incr.conns[i] = nil
		}
	}
}

var errTableGone = errors.New("table no longer exists")

// errTableDefChanged is ER_TABLE_DEF_CHANGED: a consistent read older than the table's last
// recreation (TRUNCATE, ALTER ... ALGORITHM=COPY).
const errTableDefChanged = 1412

// errKeyChanged is the reason a task is abandoned when its table's record key is no longer the
// key its chunks were read by.
var errKeyChanged = errors.New("record key changed")

// model returns (reading it on first use) how a task's table is read.
func (s *Source) model(c *client.Conn, task *snapshot.Task) (*incrModel, error) {
	key := task.Table + "\x00" + strings.Join(task.Key, ",")
	if m := s.incr.models[key]; m != nil {
		return m, nil
	}
	db, name, _ := strings.Cut(task.Table, ".")
	t, _, err := s.readTable(c, db, name)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, errTableGone
	}
	names := keyNames(t)
	if strings.Join(names, "\x00") != strings.Join(task.Key, "\x00") {
		return nil, fmt.Errorf("%w: snapshot of %s by key %v, the table's record key is now %v", errKeyChanged, task.Table, task.Key, names)
	}
	m := &incrModel{t: t, keys: t.key, text: true}
	for _, i := range t.key {
		switch t.cols[i].kind {
		case kindInt, kindUint64, kindYear:
		default:
			m.text = false
		}
	}
	s.incr.models[key] = m
	return m, nil
}

// chunkSQL is the query of a task's next chunk: the key columns' range after the last row
// ((k1 > a1) OR (k1 = a1 AND k2 > a2) ..., a range both servers use an index for), the filter,
// key order. With args nil the range has a ? per argument; otherwise the arguments, integers,
// are written in.
func (m *incrModel) chunkSQL(task *snapshot.Task, after, args []any) string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i := range m.t.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteName(m.t.cols[i].name))
	}
	b.WriteString(" FROM " + quoteName(m.t.db) + "." + quoteName(m.t.name))
	var where []string
	if after != nil {
		arg := func(j int) string {
			if args == nil {
				return "?"
			}
			switch v := after[j].(type) {
			case int64:
				return strconv.FormatInt(v, 10)
			case uint64:
				return strconv.FormatUint(v, 10)
			}
			panic(fmt.Sprintf("chunk query argument of type %T", after[j])) // text admits integers only
		}
		var ors []string
		for i := range m.keys {
			var ands []string
			for j := 0; j < i; j++ {
				ands = append(ands, quoteName(m.t.cols[m.keys[j]].name)+" = "+arg(j))
			}
			ands = append(ands, quoteName(m.t.cols[m.keys[i]].name)+" > "+arg(i))
			ors = append(ors, "("+strings.Join(ands, " AND ")+")")
		}
		where = append(where, "("+strings.Join(ors, " OR ")+")")
	}
	if task.Filter != "" {
		where = append(where, "("+task.Filter+")")
	}
	if len(where) > 0 {
		b.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	b.WriteString(" ORDER BY ")
	for i, k := range m.keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteName(m.t.cols[k].name))
	}
	b.WriteString(" LIMIT " + strconv.Itoa(task.ChunkSize))
	return b.String()
}

// convRun is the most rows a chunk read hands to its converter at a time.
const convRun = 2048

// readChunk reads the task's next chunk in the connection's open transaction into rd: its
// rows as records (convert), their count, the chunk key of the last (rd.last, as stored in the
// state: appendKeyArg) and whether the table is exhausted. With now set, the rows are converted
// in a goroutine of their own, a run of convRun rows at a time, while the query streams the
// next (rd's binlog position, the records' version, must be known); otherwise they wait in
// rd.runs for convertRuns.
func (s *Source) readChunk(c *client.Conn, rd *incrRead, task *snapshot.Task, now bool) error {
	m := rd.m
	var after []any
	if task.After != nil {
		var err error
		after, err = decodeKeyArgs(task.After)
		if err != nil || len(after) != len(m.keys) {
			return connect.Permanentf("snapshot of %s: stored key %v does not fit the key %v", task.Table, task.After, task.Key)
		}
	}
	text := m.text && intArgs(after)
	rd.n, rd.last, rd.exhausted, rd.runs = 0, nil, false, nil
	rd.recs = make([]connect.Record, 0, min(task.ChunkSize, 1<<16))
	rd.keys = make([]byte, 0, min(task.ChunkSize, 1<<16)*16)
	rd.ends = make([]int, 0, min(task.ChunkSize, 1<<16))
	var runs chan *rowSet
	converted := make(chan error, 1)
	if now {
		runs = make(chan *rowSet, 2)
		go func() {
			var err error
			for rs := range runs {
				if err == nil {
					err = s.convert(rd, rs, task)
				}
			}
			converted <- err
		}()
	}
	hand := func(rs *rowSet) {
		if now {
			runs <- rs
		} else {
			rd.runs = append(rd.runs, rs)
		}
	}
	newRun := func() *rowSet {
		return &rowSet{t: m.t, data: make([]byte, 0, 16<<10), cells: make([]cell, 0, min(task.ChunkSize, convRun)*len(m.t.cols))}
	}
	var prev *rowSet
	rs := newRun()
	perRow := func(row []gomysql.FieldValue) error {
		rs.add(row)
		rd.n++
		if rs.n == convRun {
			hand(rs)
			rs, prev = newRun(), rs
		}
		return nil
	}
	var res gomysql.Result
	var q string
	var err error
	if after == nil || text {
		q = m.chunkSQL(task, after, after)
		err = c.ExecuteSelectStreaming(q, &res, perRow, nil)
	} else {
		q = m.chunkSQL(task, after, nil)
		var args []any
		for i := range m.keys {
			for j := 0; j <= i; j++ {
				args = append(args, after[j])
			}
		}
		var st *client.Stmt
		if st, err = c.Prepare(q); err == nil {
			err = st.ExecuteSelectStreaming(&res, perRow, nil, args...)
			st.Close()
		}
	}
	if rs.n > 0 {
		hand(rs)
		prev = rs
	}
	var cerr error
	if now {
		close(runs)
		cerr = <-converted
	}
	if err != nil {
		return fmt.Errorf("snapshot of %s: %s: %w", task.Table, q, err)
	}
	if cerr != nil {
		return cerr
	}
	if prev != nil {
		row := prev.row(prev.n - 1)
		for _, k := range m.keys {
			rd.last = append(rd.last, string(appendKeyArg(nil, &row[k])))
		}
	}
	rd.exhausted = rd.n < task.ChunkSize
	return nil
}

// convertRuns converts the rows a chunk read left in rd.runs.
func (s *Source) convertRuns(rd *incrRead, task *snapshot.Task) error {
	runs := rd.runs
	rd.runs = nil
	for _, rs := range runs {
		if err := s.convert(rd, rs, task); err != nil {
			return err
		}
	}
	return nil
}

// incrRead is what a window holds: the rows read, converted (incremental), or the open
// transaction (blocking).
type incrRead struct {
	m         *incrModel
	n         int              // rows read
	recs      []connect.Record // the rows as records, without Positions
	keys      []byte           // the JSON of their record keys, one after the other
	ends      []int            // where each key ends in keys
	runs      []*rowSet        // rows read, not converted yet (readChunk)
	last      []string
	exhausted bool
	readAt    time.Time
	file      string // the binlog position of the read: the rows' version
	pos       uint32
	conn      *client.Conn // blocking: the connection whose transaction reads the table
}

// openResult is the outcome of opening one window.
type openResult struct {
	task      *snapshot.Task
	read      *incrRead
	low, high snapshot.Mark
	total     int64
	err       error
	again     bool // the read must be done again (the table was recreated meanwhile)
}

// prepareTasks returns the models of tasks and their connections; a task whose table is gone (or
// whose key changed) is abandoned and gone reports it.
func (s *Source) prepareTasks(ctx context.Context, tasks []*snapshot.Task) (models []*incrModel, conns []*client.Conn, gone bool, err error) {
	for i, task := range tasks {
		c, err := s.incrConn(ctx, i)
		if err != nil {
			return nil, nil, false, err
		}
		stop := context.AfterFunc(ctx, func() { abort(c) })
		m, err := s.model(c, task)
		stop()
		switch {
		case errors.Is(err, errTableGone):
			s.log.Warn("table of a snapshot no longer exists: skipped", "table", task.Table)
			s.incr.e.Abandon(task, "SKIPPED")
			return nil, nil, true, nil
		case errors.Is(err, errKeyChanged):
			s.log.Warn("the record key of a table changed during its snapshot: skipped; request its snapshot again", "table", task.Table, "err", err)
			s.incr.e.Abandon(task, "SKIPPED")
			return nil, nil, true, nil
		case err != nil:
			if ctx.Err() == nil {
				s.dropConn(c)
			}
			return nil, nil, false, err
		}
		models = append(models, m)
		conns = append(conns, c)
	}
	return models, conns, false, nil
}

// openWindows reads the next chunk of each task (on connections of their own, at once) and
// registers the windows with the engine.
func (s *Source) openWindows(ctx context.Context, tasks []*snapshot.Task) error {
	models, conns, gone, err := s.prepareTasks(ctx, tasks)
	if err != nil || gone {
		return err
	}
	results := make([]openResult, len(tasks))
	if len(tasks) == 1 {
		results[0] = s.openWindow(ctx, conns[0], models[0], tasks[0])
	} else {
		var wg sync.WaitGroup
		for i := range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = s.openWindow(ctx, conns[i], models[i], tasks[i])
			}()
		}
		wg.Wait()
	}
	return s.register(results)
}

// register hands the windows of finished reads to the engine.
func (s *Source) register(results []openResult) error {
	for _, r := range results {
		if r.err != nil {
			for _, x := range results {
				if x.read != nil && x.read.conn != nil {
					_, _ = x.read.conn.Execute("ROLLBACK")
				}
			}
			return r.err
		}
	}
	for _, r := range results {
		if r.total >= 0 && r.task.Total < 0 {
			s.incr.e.SetTotal(r.task, r.total)
		}
		if r.again {
			// no window: the table's chunk is read again at a later boundary
			s.log.Debug("snapshot chunk read before the table was recreated; reading it again", "table", r.task.Table)
			continue
		}
		if m := s.strm; m != nil && m.lastTx >= r.low {
			// the stream already processed a transaction the read does not hold: MariaDB writes
			// a transaction to the binlog before it becomes visible, so a read can begin between
			// the two. Read again (a moment later the transaction is visible).
			s.log.Debug("snapshot chunk read before a streamed transaction became visible; reading it again", "table", r.task.Table)
			if r.read.conn != nil {
				_, _ = r.read.conn.Execute("ROLLBACK")
			}
			continue
		}
		s.incr.e.Opened(&snapshot.Window{Task: r.task, Low: r.low, High: r.high, Data: r.read})
	}
	return nil
}

// openWindow runs the queries of one window on c (see the comment at the top).
func (s *Source) openWindow(ctx context.Context, c *client.Conn, m *incrModel, task *snapshot.Task) (r openResult) {
	r.task, r.total = task, -1
	stop := context.AfterFunc(ctx, func() { abort(c) })
	defer stop()
	fail := func(what string, err error) openResult {
		if ctx.Err() == nil {
			_, _ = c.Execute("ROLLBACK")
		}
		r.read = nil
		var me *gomysql.MyError
		if errors.As(err, &me) && me.Code == errTableDefChanged {
			r.again = true // a DDL (TRUNCATE) recreated the table after the read began
			return r
		}
		r.err = fmt.Errorf("snapshot of %s: %s: %w", task.Table, what, err)
		return r
	}
	if task.Total < 0 {
		r.total = estimate(c, m, task)
	}
	maria := s.flavor == gomysql.MariaDBFlavor
	read := &incrRead{m: m}
	if !maria {
		file, pos, err := s.binlogHead(c)
		if err != nil {
			return fail("low watermark", err)
		}
		seq, err := fileSeq(file)
		if err != nil {
			return fail("low watermark", err)
		}
		r.low = mark(seq, pos)
	}
	if _, err := c.Execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return fail("start transaction", err)
	}
	read.readAt = s.now()
	if maria {
		res, err := c.Execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
		if err != nil {
			return fail("binlog position of the read", err)
		}
		for i := range res.Values {
			k, _ := res.GetString(i, 0)
			v, _ := res.GetString(i, 1)
			switch strings.ToLower(k) {
			case "binlog_snapshot_file":
				read.file = v
			case "binlog_snapshot_position":
				p, _ := strconv.ParseUint(v, 10, 32)
				read.pos = uint32(p)
			}
		}
		seq, err := fileSeq(read.file)
		if err != nil {
			return fail("binlog position of the read", err)
		}
		r.low = mark(seq, read.pos)
		r.high = r.low
	}
	if task.Type == snapshot.TypeBlocking {
		read.conn = c
	} else {
		// MariaDB: the records' version, the read's position, is known: convert while reading
		if err := s.readChunk(c, read, task, maria); err != nil {
			return fail("read", err)
		}
		if _, err := c.Execute("COMMIT"); err != nil {
			return fail("commit", err)
		}
	}
	if !maria {
		file, pos, err := s.binlogHead(c)
		if err != nil {
			return fail("high watermark", err)
		}
		seq, err := fileSeq(file)
		if err != nil {
			return fail("high watermark", err)
		}
		read.file, read.pos = file, pos
		r.high = mark(seq, pos)
	}
	if err := s.convertRuns(read, task); err != nil {
		r.err = err
		return r
	}
	r.read = read
	return r
}

// estimate is the server's estimate of a task's rows (EXPLAIN, with the filter); -1: unknown.
func estimate(c *client.Conn, m *incrModel, task *snapshot.Task) int64 {
	q := "EXPLAIN SELECT 1 FROM " + quoteName(m.t.db) + "." + quoteName(m.t.name)
	if task.Filter != "" {
		q += " WHERE (" + task.Filter + ")"
	}
	r, err := c.Execute(q)
	if err != nil || len(r.Values) == 0 {
		return -1
	}
	for i, f := range r.Fields {
		if strings.EqualFold(string(f.Name), "rows") {
			if n, err := r.GetInt(0, i); err == nil {
				return n
			}
		}
	}
	return -1
}

// startPrefetch reads the next chunks in the background when the engine knows them: their
// queries run on the server while this chunk's records go to the log and are acknowledged.
// The stream is not processed until finishPrefetch registered them. It cannot fail: it runs
// after the engine counted the last chunk done, so what it cannot start the next Begin opens,
// and reports what is wrong.
func (s *Source) startPrefetch(ctx context.Context) {
	in := s.incr
	tasks := in.e.Prefetch()
	if len(tasks) == 0 {
		return
	}
	models, conns, gone, err := s.prepareTasks(ctx, tasks)
	if err != nil || gone {
		return
	}
	in.pf = snapshot.StartReadAhead(len(tasks), func(ctx context.Context, i int) openResult {
		return s.openWindow(ctx, conns[i], models[i], tasks[i])
	})
}

// finishPrefetch waits for the read started by startPrefetch and registers its windows.
func (s *Source) finishPrefetch(ctx context.Context) error {
	in := s.incr
	results, err := in.pf.Wait(ctx)
	if err != nil {
		return err
	}
	in.pf = nil
	for _, r := range results {
		if r.err != nil {
			// the connections may be broken: start over with new ones
			for i, c := range in.conns {
				if c != nil {
					c.Close()
				}
				in.conns[i] = nil
			}
			break
		}
	}
	return s.register(results)
}

// dropPrefetch abandons a read ahead (the source closes).
func (in *incr) dropPrefetch() {
	if in.pf != nil {
		in.pf.Drop()
		in.pf = nil
	}
}

// convert turns a run of rows of a chunk into records (without their Positions) and the JSON of
// their record keys, the de-duplication keys, appended to rd's. It runs where the chunk is
// read: for a chunk read ahead, in the background while the last chunk goes to the log.
func (s *Source) convert(rd *incrRead, rs *rowSet, task *snapshot.Task) error {
	t := rd.m.t
	seq, _ := fileSeq(rd.file)
	ver := version(seq, rd.pos)
	src := any(s.sourceBlock(rd.readAt.UnixMilli(), "incremental", t.db, t.name, 0, nil, rd.file, rd.pos, 0, nil))
	// slabs of their own: the records outlive this call and the next chunk's
	var fields fieldArena
	var bx boxer
	opts := &s.opts
	nowMs := bx.int(s.now().UnixMilli())
	nk := len(t.key)
	nkf := nk
	if t.keyPrefix {
		nkf = 0
	}
	for r := 0; r < rs.n; r++ {
		row := rs.row(r)
		blk := fields.newBlock(0, t.nOut, nkf)
		for i := range t.cols {
			c := &t.cols[i]
			if c.excluded {
				continue
			}
			v, err := c.snapshotValue(&row[i], opts, &bx)
			if err != nil {
				return fmt.Errorf("snapshot of %s: %w", task.Table, err)
			}
			if c.mask != nil {
				v = c.mask(v)
			}
			blk.after[c.out] = connect.Field{Name: c.name, Value: v}
		}
		var key connect.Row
		if t.keyPrefix {
			key = blk.after[:nk:nk]
		} else {
			for j, i := range t.key {
				c := &t.cols[i]
				if !c.excluded && c.mask == nil {
					blk.key[j] = blk.after[c.out]
					continue
				}
				v, err := c.snapshotValue(&row[i], opts, &bx)
				if err != nil {
					return fmt.Errorf("snapshot of %s: key: %w", task.Table, err)
				}
				blk.key[j] = connect.Field{Name: c.name, Value: v}
			}
			key = blk.key
		}
		var err error
		if rd.keys, err = connect.AppendJSON(rd.keys, key); err != nil {
			return fmt.Errorf("snapshot of %s: key: %w", task.Table, err)
		}
		rd.ends = append(rd.ends, len(rd.keys))
		rd.recs = append(rd.recs, connect.Record{
			Topic: t.topic, Partition: -1, Offset: -1, Timestamp: rd.readAt,
			Key: bx.row(key), Value: blk.envelope(&bx, nil, blk.after, src, connect.OpRead, nowMs),
			Version: ver,
		})
	}
	return nil
}

// emitWindow emits a window's rows (for a blocking window, its next chunk) as one batch.
func (s *Source) emitWindow(ctx context.Context, w *snapshot.Window, base []byte, frontier snapshot.Mark) (connect.Batch, error) {
	in := s.incr
	rd := w.Data.(*incrRead)
	task := w.Task
	if w.Blocking() {
		stop := context.AfterFunc(ctx, func() { abort(rd.conn) })
		err := s.readChunk(rd.conn, rd, task, true)
		if err == nil {
			if rd.exhausted {
				if _, cerr := rd.conn.Execute("COMMIT"); cerr != nil {
					err = fmt.Errorf("snapshot of %s: commit: %w", task.Table, cerr)
				}
			}
		}
		stop()
		if err != nil {
			s.dropConn(rd.conn)
			return connect.Batch{}, err
		}
	}
	// the state before the chunk, for the positions of its batches but the last: a restart
	// from one of them reads the chunk again
	pre := in.e.State()
	em := in.e.StartEmit(w, base, frontier)
	// the kept records, in place
	recs := rd.recs[:0]
	start := 0
	for i := range rd.recs {
		end := rd.ends[i]
		key := unsafe.String(unsafe.SliceData(rd.keys[start:end]), end-start) // never written again
		start = end
		if !em.Keep(key) {
			continue
		}
		rd.recs[i].Position = em.Next()
		if len(recs) < i {
			recs = append(recs, rd.recs[i]) // moved down over a dropped one
		} else {
			recs = recs[:i+1]
		}
	}
	s.stats.events.Add(int64(len(recs)))
	s.addScanned(task.Table, int64(rd.n), task.Total)
	notes, end := em.Done(rd.n, rd.last, rd.exhausted)
	recs = append(recs, notes...)
	rd.recs, rd.keys, rd.ends = nil, nil, nil
	if !w.Blocking() {
		s.startPrefetch(ctx)
	}
	in.engineOrder = end
	state := s.strm.position().State // a transaction boundary
	for len(recs) > s.cfg.maxBatch {
		part := recs[:s.cfg.maxBatch:s.cfg.maxBatch]
		recs = recs[s.cfg.maxBatch:]
		in.parts = append(in.parts, connect.Batch{Records: part, Position: connect.Position{Order: part[len(part)-1].Position.Order, State: withIncrState(state, pre)}})
	}
	in.parts = append(in.parts, connect.Batch{Records: recs, Position: connect.Position{Order: end, State: withIncrState(state, in.e.State())}})
	return in.nextPart(), nil
}

// nextPart returns the next batch of an emitted chunk.
func (in *incr) nextPart() connect.Batch {
	b := in.parts[0]
	in.parts[0] = connect.Batch{}
	in.parts = in.parts[1:]
	if len(in.parts) == 0 {
		in.parts = nil
	}
	return b
}

// addScanned counts a table's rows read for the rows_scanned metric.
func (s *Source) addScanned(table string, n, total int64) {
	for {
		old := s.stats.progress.Load()
		p := map[string][2]int64{}
		if old != nil {
			for k, v := range *old {
				p[k] = v
			}
		}
		v := p[table]
		v[0] = max(v[0], 0) + n
		v[1] = total
		p[table] = v
		if s.stats.progress.CompareAndSwap(old, &p) {
			return
		}
	}
}

// atBoundary reports whether the producer is between two transactions of the binlog: no
// transaction begun, none being resumed inside.
func (m *streamer) atBoundary() bool {
	return m.cur == nil && !m.inTx && !(m.starting && m.skip > 0)
}

// incrStep does the engine's work at a boundary between transactions (in the producer): it
// returns a batch to hand over (ok), or whether to hold the stream and how long to wait at
// most before asking again (0: until an event or Wake).
func (m *streamer) incrStep(ctx context.Context, b *batch) (out connect.Batch, ok, hold bool, wait time.Duration, err error) {
	s := m.s
	in := s.incr
	if in.pf != nil {
		// chunks read ahead: registered before the stream goes on
		if err := s.finishPrefetch(ctx); err != nil {
			return connect.Batch{}, false, false, 0, err
		}
	}
	for {
		base := m.position().Order
		step := in.e.Begin(base, m.frontier)
		switch step.Kind {
		case snapshot.StepNotify:
			if len(step.Records) == 0 {
				// commands applied without notifications: a batch carries the new state
				return m.finish(b), true, false, 0, nil
			}
			b.recs = append(b.recs, step.Records...)
			in.engineOrder = step.Records[len(step.Records)-1].Position.Order
			continue
		case snapshot.StepOpen:
			if len(b.recs) > 0 {
				return m.finish(b), true, false, 0, nil
			}
			if err := s.openWindows(ctx, step.Tasks); err != nil {
				return connect.Batch{}, false, false, 0, err
			}
			if len(in.e.Windows()) == 0 {
				// nothing opened (a table gone or recreated): ask again a little later
				return connect.Batch{}, false, false, 50 * time.Millisecond, nil
			}
			continue
		case snapshot.StepEmit:
			if len(b.recs) > 0 {
				return m.finish(b), true, false, 0, nil
			}
			eb, err := s.emitWindow(ctx, step.Window, base, m.frontier)
			if err != nil {
				return connect.Batch{}, false, false, 0, err
			}
			return eb, true, false, 0, nil
		default:
			return connect.Batch{}, false, step.Hold, step.Wait, nil
		}
	}
}

// waitEngine waits, without processing the stream, until the engine may go on.
func (m *streamer) waitEngine(ctx context.Context, wait time.Duration) error {
	if wait <= 0 {
		wait = time.Second
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-m.s.incr.e.Wake():
	case <-t.C:
	}
	return nil
}

// noteEvent moves the frontier past a processed event: up to the end of the last complete
// transaction, and past an event outside any transaction (a file's GTID list, a checkpoint).
func (m *streamer) noteEvent(ev *replication.BinlogEvent) {
	if m.inTx || m.starting && m.skip > 0 {
		return
	}
	if f := mark(m.boundSeq, m.boundPos); f > m.frontier {
		m.frontier = f
	}
	h := ev.Header
	if m.starting || h.LogPos == 0 || h.Flags&replication.LOG_EVENT_ARTIFICIAL_F != 0 {
		return
	}
	switch ev.Event.(type) {
	case *replication.RotateEvent, *replication.HeartbeatEvent, *replication.FormatDescriptionEvent:
		return
	}
	if f := mark(m.seq, h.LogPos); f > m.frontier {
		m.frontier = f
	}
}

// touch reports a row change's record key to the engine when a window of its table is open.
func (m *streamer) touch(t *table, key any) {
	in := m.s.incr
	if key == nil || len(in.e.Windows()) == 0 || !in.e.Watching(t.id()) {
		return
	}
	b, err := connect.AppendJSON(in.keyJSON[:0], key)
	if err != nil {
		return
	}
	in.keyJSON = b
	in.e.Touch(t.id(), string(b), mark(m.txSeq, m.txPos), 0)
}

// touchAll reports a truncate of a table.
func (m *streamer) touchAll(db, name string) {
	in := m.s.incr
	if len(in.e.Windows()) > 0 && in.e.Watching(db+"."+name) {
		in.e.TouchAll(db+"."+name, mark(m.txSeq, m.txPos), 0)
	}
}

// isSignalTable reports whether db.name is the signal table.
func (s *Source) isSignalTable(db, name string) bool {
	return s.incr.set.SignalTableEnabled() && strings.EqualFold(db+"."+name, s.incr.set.SignalTable)
}

// decodes reports whether the rows of db.name are decoded: a captured table or the signal
// table.
func (s *Source) decodes(db, name string) bool {
	return s.cfg.filter.table(db, name) || s.isSignalTable(db, name)
}

// signalRow applies a row inserted into the signal table (columns id, type, data).
func (m *streamer) signalRow(t *table, row []any) error {
	s := m.s
	col := func(name string) string {
		for i := range t.cols {
			if strings.EqualFold(t.cols[i].name, name) && i < len(row) {
				switch v := row[i].(type) {
				case string:
					return v
				case []byte:
					return string(v)
				}
			}
		}
		return ""
	}
	id, typ, data := col("id"), col("type"), col("data")
	if typ == "" {
		s.log.Warn("signal row without a type ignored", "table", t.id(), "id", id)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.incr.e.SignalInline(ctx, typ, []byte(data), id)
	switch {
	case err == nil:
		s.log.Info("signal received", "id", id, "type", typ)
	case errors.Is(err, snapshot.ErrRequest):
		s.log.Warn("signal ignored", "id", id, "type", typ, "err", err)
	default:
		return err
	}
	return nil
}
