package mysql

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// The binlog stream.
//
// A replication.BinlogSyncer (its own goroutine, started by open and stopped by close) decodes
// events into a bounded channel (max.queue.size events); Read turns them into records. Every
// transaction is identified by the position of its first event (the GTID event, or BEGIN), and
// its row changes are numbered from 1; a record's position is (transaction start, row number),
// so a restart resumes inside a transaction: the reader starts at the transaction's first event
// and skips the row changes the log already holds. Lost connections are retried here with
// exponential backoff for reconnect.timeout.ms, from that same resume point.

// txShared is what the records of one transaction share, made on its first record.
type txShared struct {
	ready                    bool
	src                      [srcFields]connect.Field // source block; db, table, server_id and row are set per record
	version                  int64
	statePrefix, stateSuffix []byte         // a record's State is prefix, ,"row":N, suffix
	order                    []byte         // epoch | phase | file number | transaction start
	srcs                     []sharedSource // by row number in the event
}

type streamer struct {
	s *Source

	// connection
	mu      sync.Mutex
	syncer  *replication.BinlogSyncer
	events  chan binlogItem
	errs    chan error
	stop    chan struct{}
	watchWG sync.WaitGroup
	cancel  context.CancelFunc
	qconn   *client.Conn // queries for DDL processing

	// where the binlog is read
	file     string
	seq      uint32
	checksum bool

	// the transaction being read
	inTx   bool
	txFile string
	txSeq  uint32
	txPos  uint32
	txGTID string
	txTime time.Time
	txRow  uint32 // row changes of the transaction seen so far
	thread any

	// resume: in the transaction at skipFile/skipPos, the first skip row changes are in the log
	skipFile string
	skipPos  uint32
	skip     uint32
	skipGTID string
	starting bool // no event of the resume point seen yet

	// after the last complete transaction
	boundFile string
	boundSeq  uint32
	boundPos  uint32

	// frontier is the binlog position up to which every transaction has been processed (the
	// incremental snapshot engine's view of the stream); lastTx the start of the last
	// transaction processed
	frontier snapshot.Mark
	lastTx   snapshot.Mark

	cur      *replication.RowsEvent // rows event being emitted
	curRow   int                    // next row (image) index in cur
	curHdr   *replication.EventHeader
	curFinal bool // cur's values are final (decode.go)

	tx      txShared   // of the current transaction's records
	arena   posArena   // positions of the records
	fields  fieldArena // rows of the records
	bx      boxer      // values of the records
	rc      *recycler  // the field and row slabs of routed batches, for new ones
	nowMs   any        // processing time of the current read, boxed
	sid     uint32     // the last server id boxed, and its box
	sidBox  any
	lastLen int // records of the last batch, to size the next

	tables map[uint64]*tableMeta

	// the producer (after start); read takes its batches
	out        chan streamItem
	pcancel    context.CancelFunc
	pwg        sync.WaitGroup
	err        error // the error that ended the stream, returned by every later read
	pendingErr error
}

func newStreamer(s *Source, st *state) *streamer {
	m := &streamer{s: s, tables: map[uint64]*tableMeta{}, rc: &recycler{}}
	// only the records' fields and rows are recycled: most values are boxed by the decoder,
	// in memory of its own that a rows event carries from one batch into the next
	m.fields.rc, m.bx.rc = m.rc, m.rc
	m.setResume(st.File, st.Pos, st.Row, st.GTID)
	m.boundFile, m.boundPos = st.File, st.Pos
	m.boundSeq, _ = fileSeq(st.File)
	m.frontier = mark(m.boundSeq, m.boundPos)
	return m
}

func (m *streamer) setResume(file string, pos, row uint32, gtid string) {
	m.skipFile, m.skipPos, m.skip, m.skipGTID = file, pos, row, gtid
	m.file = file
	m.seq, _ = fileSeq(file)
	m.starting = true
	m.inTx = false
	m.cur = nil
}

func (m *streamer) flavor() string { return m.s.flavor }

// open connects the binlog reader at the resume point.
func (m *streamer) open(ctx context.Context) error {
	s := m.s
	period := 30 * time.Second
	if hb := s.cfg.heartbeat; hb > 0 && hb < period {
		period = max(hb, time.Second)
	}
	m.events = make(chan binlogItem, s.cfg.maxQueue)
	dec := newRowDecoder(s)
	m.errs = make(chan error, 1)
	m.stop = make(chan struct{})
	cfg := replication.BinlogSyncerConfig{
		ServerID:                s.cfg.serverID,
		Flavor:                  m.flavor(),
		Host:                    s.cfg.host,
		Port:                    uint16(s.cfg.port),
		User:                    s.cfg.user,
		Password:                s.cfg.password,
		Charset:                 "utf8mb4",
		TimestampStringLocation: time.UTC,
		RenderJSONAsMySQLText:   true,
		HeartbeatPeriod:         period,
		ReadTimeout:             3 * period,
		DisableRetrySync:        true,
		EventCacheCount:         1,
		DiscardGTIDSet:          true,
		Logger:                  s.log.With("component", "binlog"),
		RowsEventDecodeFunc:     dec.decode,
		SynchronousEventHandler: &eventHandler{ch: m.events, stop: m.stop, dec: dec},
	}
	syncer := replication.NewBinlogSyncer(cfg)
	pos := gomysql.Position{Name: m.skipFile, Pos: m.skipPos}
	streamer, err := syncer.StartSync(pos)
	if err != nil {
		syncer.Close()
		if serverIDClash(err) {
			return connect.Permanentf("database.server.id %d is already used by another binlog reader of this server: choose another, unique id (%w)", s.cfg.serverID, err)
		}
		return fmt.Errorf("start binlog reader at %s:%d: %w", pos.Name, pos.Pos, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	m.mu.Lock()
	m.syncer, m.cancel = syncer, cancel
	m.mu.Unlock()
	m.watchWG.Add(1)
	go func() {
		defer m.watchWG.Done()
		// with a synchronous handler the streamer only ever returns the stream's error
		_, err := streamer.GetEvent(wctx)
		if wctx.Err() != nil {
			return
		}
		select {
		case m.errs <- err:
		default:
		}
	}()
	s.log.Info("binlog reader started", "file", pos.Name, "pos", pos.Pos, "skip_rows", m.skip)
	return nil
}

// binlogItem is an event for the reader: final marks a rows event whose values the row
// decoder made (decode.go); err (permanent) ends the stream.
type binlogItem struct {
	ev    *replication.BinlogEvent
	final bool
	err   error
}

// eventHandler runs in the binlog reader's goroutine: it finishes the decoding of each event
// and queues it for the reader.
type eventHandler struct {
	ch   chan<- binlogItem
	stop <-chan struct{}
	dec  *rowDecoder
}

var errStopped = errors.New("binlog reader stopped")

func (h *eventHandler) HandleEvent(e *replication.BinlogEvent) error {
	final, err := h.dec.finish(e)
	select {
	case h.ch <- binlogItem{ev: e, final: final, err: err}:
		if err != nil {
			return errStopped
		}
		return nil
	case <-h.stop:
		return errStopped
	}
}

// shutdown stops the producer and the binlog reader, and waits for their goroutines.
func (m *streamer) shutdown() {
	if m.pcancel != nil {
		m.pcancel()
		m.pwg.Wait()
		m.pcancel = nil
	}
	m.close()
}

// close stops the binlog reader and waits for its goroutines.
func (m *streamer) close() {
	m.mu.Lock()
	syncer, cancel, stop := m.syncer, m.cancel, m.stop
	m.syncer, m.cancel = nil, nil
	m.mu.Unlock()
	if syncer == nil {
		return
	}
	close(stop)
	cancel()
	syncer.Close()
	m.watchWG.Wait()
	if m.qconn != nil {
		m.qconn.Close()
		m.qconn = nil
	}
}

// reconnect restarts the reader at the current resume point, with backoff.
func (m *streamer) reconnect(ctx context.Context, cause error) error {
	s := m.s
	m.close()
	s.stats.connected.Store(false)
	if m.inTx {
		m.setResume(m.txFile, m.txPos, m.txRow, m.txGTID)
	} else {
		m.setResume(m.boundFile, m.boundPos, 0, "")
	}
	deadline := s.now().Add(s.cfg.reconnectTimeout)
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		s.log.Warn("binlog connection lost; reconnecting", "err", cause, "attempt", attempt, "file", m.skipFile, "pos", m.skipPos)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		err := m.open(ctx)
		if err == nil {
			s.stats.reconnects.Add(1)
			s.stats.connected.Store(true)
			return nil
		}
		if connect.IsPermanent(err) {
			return err
		}
		cause = err
		if s.now().After(deadline) {
			return fmt.Errorf("binlog reader: no connection for %v: %w", s.cfg.reconnectTimeout, err)
		}
		wait = min(wait*2, 10*time.Second)
	}
}

// next returns the next event; block=false returns none (a zero item) when none is ready.
// Blocking, it also returns none when timeout fires, or with woke set when wake does (the
// incremental snapshot engine may go on, or asked to be asked again at poke).
func (m *streamer) next(ctx context.Context, block bool, timeout <-chan time.Time, wake <-chan struct{}, poke <-chan time.Time) (it binlogItem, woke bool, err error) {
	select {
	case it := <-m.events:
		return it, false, nil
	default:
	}
	if m.pendingErr != nil {
		err := m.pendingErr
		m.pendingErr = nil
		return binlogItem{}, false, err
	}
	if !block {
		return binlogItem{}, false, nil
	}
	select {
	case it := <-m.events:
		return it, false, nil
	case err := <-m.errs:
		// events decoded before the error come first
		select {
		case it := <-m.events:
			m.pendingErr = err
			return it, false, nil
		default:
		}
		return binlogItem{}, false, err
	case <-ctx.Done():
		return binlogItem{}, false, ctx.Err()
	case <-timeout:
		return binlogItem{}, false, nil
	case <-wake:
		return binlogItem{}, true, nil
	case <-poke:
		return binlogItem{}, true, nil
	}
}

// batch collects the records of one Read.
type batch struct {
	recs []connect.Record
}

// start opens the binlog reader and starts the producer.
func (m *streamer) start(ctx context.Context) error {
	if err := m.open(ctx); err != nil {
		return err
	}
	m.out = make(chan streamItem, 2)
	pctx, cancel := context.WithCancel(context.Background())
	m.pcancel = cancel
	m.pwg.Add(1)
	go func() {
		defer m.pwg.Done()
		m.produce(pctx)
	}()
	return nil
}

// streamItem is a batch of the producer for read, or the error that ends the stream.
type streamItem struct {
	b   connect.Batch
	err error
}

// produce makes batches until ctx is cancelled or an error ends the stream. It runs in a
// goroutine of its own, so that the records of the next batch are built while the runtime
// handles the last one.
func (m *streamer) produce(ctx context.Context) {
	for {
		b, err := m.readBatch(ctx)
		if err != nil && ctx.Err() != nil {
			return
		}
		select {
		case m.out <- streamItem{b: b, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// read implements Source.Read while streaming: the producer's next batch.
func (m *streamer) read(ctx context.Context) (connect.Batch, error) {
	if m.err != nil {
		return connect.Batch{}, m.err
	}
	select {
	case it := <-m.out:
		m.err = it.err
		return it.b, it.err
	case <-ctx.Done():
		return connect.Batch{}, ctx.Err()
	}
}

// newGeneration starts the memory of a new batch (see recycler).
func (m *streamer) newGeneration() {
	m.fields.reset()
	m.bx.reset()
	// the shared source blocks are the last batch's memory, which its Release recycles
	clear(m.tx.srcs)
}

// readBatch reads the next batch from the binlog (in the producer).
func (m *streamer) readBatch(ctx context.Context) (connect.Batch, error) {
	s := m.s
	// a backlog fills batches: size the next like the last
	b := &batch{recs: m.rc.records(min(max(m.lastLen, 64), s.cfg.maxBatch))}
	m.nowMs = s.now().UnixMilli()
	m.newGeneration()
	var hb <-chan time.Time
	if s.cfg.heartbeat > 0 {
		t := time.NewTimer(s.cfg.heartbeat)
		defer t.Stop()
		hb = t.C
	}
	in := s.incr
	var poke *time.Timer
	defer func() {
		if poke != nil {
			poke.Stop()
		}
	}()
	for {
		if in.parts != nil {
			// the rest of an emitted chunk, before the stream goes on
			return in.nextPart(), nil
		}
		if m.cur != nil {
			if err := m.emitRows(b); err != nil {
				return connect.Batch{}, err
			}
			if len(b.recs) >= s.cfg.maxBatch {
				return m.finish(b), nil
			}
		}
		var wake <-chan struct{}
		var pokeC <-chan time.Time
		if !in.e.Idle() || in.pf != nil {
			if m.atBoundary() {
				out, ok, hold, wait, err := m.incrStep(ctx, b)
				if err != nil {
					return connect.Batch{}, err
				}
				if ok {
					return out, nil
				}
				if hold {
					// a blocking snapshot holds the stream until its next chunk may go
					if len(b.recs) > 0 {
						return m.finish(b), nil
					}
					if err := m.waitEngine(ctx, wait); err != nil {
						return connect.Batch{}, err
					}
					continue
				}
				if wait > 0 {
					if poke == nil {
						poke = time.NewTimer(wait)
					} else {
						poke.Reset(wait)
					}
					pokeC = poke.C
				}
			}
		}
		// also while the engine is idle: a snapshot command wakes it (on an idle server no
		// binlog event would come for it)
		wake = in.e.Wake()
		it, woke, err := m.next(ctx, len(b.recs) == 0, hb, wake, pokeC)
		if it.err != nil {
			return connect.Batch{}, it.err
		}
		if err != nil {
			if ctx.Err() != nil {
				return connect.Batch{}, ctx.Err()
			}
			if errors.Is(err, errStopped) {
				return connect.Batch{}, err
			}
			if perm := m.permanent(err); perm != nil {
				return connect.Batch{}, perm
			}
			if err := m.reconnect(ctx, err); err != nil {
				return connect.Batch{}, err
			}
			continue
		}
		if it.ev == nil {
			if woke {
				continue // the engine may go on
			}
			if len(b.recs) > 0 {
				return m.finish(b), nil
			}
			// heartbeat: the newest position, so an idle or filtered stream advances
			return connect.Batch{Position: s.incrPosition(m.position())}, nil
		}
		if err := m.handle(ctx, it.ev, it.final, b); err != nil {
			return connect.Batch{}, err
		}
		m.noteEvent(it.ev)
		if len(b.recs) >= s.cfg.maxBatch {
			return m.finish(b), nil
		}
	}
}

// permanent turns stream errors that reconnecting cannot fix into Permanent errors.
func (m *streamer) permanent(err error) error {
	if serverIDClash(err) {
		return connect.Permanentf("database.server.id %d is already used by another binlog reader of this server: choose another, unique id (%w)", m.s.cfg.serverID, err)
	}
	msg := err.Error()
	if strings.Contains(msg, "1236") || strings.Contains(msg, "Could not find first log file") || strings.Contains(msg, "purged") {
		return connect.Permanentf("binlog position %s:%d is no longer readable on the server: %w", m.skipFile, m.skipPos, err)
	}
	var ee *replication.EventError
	if errors.As(err, &ee) {
		return connect.Permanentf("undecodable binlog event: %w", err)
	}
	return nil
}

func (m *streamer) finish(b *batch) connect.Batch {
	m.lastLen = len(b.recs)
	s := m.s
	n := 0
	for i := range b.recs {
		if b.recs[i].Value != nil {
			n++
		}
	}
	s.stats.events.Add(int64(n))
	if len(b.recs) > 0 {
		s.stats.behindMs.Store(max(0, s.now().UnixMilli()-b.recs[len(b.recs)-1].Timestamp.UnixMilli()))
	}
	return connect.Batch{Records: b.recs, Position: m.s.incrPosition(m.position()), Release: m.rc.batch(&m.fields, &m.bx, b.recs, nil)}
}

// position is where a restart resumes now: inside the current transaction, or after the
// last complete one.
func (m *streamer) position() connect.Position {
	e := m.s.epoch
	if m.inTx && !m.starting {
		return connect.Position{
			Order: appendStreamOrder(nil, e, m.txSeq, m.txPos, m.txRow, 0xFF),
			State: appendStreamState(nil, e, m.txFile, m.txPos, m.txRow, m.txGTID),
		}
	}
	if m.starting && m.skip > 0 {
		seq, _ := fileSeq(m.skipFile)
		return connect.Position{
			Order: appendStreamOrder(nil, e, seq, m.skipPos, m.skip, 0xFF),
			State: appendStreamState(nil, e, m.skipFile, m.skipPos, m.skip, m.skipGTID),
		}
	}
	return connect.Position{
		Order: appendStreamOrder(nil, e, m.boundSeq, m.boundPos, 0, 0),
		State: appendStreamState(nil, e, m.boundFile, m.boundPos, 0, ""),
	}
}

// handle processes one event.
func (m *streamer) handle(ctx context.Context, ev *replication.BinlogEvent, final bool, b *batch) error {
	s := m.s
	h := ev.Header
	artificial := h.Flags&replication.LOG_EVENT_ARTIFICIAL_F != 0 || h.LogPos == 0
	start := uint32(0)
	if !artificial && h.LogPos >= h.EventSize {
		start = h.LogPos - h.EventSize
	}
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		m.file = string(e.NextLogName)
		m.seq, _ = fileSeq(m.file)
		if skipSeq, _ := fileSeq(m.skipFile); m.starting && m.seq > skipSeq {
			// the resume point was the end of its file (a server that crashed, or was
			// restarted, started a new file after it): everything from here on is new
			if m.skip > 0 {
				return connect.Permanentf("binlog position %s:%d is not the start of a transaction (the file ends before): the stored position does not fit this server's binlog", m.skipFile, m.skipPos)
			}
			m.starting = false
		}
		if !m.inTx && !m.starting {
			m.boundFile, m.boundSeq, m.boundPos = m.file, m.seq, uint32(e.Position)
		}
		f := m.file
		s.stats.binlogFile.Store(&f)
		return nil
	case *replication.FormatDescriptionEvent:
		m.checksum = e.ChecksumAlgorithm == replication.BINLOG_CHECKSUM_ALG_CRC32
		return nil
	case *replication.HeartbeatEvent:
		return nil
	}
	if artificial {
		return nil
	}
	s.stats.binlogPos.Store(int64(h.LogPos))
	if m.starting {
		if m.file != m.skipFile || start < m.skipPos {
			return nil
		}
		if start != m.skipPos && m.skip > 0 {
			return connect.Permanentf("binlog position %s:%d is not the start of a transaction (the next event starts at %d): the stored position does not fit this server's binlog", m.skipFile, m.skipPos, start)
		}
		m.starting = false
	}
	switch e := ev.Event.(type) {
	case *replication.MariadbGTIDEvent:
		return m.beginTx(start, h, e.GTID.String())
	case *replication.GTIDEvent:
		return m.beginTx(start, h, mysqlGTID(e.SID, e.GNO))
	case *replication.GtidTaggedLogEvent:
		return m.beginTx(start, h, mysqlGTID(e.SID, e.GNO))
	case *replication.QueryEvent:
		return m.query(ctx, start, h, e, b)
	case *replication.XIDEvent:
		m.endTx(h.LogPos)
		return nil
	case *replication.TableMapEvent:
		return m.tableMap(ev, e)
	case *replication.RowsEvent:
		if !m.inTx {
			if err := m.beginTx(start, h, ""); err != nil {
				return err
			}
		}
		m.cur, m.curRow, m.curHdr, m.curFinal = e, 0, h, final
		return m.emitRows(b)
	case *replication.TransactionPayloadEvent:
		for _, inner := range e.Events {
			if err := m.handle(ctx, inner, false, b); err != nil {
				return err
			}
			// a compressed transaction's rows are emitted whole (into one batch)
			for m.cur != nil {
				if err := m.emitRows(b); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return nil
}

func mysqlGTID(sid []byte, gno int64) string {
	u, err := uuid.FromBytes(sid)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d", u, gno)
}

func (m *streamer) beginTx(start uint32, h *replication.EventHeader, gtid string) error {
	m.inTx = true
	m.txFile, m.txSeq, m.txPos = m.file, m.seq, start
	m.txGTID = gtid
	m.txTime = time.Unix(int64(h.Timestamp), 0)
	m.txRow = 0
	m.thread = nil
	m.tx.ready = false
	if m.skip > 0 {
		if m.txFile != m.skipFile || m.txPos != m.skipPos {
			m.skip = 0
		} else if m.skipGTID != "" && gtid != "" && gtid != m.skipGTID {
			return connect.Permanentf("binlog position %s:%d holds transaction %s, not %s as stored: the server's binlog no longer matches the stored position", m.txFile, m.txPos, gtid, m.skipGTID)
		}
	}
	return nil
}

func (m *streamer) endTx(next uint32) {
	if m.inTx {
		m.s.stats.txns.Add(1)
		m.lastTx = max(m.lastTx, mark(m.txSeq, m.txPos))
	}
	m.inTx = false
	m.skip = 0
	m.boundFile, m.boundSeq, m.boundPos = m.file, m.seq, next
}

// slot advances the row counter of the transaction and reports whether that row change must be
// emitted (false when a restart skips it because the log holds it).
func (m *streamer) slot() bool {
	m.txRow++
	return m.skip == 0 || m.txRow > m.skip
}

func (m *streamer) tableMap(ev *replication.BinlogEvent, e *replication.TableMapEvent) error {
	raw := tableMapBody(ev, m.checksum)
	if old := m.tables[e.TableID]; old.same(raw) {
		return nil
	}
	meta := &tableMeta{raw: append([]byte(nil), raw...)}
	if m.s.decodes(string(e.Schema), string(e.Table)) {
		t, err := m.s.tableFromMap(e)
		if err != nil {
			return err
		}
		meta.tbl = t
	}
	m.tables[e.TableID] = meta
	return nil
}

// emitRows emits the rows of cur until the batch is full.
func (m *streamer) emitRows(b *batch) error {
	e := m.cur
	var t *table
	if meta := m.tables[e.TableID]; meta != nil {
		t = meta.tbl
	}
	var op connect.Op
	step := 1
	switch e.Type() {
	case replication.EnumRowsEventTypeInsert:
		op = connect.OpCreate
	case replication.EnumRowsEventTypeUpdate:
		op, step = connect.OpUpdate, 2
	case replication.EnumRowsEventTypeDelete:
		op = connect.OpDelete
	default:
		m.cur = nil
		return nil
	}
	done, err := m.emitImages(b, t, op, step, e.Rows)
	if done {
		m.cur = nil
	}
	return err
}

// emitImages emits the row changes of rows (one image each, two for updates) from m.curRow on
// until the batch is full; done reports that every row was handled. t is nil for a table that
// is not captured.
func (m *streamer) emitImages(b *batch, t *table, op connect.Op, step int, rows [][]any) (done bool, err error) {
	s := m.s
	for m.curRow+step <= len(rows) {
		i := m.curRow
		m.curRow += step
		if !m.slot() || t == nil {
			continue
		}
		if t.signal {
			if op == connect.OpCreate && len(rows[i]) == len(t.cols) {
				if err := m.signalRow(t, rows[i]); err != nil {
					return false, err
				}
			}
			continue
		}
		if s.cfg.skip[op] {
			s.stats.skipped.Add(1)
			continue
		}
		if err := m.rowChange(b, t, op, rows[i:i+step], i/step); err != nil {
			return false, err
		}
		if len(b.recs) >= s.cfg.maxBatch && m.curRow < len(rows) {
			return false, nil
		}
	}
	return true, nil
}

// rowChange emits the records of one row change: images holds its after image (insert), its
// before image (delete) or both (update).
func (m *streamer) rowChange(b *batch, t *table, op connect.Op, images [][]any, rowInEvent int) error {
	for _, img := range images {
		if len(img) != len(t.cols) {
			return connect.Permanentf("row event of %s has %d columns, its table map %d", t.id(), len(img), len(t.cols))
		}
	}
	var beforeSrc, afterSrc []any
	switch op {
	case connect.OpCreate:
		afterSrc = images[0]
	case connect.OpUpdate:
		beforeSrc, afterSrc = images[0], images[1]
	case connect.OpDelete:
		beforeSrc = images[0]
	}
	nk := len(t.key)
	if t.keyPrefix {
		nk = 0 // the key shares the image's fields
	}
	if op == connect.OpUpdate && len(t.key) > 0 && !sameRawKey(t, beforeSrc, afterSrc) {
		// an update that changes the key: Debezium emits a delete of the old key (and its
		// tombstone) and a create of the new one
		del := m.fields.newBlock(t.nOut, 0, nk)
		if err := m.fillImage(del.before, t, beforeSrc); err != nil {
			return err
		}
		oldKey, err := m.fillKey(del.key, t, beforeSrc, del.before)
		if err != nil {
			return err
		}
		m.touch(t, oldKey)
		m.addRecord(b, t, connect.OpDelete, &del, del.before, nil, oldKey, rowInEvent, 0)
		if m.s.cfg.tombstones {
			m.addTombstone(b, t, oldKey, 1)
		}
		cre := m.fields.newBlock(0, t.nOut, nk)
		if err := m.fillImage(cre.after, t, afterSrc); err != nil {
			return err
		}
		key, err := m.fillKey(cre.key, t, afterSrc, cre.after)
		if err != nil {
			return err
		}
		m.touch(t, key)
		m.addRecord(b, t, connect.OpCreate, &cre, nil, cre.after, key, rowInEvent, 2)
		return nil
	}
	nb, na := 0, 0
	if beforeSrc != nil {
		nb = t.nOut
	}
	if afterSrc != nil {
		na = t.nOut
	}
	blk := m.fields.newBlock(nb, na, nk)
	var before, after connect.Row
	if beforeSrc != nil {
		before = blk.before
		if err := m.fillImage(before, t, beforeSrc); err != nil {
			return err
		}
	}
	if afterSrc != nil {
		after = blk.after
		if err := m.fillImage(after, t, afterSrc); err != nil {
			return err
		}
	}
	keySrc, keyImg := afterSrc, after
	if keySrc == nil {
		keySrc, keyImg = beforeSrc, before
	}
	key, err := m.fillKey(blk.key, t, keySrc, keyImg)
	if err != nil {
		return err
	}
	m.touch(t, key)
	m.addRecord(b, t, op, &blk, before, after, key, rowInEvent, 0)
	if op == connect.OpDelete && m.s.cfg.tombstones {
		m.addTombstone(b, t, key, 1)
	}
	return nil
}

// sameRawKey reports whether the key columns of two decoded images are equal.
func sameRawKey(t *table, a, b []any) bool {
	for _, i := range t.key {
		x, y := a[i], b[i]
		switch xv := x.(type) {
		case []byte:
			yv, ok := y.([]byte)
			if !ok || !bytes.Equal(xv, yv) {
				return false
			}
		case nil, string, int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, float32, float64:
			if x != y { // comparable dynamic type: never panics
				return false
			}
		default:
			// other decoded types (decimals, ...): compare their JSON
			xj, _ := connect.AppendJSON(nil, x)
			yj, _ := connect.AppendJSON(nil, y)
			if !bytes.Equal(xj, yj) {
				return false
			}
		}
	}
	return true
}

// fillImage converts a decoded row into dst, whose length is t.nOut.
func (m *streamer) fillImage(dst connect.Row, t *table, row []any) error {
	for i := range t.cols {
		c := &t.cols[i]
		if c.excluded {
			continue
		}
		v := row[i]
		if !m.curFinal {
			var err error
			if v, err = c.binlogValue(v, &m.s.opts, &m.bx); err != nil {
				return connect.Permanentf("decode %s: %w", t.id(), err)
			}
		}
		if c.mask != nil {
			v = c.mask(v)
		}
		dst[c.out] = connect.Field{Name: c.name, Value: v}
	}
	return nil
}

// fillKey fills dst (len(t.key) fields) with the key of a decoded row and returns it boxed, or
// nil for a table without a key. Key columns that appear unmasked in img take its values.
func (m *streamer) fillKey(dst connect.Row, t *table, row []any, img connect.Row) (any, error) {
	if len(t.key) == 0 {
		return nil, nil
	}
	if t.keyPrefix && img != nil {
		return m.bx.row(img[:len(t.key):len(t.key)]), nil
	}
	for j, i := range t.key {
		c := &t.cols[i]
		if img != nil && !c.excluded && c.mask == nil {
			dst[j] = img[c.out]
			continue
		}
		v := row[i]
		if !m.curFinal {
			var err error
			if v, err = c.binlogValue(v, &m.s.opts, &m.bx); err != nil {
				return nil, connect.Permanentf("decode key of %s: %w", t.id(), err)
			}
		}
		dst[j] = connect.Field{Name: c.name, Value: v}
	}
	return m.bx.row(dst), nil
}

// addRecord appends the change event of the current transaction's row change m.txRow.
func (m *streamer) addRecord(b *batch, t *table, op connect.Op, blk *block, before, after connect.Row, key any, rowInEvent int, part byte) {
	tx := m.txShared()
	b.recs = append(b.recs, connect.Record{
		Topic: t.topic, Partition: -1, Offset: -1, Timestamp: m.txTime,
		Key: key, Value: blk.envelope(&m.bx, before, after, m.source(t, rowInEvent), op, m.nowMs), Version: tx.version,
		Position: m.recordPosition(b, part),
	})
}

// source returns the boxed source block of a record of the current transaction. Records of
// one batch, transaction, table and server that share their row number in the event share one
// block (a 1000-row transaction spans rows events of a few dozen rows each).
func (m *streamer) source(t *table, rowInEvent int) any {
	tx := m.txShared()
	sid := m.curHdr.ServerID
	if rowInEvent < len(tx.srcs) {
		if c := tx.srcs[rowInEvent]; c.t == t && c.sid == sid && c.box != nil {
			return c.box
		}
	}
	// cut from the batch's arena, as its records are: newGeneration forgets the shared blocks
	// when a new batch starts, so none outlives the batch that holds it
	src := m.fields.take(srcFields)
	copy(src, tx.src[:])
	src[srcDB].Value = t.dbBox
	src[srcTable].Value = t.nameBox
	src[srcServerID].Value = m.serverID(sid)
	src[srcRow].Value = boxInt(int64(rowInEvent))
	box := m.bx.row(src)
	if rowInEvent < maxSharedSources {
		if rowInEvent >= len(tx.srcs) {
			tx.srcs = append(tx.srcs, make([]sharedSource, rowInEvent+1-len(tx.srcs))...)
		}
		tx.srcs[rowInEvent] = sharedSource{t: t, sid: sid, box: box}
	}
	return box
}

// maxSharedSources bounds the source blocks a transaction keeps for sharing.
const maxSharedSources = 1024

// sharedSource is a source block shared by the records of a transaction with one row number.
type sharedSource struct {
	t   *table
	sid uint32
	box any
}

func (m *streamer) addTombstone(b *batch, t *table, key any, part byte) {
	if key == nil {
		return
	}
	b.recs = append(b.recs, connect.Record{
		Topic: t.topic, Partition: -1, Offset: -1, Timestamp: m.txTime,
		Key: key, Version: m.txShared().version,
		Position: m.recordPosition(b, part),
	})
}

// serverID boxes a server id, once per distinct id in a row.
func (m *streamer) serverID(id uint32) any {
	if m.sidBox == nil || m.sid != id {
		m.sid, m.sidBox = id, int64(id)
	}
	return m.sidBox
}

// txShared returns what the records of the current transaction share, made on its first record.
func (m *streamer) txShared() *txShared {
	tx := &m.tx
	if tx.ready {
		return tx
	}
	s := m.s
	tx.src = s.srcTemplate
	tx.src[srcTsMs].Value = m.txTime.UnixMilli()
	tx.src[srcSnapshot].Value = "false"
	tx.src[srcGTID].Value = nilIfEmpty(m.txGTID)
	tx.src[srcFile].Value = m.txFile
	tx.src[srcPos].Value = int64(m.txPos)
	tx.src[srcThread].Value = m.thread
	tx.version = version(m.txSeq, m.txPos)
	tx.statePrefix = statePrefix(s.epoch, m.txFile, m.txPos)
	tx.stateSuffix = stateSuffix(m.txGTID)
	tx.order = appendStreamOrder(tx.order[:0], s.epoch, m.txSeq, m.txPos, 0, 0)[:13]
	clear(tx.srcs)
	tx.srcs = tx.srcs[:0]
	tx.ready = true
	return tx
}

// recordPosition is the position right after the current row change (part of it).
func (m *streamer) recordPosition(b *batch, part byte) connect.Position {
	tx := m.txShared()
	a := &m.arena
	a.reserve(len(tx.order) + 5 + len(tx.statePrefix) + len(`,"row":`) + 10 + len(tx.stateSuffix))
	start := len(a.buf)
	a.buf = append(a.buf, tx.order...)
	a.buf = binary.BigEndian.AppendUint32(a.buf, m.txRow)
	a.buf = append(a.buf, part)
	order := a.cut(start)
	start = len(a.buf)
	a.buf = append(a.buf, tx.statePrefix...)
	if m.txRow > 0 {
		a.buf = append(a.buf, `,"row":`...)
		a.buf = strconv.AppendUint(a.buf, uint64(m.txRow), 10)
	}
	a.buf = append(a.buf, tx.stateSuffix...)
	return connect.Position{Order: order, State: a.cut(start)}
}

// setThread sets the thread id of the current transaction's source blocks.
func (m *streamer) setThread(id int64) {
	m.thread = id
	m.tx.src[srcThread].Value = m.thread
	clear(m.tx.srcs) // the shared source blocks name the old thread
}

// query handles BEGIN, COMMIT and DDL statements.
func (m *streamer) query(ctx context.Context, start uint32, h *replication.EventHeader, e *replication.QueryEvent, b *batch) error {
	q := strings.TrimSpace(string(e.Query))
	switch {
	case strings.EqualFold(q, "BEGIN"):
		if !m.inTx {
			if err := m.beginTx(start, h, ""); err != nil {
				return err
			}
		}
		m.setThread(int64(e.SlaveProxyID))
		return nil
	case strings.EqualFold(q, "COMMIT"):
		m.endTx(h.LogPos)
		return nil
	}
	if !m.inTx {
		if err := m.beginTx(start, h, ""); err != nil {
			return err
		}
	}
	m.setThread(int64(e.SlaveProxyID))
	if err := m.ddl(ctx, h, string(e.Schema), q, b); err != nil {
		return err
	}
	m.endTx(h.LogPos)
	return nil
}

// ddl applies a DDL statement: the cached table maps of the tables it touches are dropped, its
// history entry is stored, and the schema change event (row 1 of the statement) and truncate
// events (row 2 on) are emitted.
func (m *streamer) ddl(ctx context.Context, h *replication.EventHeader, db, q string, b *batch) error {
	s := m.s
	st := parseDDL(q, db)
	var touched []tableName
	for _, t := range st.tables {
		touched = append(touched, t)
	}
	for _, r := range st.renames {
		touched = append(touched, r[0], r[1])
	}
	captured := false
	for _, t := range touched {
		if s.cfg.filter.table(t.db, t.table) {
			captured = true
		}
	}
	switch st.kind {
	case ddlCreateDatabase, ddlDropDatabase, ddlAlterDatabase:
		captured = s.cfg.filter.database(st.database)
		db = st.database
	}
	if !captured {
		m.slot()
		return nil
	}
	if len(touched) > 0 && touched[0].db != "" {
		db = touched[0].db
	}
	// a DDL invalidates the cached table maps (new ones follow in the binlog) and the
	// definitions incremental snapshots read chunks with
	clear(m.tables)
	clear(s.incr.models)
	if st.kind == ddlTruncate {
		for _, t := range st.tables {
			m.touchAll(t.db, t.table)
		}
	}
	if !s.history.has(m.txFile, m.txPos) {
		entry := &ddlEntry{V: 1, File: m.txFile, Pos: m.txPos, GTID: m.txGTID, TsMs: m.txTime.UnixMilli(), DB: db, DDL: q}
		defs, err := m.definitions(ctx, st)
		if err != nil {
			return err
		}
		entry.Tables = defs
		if err := s.history.putDDL(ctx, entry); err != nil {
			return err
		}
	}
	if m.slot() && s.cfg.schemaChanges {
		m.addSchemaChange(b, h, db, q)
	}
	if st.kind == ddlTruncate && !s.cfg.skip[connect.OpTruncate] {
		for _, t := range st.tables {
			if !m.slot() || !s.cfg.filter.table(t.db, t.table) {
				continue
			}
			tbl := &table{db: t.db, name: t.table}
			s.finishTable(tbl, nil)
			m.curHdr = h
			src := s.sourceBlock(m.txTime.UnixMilli(), "false", t.db, t.table, h.ServerID, nilIfEmpty(m.txGTID), m.txFile, m.txPos, 0, m.thread)
			ev := connect.ChangeEvent{Source: src, Op: connect.OpTruncate, TsMs: s.now().UnixMilli()}
			b.recs = append(b.recs, connect.Record{
				Topic: tbl.topic, Partition: -1, Offset: -1, Timestamp: m.txTime, Value: ev.Row(),
				Version: version(m.txSeq, m.txPos), Position: m.recordPosition(b, 0),
			})
		}
	}
	return nil
}

// definitions reads the definitions a DDL left, for the history and schema change events.
func (m *streamer) definitions(ctx context.Context, st ddlStmt) ([]tableDef, error) {
	var defs []tableDef
	add := func(typ string, n tableName) error {
		if !m.s.cfg.filter.table(n.db, n.table) {
			return nil
		}
		def := tableDef{Type: typ, ID: n.db + "." + n.table}
		if typ != "DROP" {
			c, err := m.queryConn(ctx)
			if err != nil {
				return err
			}
			stop := context.AfterFunc(ctx, func() { abort(c) })
			t, infos, err := m.s.readTable(c, n.db, n.table)
			stop()
			if err != nil {
				m.qconn.Close()
				m.qconn = nil
				return err
			}
			if t == nil {
				return nil // gone again since (a later DDL); the history keeps the statement
			}
			for _, ic := range infos {
				def.Columns = append(def.Columns, columnDef{Name: ic.name, Type: strings.ToUpper(ic.columnType), Charset: ic.charset, Optional: ic.nullable})
			}
			for _, i := range t.order {
				def.PK = append(def.PK, t.cols[i].name)
			}
		}
		defs = append(defs, def)
		return nil
	}
	var err error
	switch st.kind {
	case ddlCreateTable:
		err = add("CREATE", st.tables[0])
	case ddlAlterTable, ddlTruncate:
		if len(st.renames) > 0 {
			if err = add("DROP", st.renames[0][0]); err == nil {
				err = add("CREATE", st.renames[0][1])
			}
		} else {
			err = add("ALTER", st.tables[0])
		}
	case ddlDropTable:
		for _, t := range st.tables {
			if err = add("DROP", t); err != nil {
				break
			}
		}
	case ddlRenameTable:
		for _, r := range st.renames {
			if err = add("DROP", r[0]); err != nil {
				break
			}
			if err = add("CREATE", r[1]); err != nil {
				break
			}
		}
	}
	return defs, err
}

func (m *streamer) queryConn(ctx context.Context) (*client.Conn, error) {
	if m.qconn != nil {
		return m.qconn, nil
	}
	c, err := m.s.connect(ctx)
	if err != nil {
		return nil, err
	}
	m.qconn = c
	return c, nil
}

// addSchemaChange emits a schema change event to the topic <topic.prefix>, shaped like
// Debezium's: {source, ts_ms, databaseName, schemaName, ddl, tableChanges}.
func (m *streamer) addSchemaChange(b *batch, h *replication.EventHeader, db, q string) {
	s := m.s
	src := s.sourceBlock(m.txTime.UnixMilli(), "false", db, "", h.ServerID, nilIfEmpty(m.txGTID), m.txFile, m.txPos, 0, m.thread)
	var changes []any
	if e := s.history.get(m.txFile, m.txPos); e != nil {
		for _, d := range e.Tables {
			dbn, tn, _ := strings.Cut(d.ID, ".")
			var cols []any
			for i, c := range d.Columns {
				typeName, _, _ := strings.Cut(c.Type, "(")
				typeName, _, _ = strings.Cut(typeName, " ")
				cols = append(cols, connect.Row{
					{Name: "name", Value: c.Name},
					{Name: "typeName", Value: typeName},
					{Name: "typeExpression", Value: c.Type},
					{Name: "charsetName", Value: nilIfEmpty(c.Charset)},
					{Name: "position", Value: int64(i + 1)},
					{Name: "optional", Value: c.Optional},
				})
			}
			pk := make([]any, len(d.PK))
			for i, p := range d.PK {
				pk[i] = p
			}
			var tbl any
			if d.Type != "DROP" {
				tbl = connect.Row{{Name: "primaryKeyColumnNames", Value: pk}, {Name: "columns", Value: cols}}
			}
			changes = append(changes, connect.Row{
				{Name: "type", Value: d.Type},
				{Name: "id", Value: fmt.Sprintf("%q.%q", dbn, tn)},
				{Name: "table", Value: tbl},
			})
		}
	}
	if changes == nil {
		changes = []any{}
	}
	value := connect.Row{
		{Name: "source", Value: src},
		{Name: "ts_ms", Value: s.now().UnixMilli()},
		{Name: "databaseName", Value: db},
		{Name: "schemaName", Value: nil},
		{Name: "ddl", Value: q},
		{Name: "tableChanges", Value: changes},
	}
	b.recs = append(b.recs, connect.Record{
		Topic: s.cfg.prefix, Partition: -1, Offset: -1, Timestamp: m.txTime,
		Key: connect.Row{{Name: "databaseName", Value: db}}, Value: value,
		Version: version(m.txSeq, m.txPos), Position: m.recordPosition(b, 0),
	})
}
