package postgres

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// Incremental and blocking snapshots (sources/snapshot) while the stream goes on.
//
// A chunk is read on a connection of its own, at a boundary between two transactions of the
// stream (Read waits meanwhile, so every transaction it processed was processed before the
// read):
//
//	SELECT pg_current_wal_insert_lsn()                  low watermark L
//	BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY
//	SELECT pg_current_snapshot()                         the read's MVCC snapshot S
//	SELECT ... WHERE (key) > (after) [AND (filter)] ORDER BY key LIMIT n
//	COMMIT
//	SELECT pg_logical_emit_message(false, 'sluice.incremental', ...)   high watermark H
//	  (or pg_current_wal_insert_lsn() with incremental.snapshot.watermark=position)
//
// Every transaction the read sees committed before H; the stream gets to H, dropping from the
// chunk every row changed by a transaction the read may not see: one that committed at or
// after L, or one S does not see (xmin/xmax/xip; a commit is written to the WAL before it
// becomes visible, so a transaction before L can still be invisible to S). If the stream had
// already processed a transaction S does not see, the chunk is read again. The chunk's rows
// that are left are emitted as op "r" events at the high watermark's version.
//
// A blocking snapshot keeps the REPEATABLE READ transaction open, lets the stream get to H,
// and then emits the table chunk by chunk from that one transaction while the stream waits.

// signalPrefix is the prefix of the logical decoding messages used as high watermarks.
const signalPrefix = "sluice.incremental"

// incrModel is how a table's chunks are read and decoded.
type incrModel struct {
	ref     tableRef
	t       *table // decodes the chunk's rows (catalog columns)
	sel     string // SELECT <columns> FROM t
	order   string // the key columns, quoted, comma-separated
	keyCols []int  // positions of the key columns in the select list
	keyOIDs []uint32
	ncols   int
}

// incrRead is what a window holds: the chunk read (incremental) or the open transaction
// (blocking).
type incrRead struct {
	model     *incrModel
	rows      [][][]byte // raw text rows
	last      []string   // chunk key of the last row read
	exhausted bool
	readAt    time.Time
	conn      *pgx.Conn // blocking: the connection whose transaction reads the table
	snap      pgSnapshot
}

// pgSnapshot is an MVCC snapshot (pg_current_snapshot()) in 32-bit transaction ids, as
// pgoutput sends them.
type pgSnapshot struct {
	xmin, xmax uint32
	xip        map[uint32]bool
}

// parseSnapshot parses pg_current_snapshot()'s text, "xmin:xmax:xip,xip".
func parseSnapshot(s string) (pgSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return pgSnapshot{}, fmt.Errorf("snapshot %q: want xmin:xmax:xip", s)
	}
	var sn pgSnapshot
	xmin, err1 := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return pgSnapshot{}, fmt.Errorf("snapshot %q: bad xmin or xmax", s)
	}
	sn.xmin, sn.xmax = uint32(xmin), uint32(xmax)
	if parts[2] != "" {
		sn.xip = map[uint32]bool{}
		for _, x := range strings.Split(parts[2], ",") {
			n, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return pgSnapshot{}, fmt.Errorf("snapshot %q: bad xip %q", s, x)
			}
			sn.xip[uint32(n)] = true
		}
	}
	return sn, nil
}

// precedes is PostgreSQL's TransactionIdPrecedes for normal transaction ids.
func precedes(a, b uint32) bool { return int32(a-b) < 0 }

// invisible reports whether a transaction's changes are not in the snapshot.
func (sn pgSnapshot) invisible(xid uint64) bool {
	x := uint32(xid)
	if precedes(x, sn.xmin) {
		return false
	}
	if !precedes(x, sn.xmax) {
		return true
	}
	return sn.xip[x]
}

// xidRing remembers the ids of the last transactions the stream processed.
type xidRing struct {
	ids  [1024]uint32
	n    int
	next int
}

func (r *xidRing) add(xid uint32) {
	r.ids[r.next] = xid
	r.next = (r.next + 1) % len(r.ids)
	if r.n < len(r.ids) {
		r.n++
	}
}

// anyInvisible reports whether a remembered transaction is invisible to the snapshot.
func (r *xidRing) anyInvisible(sn pgSnapshot) bool {
	for i := range r.n {
		if sn.invisible(uint64(r.ids[i])) {
			return true
		}
	}
	return false
}

// newEngine builds the incremental snapshot engine of the source.
func (s *Source) newEngine() *snapshot.Engine {
	return snapshot.New(snapshot.Options{
		Settings:  s.set.incr,
		Connector: s.env.Connector,
		Logger:    s.log,
		Store:     s.env.Store,
		Now:       func() time.Time { return s.now() },
		Tables:    s.snapshotTables,
		Lag: func() time.Duration {
			if s.rcv == nil || len(s.rcv.msgs) == 0 {
				return 0
			}
			return time.Duration(s.st.behind.Load()) * time.Millisecond
		},
		LagBytes: func() (int64, int64) { return s.st.slotLag.Load(), s.set.maxSlotLag },
	})
}

// SnapshotSignal applies a snapshot signal (execute-snapshot, stop-snapshot, pause-snapshot,
// resume-snapshot with Debezium's data object) from the admin API or the signal topic; it
// returns once the signal is stored, with the status. Any goroutine.
func (s *Source) SnapshotSignal(ctx context.Context, origin, id, typ string, data []byte) ([]byte, error) {
	return s.incr.Signal(ctx, typ, data, origin, id)
}

// SnapshotStatus returns the incremental snapshot status document. Any goroutine.
func (s *Source) SnapshotStatus() []byte { return s.incr.StatusJSON() }

// CommitNow reports whether the runtime should commit the position at once: an emitted
// chunk waits for its acknowledgement before the next one. Any goroutine.
func (s *Source) CommitNow() bool { return s.incr.CommitNow() }

// snapshotTables lists the captured tables with their chunk keys (any goroutine: it uses a
// connection of its own).
func (s *Source) snapshotTables(ctx context.Context) ([]snapshot.Table, error) {
	c, err := s.set.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	return s.tablesWithKeys(ctx, c, &s.set.filter)
}

func (s *Source) tablesWithKeys(ctx context.Context, c *pgx.Conn, f *filter) ([]snapshot.Table, error) {
	refs, err := capturedTables(ctx, c, f)
	if err != nil {
		return nil, err
	}
	out := make([]snapshot.Table, 0, len(refs))
	for _, r := range refs {
		key, err := keyColumns(ctx, c, r.OID)
		if err != nil {
			return nil, err
		}
		if key == nil {
			key = s.set.keyColumnsFor(r.Schema, r.Name)
		}
		out = append(out, snapshot.Table{ID: r.String(), Key: key})
	}
	return out, nil
}

// captureFilters is the part of the configuration that decides which tables are captured.
func (s *Source) captureFilters() map[string]string {
	return map[string]string{
		KeySchemaInclude: strings.Join(s.set.rawFilter[0], ","),
		KeySchemaExclude: strings.Join(s.set.rawFilter[1], ","),
		KeyTableInclude:  strings.Join(s.set.rawFilter[2], ","),
		KeyTableExclude:  strings.Join(s.set.rawFilter[3], ","),
	}
}

// addedTables lists the tables captured now that the old filter did not capture.
func (s *Source) addedTables(ctx context.Context, old map[string]string) ([]snapshot.Table, error) {
	of, err := newFilter(connect.NewConfig(configDef(), old))
	if err != nil {
		return nil, fmt.Errorf("stored capture filter: %w", err)
	}
	now, err := s.tablesWithKeys(ctx, s.cat, &s.set.filter)
	if err != nil {
		return nil, err
	}
	var out []snapshot.Table
	for _, t := range now {
		schema, name, _ := strings.Cut(t.ID, ".")
		if !of.table(schema, name) {
			out = append(out, t)
		}
	}
	return out, nil
}

// incrConn returns the i-th connection of the snapshot reads, connecting if need be.
func (s *Source) incrConn(ctx context.Context, i int) (*pgx.Conn, error) {
	for len(s.incrConns) <= i {
		s.incrConns = append(s.incrConns, nil)
	}
	if c := s.incrConns[i]; c != nil && !c.IsClosed() {
		return c, nil
	}
	c, err := s.set.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.incrConns[i] = c
	return c, nil
}

// closeIncr releases the snapshot connections and drops the open windows.
func (s *Source) closeIncr(ctx context.Context) {
	s.dropPrefetch()
	s.incr.Reset()
	for i, c := range s.incrConns {
		if c != nil {
			_ = c.Close(ctx)
		}
		s.incrConns[i] = nil
	}
	clear(s.incrModels)
}

// model returns (building it on first use) how a task's table is read.
func (s *Source) model(ctx context.Context, task *snapshot.Task) (*incrModel, error) {
	key := task.Table + "\x00" + strings.Join(task.Key, ",") + "\x00" + task.Filter
	if m := s.incrModels[key]; m != nil {
		return m, nil
	}
	schema, name, _ := strings.Cut(task.Table, ".")
	var ref tableRef
	err := s.cat.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'r'`, schema, name).Scan(&ref.OID, &ref.Schema, &ref.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errTableGone
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", task.Table, err)
	}
	defs, err := tableColumns(ctx, s.cat, ref.OID, s.set.publication)
	if err != nil {
		return nil, err
	}
	t, err := s.newTable(ctx, ref.OID, ref.Schema, ref.Name, defs, task.Key)
	if err != nil {
		return nil, err
	}
	keyTypes := map[string]uint32{}
	rows, err := s.cat.Query(ctx, `SELECT attname, atttypid FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attname = ANY ($2)`, ref.OID, task.Key)
	if err != nil {
		return nil, fmt.Errorf("key types of %s: %w", task.Table, err)
	}
	for rows.Next() {
		var n string
		var oid uint32
		if err := rows.Scan(&n, &oid); err != nil {
			rows.Close()
			return nil, fmt.Errorf("key types of %s: %w", task.Table, err)
		}
		keyTypes[n] = oid
	}
	rows.Close()
	m := &incrModel{ref: ref, t: t, ncols: len(defs)}
	sel := make([]string, 0, len(defs)+len(task.Key))
	for _, d := range defs {
		sel = append(sel, quoteIdent(d.Name))
	}
	var order []string
	for _, k := range task.Key {
		oid, ok := keyTypes[k]
		if !ok {
			return nil, connect.Permanentf("snapshot of %s: key column %q does not exist", task.Table, k)
		}
		i := -1
		for j, d := range defs {
			if d.Name == k {
				i = j
			}
		}
		if i < 0 {
			sel = append(sel, quoteIdent(k))
			i = len(sel) - 1
		}
		m.keyCols = append(m.keyCols, i)
		m.keyOIDs = append(m.keyOIDs, oid)
		order = append(order, quoteIdent(k))
	}
	m.sel = "SELECT " + strings.Join(sel, ", ") + " FROM " + qualified(ref.Schema, ref.Name)
	m.order = strings.Join(order, ", ")
	if s.incrModels == nil {
		s.incrModels = map[string]*incrModel{}
	}
	s.incrModels[key] = m
	return m, nil
}

var errTableGone = errors.New("table no longer exists")

// chunkSQL is the query of the chunk after `after` (nil: the first).
func (m *incrModel) chunkSQL(task *snapshot.Task, after bool) string {
	var where []string
	if after {
		params := make([]string, len(m.keyOIDs))
		for i := range params {
			params[i] = "$" + strconv.Itoa(i+1)
		}
		where = append(where, "("+m.order+") > ("+strings.Join(params, ", ")+")")
	}
	if task.Filter != "" {
		where = append(where, "("+task.Filter+")")
	}
	q := m.sel
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + " ORDER BY " + m.order + " LIMIT " + strconv.Itoa(task.ChunkSize)
}

// readChunk reads the task's next chunk in the connection's open transaction; the rows are
// copied into one buffer.
func readChunk(ctx context.Context, c *pgconn.PgConn, m *incrModel, task *snapshot.Task) (rows [][][]byte, last []string, err error) {
	var args [][]byte
	if task.After != nil {
		if len(task.After) != len(m.keyOIDs) {
			return nil, nil, connect.Permanentf("snapshot of %s: stored key %v has %d values, the key %d columns", task.Table, task.After, len(task.After), len(m.keyOIDs))
		}
		for _, a := range task.After {
			args = append(args, []byte(a))
		}
	}
	q := m.chunkSQL(task, task.After != nil)
	var oids []uint32
	if args != nil {
		oids = m.keyOIDs
	}
	rr := c.ExecParams(ctx, q, args, oids, nil, []int16{pgtype.TextFormatCode})
	var buf []byte
	type span struct{ start, end int }
	var spans [][]span
	for rr.NextRow() {
		vals := rr.Values()
		row := make([]span, len(vals))
		for i, v := range vals {
			if v == nil {
				row[i] = span{-1, -1}
				continue
			}
			row[i] = span{len(buf), len(buf) + len(v)}
			buf = append(buf, v...)
		}
		spans = append(spans, row)
	}
	if _, err := rr.Close(); err != nil {
		return nil, nil, fmt.Errorf("snapshot of %s: %s: %w", task.Table, q, err)
	}
	rows = make([][][]byte, len(spans))
	for i, row := range spans {
		vals := make([][]byte, len(row))
		for j, sp := range row {
			if sp.start >= 0 {
				vals[j] = buf[sp.start:sp.end:sp.end]
			}
		}
		rows[i] = vals
	}
	if n := len(rows); n > 0 {
		for _, i := range m.keyCols {
			last = append(last, string(rows[n-1][i]))
		}
	}
	return rows, last, nil
}

// rawKey is the de-duplication key of a row: its chunk key's text values, length-prefixed.
func rawKeyString(buf []byte, vals [][]byte, idx []int) ([]byte, bool) {
	buf = buf[:0]
	for _, i := range idx {
		v := vals[i]
		if v == nil {
			buf = append(buf, 0xFF)
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
	}
	return buf, true
}

// estimate is the planner's estimate of a task's rows.
func estimate(ctx context.Context, c *pgx.Conn, m *incrModel, task *snapshot.Task) int64 {
	q := "EXPLAIN (FORMAT JSON) SELECT 1 FROM " + qualified(m.ref.Schema, m.ref.Name)
	if task.Filter != "" {
		q += " WHERE (" + task.Filter + ")"
	}
	var plan string
	if err := c.QueryRow(ctx, q).Scan(&plan); err != nil {
		return -1
	}
	var v []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	if json.Unmarshal([]byte(plan), &v) != nil || len(v) == 0 {
		return -1
	}
	return int64(v[0].Plan.Rows)
}

// openResult is the outcome of opening one window.
type openResult struct {
	task      *snapshot.Task
	read      *incrRead
	low, high pglogrepl.LSN
	total     int64
	err       error
}

// openWindows reads the next chunk of each task (on connections of their own, at once) and
// registers the windows with the engine.
func (s *Source) openWindows(ctx context.Context, tasks []*snapshot.Task) error {
	results := make([]openResult, len(tasks))
	models := make([]*incrModel, len(tasks))
	for i, task := range tasks {
		m, err := s.model(ctx, task)
		if errors.Is(err, errTableGone) {
			s.log.Warn("table of a snapshot no longer exists: skipped", "table", task.Table)
			s.incr.Abandon(task, "SKIPPED")
			return nil
		}
		if err != nil {
			return err
		}
		models[i] = m
		results[i].task = task
	}
	var wg sync.WaitGroup
	for i := range tasks {
		c, err := s.incrConn(ctx, i)
		if err != nil {
			return err
		}
		run := func() { results[i] = s.openWindow(ctx, c, models[i], tasks[i]) }
		if len(tasks) == 1 {
			run()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	wg.Wait()
	return s.register(ctx, results)
}

// register hands the windows of finished reads to the engine.
func (s *Source) register(ctx context.Context, results []openResult) error {
	for _, r := range results {
		if r.err != nil {
			for _, x := range results {
				if x.read != nil && x.read.conn != nil {
					_, _ = x.read.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
				}
			}
			return r.err
		}
	}
	for _, r := range results {
		if r.total >= 0 && r.task.Total < 0 {
			s.incr.SetTotal(r.task, r.total)
		}
		if s.incrRing.anyInvisible(r.read.snap) {
			// a transaction the stream already processed is not visible to the read yet
			// (its commit is in the WAL, its visibility a moment later): read it again
			s.log.Debug("snapshot chunk read before a streamed commit became visible; reading it again", "table", r.task.Table)
			if r.read.conn != nil {
				_, _ = r.read.conn.Exec(ctx, "ROLLBACK")
			}
			continue
		}
		snap := r.read.snap
		s.incr.Opened(&snapshot.Window{Task: r.task, Low: snapshot.Mark(r.low), High: snapshot.Mark(r.high), Invisible: snap.invisible, Data: r.read})
	}
	return nil
}

// startPrefetch reads the next chunks in the background when the engine knows them: their
// queries run on the server while this chunk's records are built and appended. The stream
// is not processed until finishPrefetch registered them. It cannot fail: what it cannot start
// (no model, no connection) the next Begin opens, and reports what is wrong. emitWindow calls
// it after the engine counted the chunk done, so an error there would have dropped the chunk.
func (s *Source) startPrefetch(ctx context.Context) {
	tasks := s.incr.Prefetch()
	if len(tasks) == 0 {
		return
	}
	models := make([]*incrModel, len(tasks))
	conns := make([]*pgx.Conn, len(tasks))
	for i, task := range tasks {
		m, err := s.model(ctx, task)
		if err != nil {
			return // the next Begin opens it, and reports what is wrong
		}
		c, err := s.incrConn(ctx, i)
		if err != nil {
			return // as above
		}
		models[i], conns[i] = m, c
	}
	s.prefetch = snapshot.StartReadAhead(len(tasks), func(ctx context.Context, i int) openResult {
		return s.openWindow(ctx, conns[i], models[i], tasks[i])
	})
}

// finishPrefetch waits for the read started by startPrefetch and registers its windows. A
// cancelled ctx leaves it for the next Read.
func (s *Source) finishPrefetch(ctx context.Context) error {
	results, err := s.prefetch.Wait(ctx)
	if err != nil {
		return err
	}
	s.prefetch = nil
	return s.register(ctx, results)
}

// dropPrefetch abandons a read ahead (the connection is lost or the source closes).
func (s *Source) dropPrefetch() {
	if s.prefetch != nil {
		s.prefetch.Drop()
		s.prefetch = nil
	}
}

// openWindow runs the queries of one window on c (see the comment at the top).
func (s *Source) openWindow(ctx context.Context, c *pgx.Conn, m *incrModel, task *snapshot.Task) (r openResult) {
	r.task, r.total = task, -1
	fail := func(what string, err error) openResult {
		r.err = fmt.Errorf("snapshot of %s: %s: %w", task.Table, what, err)
		if c.PgConn().TxStatus() != 'I' {
			_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
		return r
	}
	if task.Total < 0 {
		r.total = estimate(ctx, c, m, task)
	}
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()").Scan(&r.low); err != nil {
		return fail("low watermark", err)
	}
	if _, err := c.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"); err != nil {
		return fail("begin", err)
	}
	var snapText string
	if err := c.QueryRow(ctx, "SELECT pg_current_snapshot()::text").Scan(&snapText); err != nil {
		return fail("snapshot", err)
	}
	sn, err := parseSnapshot(snapText)
	if err != nil {
		return fail("snapshot", err)
	}
	read := &incrRead{model: m, snap: sn, readAt: s.now()}
	if task.Type == snapshot.TypeBlocking {
		read.conn = c
	} else {
		if read.rows, read.last, err = readChunk(ctx, c.PgConn(), m, task); err != nil {
			return fail("read", err)
		}
		read.exhausted = len(read.rows) < task.ChunkSize
		if _, err := c.Exec(ctx, "COMMIT"); err != nil {
			return fail("commit", err)
		}
	}
	if s.set.incr.Watermark == snapshot.WatermarkMessage {
		r.high, err = emitWatermark(ctx, c.PgConn(), s.env.Connector+" "+task.Table)
	} else {
		err = c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()").Scan(&r.high)
		s.wantWALEnd = max(s.wantWALEnd, r.high)
	}
	if err != nil {
		return fail("high watermark", err)
	}
	r.read = read
	return r
}

// emitWatermark writes a high watermark: a transactional logical decoding message, whose
// commit flushes the WAL even on a server with synchronous_commit off (the stream sends only
// flushed WAL: a non-transactional message could wait for the WAL writer). Every transaction
// committed before lies before its LSN.
func emitWatermark(ctx context.Context, c *pgconn.PgConn, content string) (pglogrepl.LSN, error) {
	q := "BEGIN; SET LOCAL synchronous_commit = local; SELECT pg_logical_emit_message(true, " + quoteLiteral(signalPrefix) + ", " + quoteLiteral(content) + ")::text; COMMIT"
	res, err := c.Exec(ctx, q).ReadAll()
	if err != nil {
		return 0, err
	}
	for _, r := range res {
		if len(r.Rows) == 1 && len(r.Rows[0]) == 1 {
			return pglogrepl.ParseLSN(string(r.Rows[0][0]))
		}
	}
	return 0, errors.New("pg_logical_emit_message returned no LSN")
}

// frontier is the stream position up to which every transaction has been processed.
func (s *Source) frontier() snapshot.Mark {
	if s.cur.End != 0 {
		return snapshot.Mark(s.cur.End)
	}
	return snapshot.Mark(s.cur.LSN)
}

// emitWindow emits a window's rows (for a blocking window, its next chunk) as one batch.
func (s *Source) emitWindow(ctx context.Context, w *snapshot.Window) (connect.Batch, error) {
	rd := w.Data.(*incrRead)
	m := rd.model
	task := w.Task
	if w.Blocking() {
		var err error
		rd.rows, rd.last, err = readChunk(ctx, rd.conn.PgConn(), m, task)
		if err != nil {
			_, _ = rd.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
			return connect.Batch{}, err
		}
		rd.exhausted = len(rd.rows) < task.ChunkSize
		if rd.exhausted {
			if _, err := rd.conn.Exec(ctx, "COMMIT"); err != nil {
				return connect.Batch{}, fmt.Errorf("snapshot of %s: commit: %w", task.Table, err)
			}
		}
	}
	base := s.cur.order()
	em := s.incr.StartEmit(w, base, s.frontier())
	t := m.t
	src := s.sourceRow(t, rd.readAt.UnixMilli(), "incremental", nil, nil, int64(w.High))
	recs := make([]connect.Record, 0, len(rd.rows)+4)
	var kb []byte
	for _, vals := range rd.rows {
		if len(vals) < m.ncols {
			return connect.Batch{}, fmt.Errorf("snapshot of %s: a row of %d columns, want %d", task.Table, len(vals), m.ncols)
		}
		kb, _ = rawKeyString(kb, vals, m.keyCols)
		if !em.Keep(string(kb)) {
			continue
		}
		err := t.decode(func(i int) (byte, []byte) {
			if vals[i] == nil {
				return kindNull, nil
			}
			return kindText, vals[i]
		})
		if err != nil {
			return connect.Batch{}, err
		}
		after, _, key := t.imageKey()
		version := pglogrepl.LSN(w.High)
		for _, p := range em.Partials(string(kb)) {
			// updates the read did not see, whose events lack unchanged TOAST values
			for _, f := range p.Image.(connect.Row) {
				after = after.Set(f.Name, f.Value)
			}
			version = max(version, pglogrepl.LSN(p.Version))
		}
		s.st.events.Add(1)
		recs = append(recs, s.record(t, &event{op: connect.OpRead, after: after, key: key, commit: rd.readAt, version: version, source: src, pos: em.Next()}))
	}
	s.st.addRows(task.Table, int64(len(rd.rows)))
	notes, end := em.Done(len(rd.rows), rd.last, rd.exhausted)
	recs = append(recs, notes...)
	rd.rows = nil
	if !w.Blocking() {
		s.startPrefetch(ctx)
	}
	s.engineOrder = end
	return connect.Batch{Records: recs, Position: connect.Position{Order: end, State: s.stateOf(s.cur)}}, nil
}

// stateOf is the State of a stream position with the incremental snapshot state.
func (s *Source) stateOf(p position) []byte {
	p.Incr = s.incr.State()
	return p.appendState(nil)
}

// incrStep does the engine's work at a boundary of the stream: it returns a batch to return
// (ok), or whether to hold the stream and how long to wait at most.
func (s *Source) incrStep(ctx context.Context, recs *[]connect.Record) (b connect.Batch, ok, hold bool, wait time.Duration, err error) {
	for {
		step := s.incr.Begin(s.cur.order(), s.frontier())
		switch step.Kind {
		case snapshot.StepNotify:
			if len(step.Records) == 0 {
				// commands applied without notifications: a batch carries the new state
				return s.batch(*recs), true, false, 0, nil
			}
			*recs = append(*recs, step.Records...)
			s.engineOrder = step.Records[len(step.Records)-1].Position.Order
			continue
		case snapshot.StepOpen:
			if len(*recs) > 0 {
				return s.batch(*recs), true, false, 0, nil
			}
			if err := s.openWindows(ctx, step.Tasks); err != nil {
				return connect.Batch{}, false, false, 0, err
			}
			if len(s.incr.Windows()) == 0 {
				// nothing opened (a read to do again): go on with the stream a little
				return connect.Batch{}, false, false, 50 * time.Millisecond, nil
			}
			continue
		case snapshot.StepEmit:
			if len(*recs) > 0 {
				return s.batch(*recs), true, false, 0, nil
			}
			b, err := s.emitWindow(ctx, step.Window)
			return b, err == nil, false, 0, err
		default:
			if s.wantWALEnd > pglogrepl.LSN(s.frontier()) && s.rcv != nil {
				s.rcv.requestReply()
			}
			return connect.Batch{}, false, step.Hold, step.Wait, nil
		}
	}
}

// touch reports a tuple's chunk key to the engine when a window of its table is open.
func (s *Source) touch(t *table, cols []tupleCol) {
	if key, ok := s.touchKey(t, cols); ok {
		tx := &s.stream.tx
		s.incr.Touch(t.id, key, snapshot.Mark(tx.commit), uint64(tx.xid))
	}
}

// touchPartial reports an update whose new tuple lacks unchanged TOAST values, with the image
// it has: the chunk row gets it applied instead of being dropped.
func (s *Source) touchPartial(t *table, cols []tupleCol, image connect.Row) {
	if key, ok := s.touchKey(t, cols); ok {
		tx := &s.stream.tx
		s.incr.TouchPartial(t.id, key, snapshot.Mark(tx.commit), uint64(tx.xid), snapshot.Partial{Image: image, Version: int64(tx.commit)})
	}
}

// touchKey is the de-duplication key of a tuple of a watched table.
func (s *Source) touchKey(t *table, cols []tupleCol) (string, bool) {
	if !s.incr.Watching(t.id) {
		return "", false
	}
	names := s.incrKeyNames(t.id)
	if !sameNames(t.incrKeyNames, names) {
		t.incrKey, t.incrKeyNames = t.incrKey[:0], names
		for _, n := range names {
			t.incrKey = append(t.incrKey, t.colIndex(n))
		}
	}
	buf := s.keyBuf[:0]
	for _, i := range t.incrKey {
		if i < 0 || i >= len(cols) {
			return "", false
		}
		c := &cols[i]
		if c.kind != 't' {
			if c.kind == 'u' {
				return "", false // an unchanged TOAST key value: the key is not known here
			}
			buf = append(buf, 0xFF)
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(len(c.data)))
		buf = append(buf, c.data...)
	}
	s.keyBuf = buf
	return string(buf), true
}

// incrKeyNames is the chunk key of the open window of a table.
func (s *Source) incrKeyNames(table string) []string {
	for _, w := range s.incr.Windows() {
		if w.Task.Table == table {
			return w.Task.Key
		}
	}
	return nil
}

func sameNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// signalTimeout bounds the handling of one signal row.
const signalTimeout = 30 * time.Second

// signalRow applies an insert into the signal table (columns id, type, data).
func (s *Source) signalRow(ctx context.Context, t *table, cols []tupleCol) error {
	get := func(name string) string {
		i := t.colIndex(name)
		if i < 0 || i >= len(cols) || cols[i].kind != 't' {
			return ""
		}
		return string(cols[i].data)
	}
	id, typ, data := get("id"), get("type"), get("data")
	if typ == "" {
		s.log.Warn("signal row without a type ignored", "table", t.id, "id", id)
		return nil
	}
	// The row is consumed from the stream: a Read cancelled now must not drop the signal, so
	// the command (a catalog read and a store write) runs to its end, within its own bound.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), signalTimeout)
	defer cancel()
	err := s.incr.SignalInline(cctx, typ, []byte(data), id)
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
