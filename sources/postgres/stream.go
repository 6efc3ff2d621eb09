package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// streamState is Read's decoding state of the replication stream.
type streamState struct {
	// the transaction committed at resumeLSN has its records up to index skip in the log
	resumeLSN pglogrepl.LSN
	skip      uint64

	inTx bool // between Begin and Commit, or replaying a streamed transaction
	tx   txState

	inStream  bool   // between Stream Start and Stream Stop
	streamXid uint32 // the transaction of the current stream block
	open      map[uint32]*spillFile
	replay    *spillReader
	replayF   *spillFile
	overlay   map[uint32]*table // relations sent inside the replayed transaction

	prevEnd pglogrepl.LSN // end of the last committed transaction, for source.sequence
}

type txState struct {
	xid    uint32
	commit pglogrepl.LSN
	end    pglogrepl.LSN
	ts     time.Time
	change uint64
	skip   uint64

	// made once per transaction for its records
	prefix    []byte // of the position states
	seqPrefix []byte // of source.sequence
	boxTs     any    // source.ts_ms
	boxTx     any    // source.txId
}

// newTx starts the state of a transaction.
func (s *Source) newTx(xid uint32, commit, end pglogrepl.LSN, ts time.Time) txState {
	st := s.stream
	seq := append([]byte(nil), `["`...)
	seq = strconv.AppendUint(seq, uint64(st.prevEnd), 10)
	seq = append(seq, `","`...)
	return txState{
		xid: xid, commit: commit, end: end, ts: ts, skip: st.skipFor(commit),
		prefix: txStatePrefix(s.epoch, commit), seqPrefix: seq, boxTs: ts.UnixMilli(), boxTx: int64(xid),
	}
}

func newStreamState(resume pglogrepl.LSN, skip uint64) *streamState {
	return &streamState{resumeLSN: resume, skip: skip, open: map[uint32]*spillFile{}, prevEnd: resume}
}

// discard removes the spill files of unfinished transactions (the server sends them again).
func (st *streamState) discard() {
	for xid, f := range st.open {
		_ = f.remove()
		delete(st.open, xid)
	}
	if st.replayF != nil {
		_ = st.replayF.remove()
		st.replayF, st.replay = nil, nil
	}
}

// skipFor is the index up to which the records of the transaction committed at commit are
// already in the log.
func (st *streamState) skipFor(commit pglogrepl.LSN) uint64 {
	switch {
	case commit == st.resumeLSN:
		return st.skip
	case commit < st.resumeLSN:
		return ^uint64(0) // the server does not send these; never emit them twice
	}
	return 0
}

// Message type bytes of pgoutput.
const (
	msgBegin        = 'B'
	msgCommit       = 'C'
	msgRelation     = 'R'
	msgType         = 'Y'
	msgInsert       = 'I'
	msgUpdate       = 'U'
	msgDelete       = 'D'
	msgTruncate     = 'T'
	msgMessage      = 'M'
	msgOrigin       = 'O'
	msgStreamStart  = 'S'
	msgStreamStop   = 'E'
	msgStreamCommit = 'c'
	msgStreamAbort  = 'A'
)

// recordEnd is the Record of the position that ends a transaction: above every record of
// its last change.
const recordEnd = 0xFFFF

// readStream returns the next batch of the stream.
func (s *Source) readStream(ctx context.Context) (connect.Batch, error) {
	if s.stream == nil {
		if err := s.startStream(ctx, s.cur); err != nil {
			return connect.Batch{}, err
		}
	}
	st := s.stream
	recs := make([]connect.Record, 0, s.set.maxBatch)
	var idle *time.Timer
	defer func() {
		if idle != nil {
			idle.Stop()
		}
	}()
	if s.prefetch != nil {
		// chunks read ahead: registered before the stream goes on
		if err := s.finishPrefetch(ctx); err != nil {
			return connect.Batch{}, err
		}
	}
	for len(recs) < s.set.maxBatch {
		if st.replay != nil {
			if err := s.replayNext(ctx, &recs); err != nil {
				return connect.Batch{}, err
			}
			continue
		}
		var hold bool
		var wait time.Duration
		if !st.inTx && !s.incr.Idle() {
			b, ok, h, w, err := s.incrStep(ctx, &recs)
			if err != nil {
				return connect.Batch{}, err
			}
			if ok {
				return b, nil
			}
			hold, wait = h, w
		}
		if hold {
			// a blocking snapshot holds the stream until its next chunk may go
			if len(recs) > 0 {
				return s.batch(recs), nil
			}
			if err := s.waitEngine(ctx, wait); err != nil {
				return connect.Batch{}, err
			}
			continue
		}
		var m walMsg
		select {
		case m = <-s.rcv.msgs:
		default:
			if len(recs) > 0 {
				return s.batch(recs), nil
			}
			before := s.frontier()
			s.idleAdvance()
			if s.frontier() != before && !s.incr.Idle() {
				continue // the frontier moved: a window may be complete
			}
			if s.heartbeatDue() {
				return s.batch(nil), nil
			}
			d := s.set.statusInterval
			if wait > 0 {
				d = min(d, wait)
			}
			if idle == nil {
				idle = time.NewTimer(d)
			} else {
				idle.Reset(d)
			}
			select {
			case m = <-s.rcv.msgs:
			case <-ctx.Done():
				return connect.Batch{}, ctx.Err()
			case <-s.rcv.done:
				return connect.Batch{}, s.rcv.err
			case <-s.incr.Wake():
				continue
			case <-idle.C:
				continue
			}
		}
		if err := s.handle(ctx, m, &recs); err != nil {
			return connect.Batch{}, err
		}
	}
	return s.batch(recs), nil
}

// batch wraps records with the current position.
func (s *Source) batch(recs []connect.Record) connect.Batch {
	return connect.Batch{Records: recs, Position: s.encodeCur()}
}

// encodeCur is the current position with the incremental snapshot state; its Order is not
// below the Order of the last record the snapshot engine made (a heartbeat right after a
// chunk, at the same stream position, must not go back).
func (s *Source) encodeCur() connect.Position {
	order := s.cur.order()
	if len(s.engineOrder) > 0 && string(s.engineOrder) > string(order) {
		order = s.engineOrder
	}
	return connect.Position{Order: order, State: s.stateOf(s.cur)}
}

// waitEngine waits, without reading the stream, until the snapshot engine may go on.
func (s *Source) waitEngine(ctx context.Context, wait time.Duration) error {
	if wait <= 0 {
		wait = time.Second
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.rcv.done:
		return s.rcv.err
	case <-s.incr.Wake():
	case <-t.C:
	}
	return nil
}

// heartbeatDue reports whether an empty batch should carry a newer position now: the
// position moved (transactions of tables not captured, the WAL end of an idle server) and
// the last batch is a status interval old, or the server asked for a reply (a server that
// shuts down waits until the slot has confirmed everything it sent).
func (s *Source) heartbeatDue() bool {
	if !s.rcv.pinged.Swap(false) && s.now().Sub(s.lastOut) < s.set.statusInterval {
		return false
	}
	emitted, err := decodePosition(s.emitted)
	if err != nil || emitted.Epoch != s.cur.Epoch || emitted.Snapshot != nil {
		return true
	}
	return string(s.cur.order()) > string(emitted.order()) || s.cur.End != emitted.End
}

// idleAdvance moves the position to the server's WAL end when no transaction is in flight:
// every transaction committed before it has been received and emitted, so the slot may
// confirm it once the log holds the position (the slot must not pile up WAL behind a
// database whose changes are all filtered out).
func (s *Source) idleAdvance() {
	st := s.stream
	w := pglogrepl.LSN(s.rcv.walEnd.Load())
	if st.inTx || st.replay != nil || len(s.rcv.msgs) > 0 {
		return
	}
	s.advanceTo(w)
}

func (s *Source) advanceTo(w pglogrepl.LSN) {
	if resume, _ := s.cur.resumeLSN(); w > resume {
		s.cur = position{Epoch: s.epoch, LSN: w, End: w}
	}
}

// handle processes one message of the stream.
func (s *Source) handle(ctx context.Context, m walMsg, recs *[]connect.Record) error {
	st := s.stream
	if len(m.data) == 0 {
		return nil
	}
	typ := m.data[0]
	if st.inStream {
		switch typ {
		case msgRelation, msgInsert, msgUpdate, msgDelete, msgTruncate:
			if len(m.data) < 5 {
				return fmt.Errorf("pgoutput: short streamed message %q", typ)
			}
			xid := binary.BigEndian.Uint32(m.data[1:5])
			f := st.open[st.streamXid]
			if f == nil {
				return fmt.Errorf("pgoutput: streamed change outside a stream of transaction %d", st.streamXid)
			}
			s.st.spilled.Add(int64(spillHeader + len(m.data)))
			return f.append(m.lsn, xid, m.data)
		case msgType, msgMessage, msgOrigin:
			return nil
		}
	}
	if typ == msgInsert || typ == msgUpdate || typ == msgDelete {
		if !st.inTx {
			return fmt.Errorf("pgoutput: change at %s outside a transaction", m.lsn)
		}
		if err := parseRowChange(m.data, false, &s.rc); err != nil {
			return connect.Permanent(fmt.Errorf("%w (at %s)", err, m.lsn))
		}
		return s.changeRow(ctx, &s.rc, m.lsn, recs, nil)
	}
	msg, err := pglogrepl.ParseV2(m.data, false)
	if err != nil {
		return fmt.Errorf("pgoutput: parse message %q at %s: %w", typ, m.lsn, err)
	}
	switch msg := msg.(type) {
	case *pglogrepl.BeginMessage:
		st.inTx = true
		st.tx = s.newTx(msg.Xid, msg.FinalLSN, 0, msg.CommitTime)
	case *pglogrepl.CommitMessage:
		if !st.inTx {
			return fmt.Errorf("pgoutput: commit at %s without begin", msg.CommitLSN)
		}
		s.endTx(msg.TransactionEndLSN)
	case *pglogrepl.RelationMessageV2:
		return s.relation(ctx, &msg.RelationMessage, s.tables)
	case *pglogrepl.TruncateMessageV2:
		if !st.inTx {
			return fmt.Errorf("pgoutput: truncate at %s outside a transaction", m.lsn)
		}
		return s.changeTruncate(&msg.TruncateMessage, m.lsn, recs, nil)
	case *pglogrepl.LogicalDecodingMessageV2:
		// a non-transactional message (a heartbeat) is decoded when its WAL record is read:
		// every transaction committed before it has been sent
		if !msg.Transactional && !st.inTx && st.replay == nil {
			s.advanceTo(msg.LSN)
		}
	case *pglogrepl.StreamStartMessageV2:
		st.inStream, st.streamXid = true, msg.Xid
		if st.open[msg.Xid] == nil {
			if s.spill == nil {
				return errors.New("pgoutput: streamed transaction, but protocol version 1 was asked for")
			}
			f, err := s.spill.create(msg.Xid)
			if err != nil {
				return err
			}
			st.open[msg.Xid] = f
			s.st.streamed.Add(1)
		}
	case *pglogrepl.StreamStopMessageV2:
		st.inStream = false
	case *pglogrepl.StreamAbortMessageV2:
		f := st.open[msg.Xid]
		if f == nil {
			return nil
		}
		if msg.SubXid == msg.Xid || msg.SubXid == 0 {
			delete(st.open, msg.Xid)
			return f.remove()
		}
		return f.abortSub(msg.SubXid)
	case *pglogrepl.StreamCommitMessageV2:
		st.inTx = true
		st.tx = s.newTx(msg.Xid, msg.CommitLSN, msg.TransactionEndLSN, msg.CommitTime)
		f := st.open[msg.Xid]
		delete(st.open, msg.Xid)
		if f == nil {
			s.endTx(msg.TransactionEndLSN)
			return nil
		}
		r, err := f.reader()
		if err != nil {
			_ = f.remove()
			return err
		}
		st.replay, st.replayF, st.overlay = r, f, map[uint32]*table{}
	}
	return nil
}

// replayNext emits the next spilled message of the streamed transaction being replayed.
func (s *Source) replayNext(ctx context.Context, recs *[]connect.Record) error {
	st := s.stream
	lsn, data, err := st.replay.next()
	if errors.Is(err, io.EOF) {
		rerr := st.replayF.remove()
		st.replay, st.replayF, st.overlay = nil, nil, nil
		s.endTx(st.tx.end)
		return rerr
	}
	if err != nil {
		return err
	}
	switch data[0] {
	case msgInsert, msgUpdate, msgDelete:
		if err := parseRowChange(data, true, &s.rc); err != nil {
			return connect.Permanent(fmt.Errorf("%w (spilled, at %s)", err, lsn))
		}
		return s.changeRow(ctx, &s.rc, lsn, recs, st.overlay)
	}
	msg, err := pglogrepl.ParseV2(data, true)
	if err != nil {
		return fmt.Errorf("pgoutput: parse spilled message %q at %s: %w", data[0], lsn, err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessageV2:
		return s.relation(ctx, &m.RelationMessage, st.overlay)
	case *pglogrepl.TruncateMessageV2:
		return s.changeTruncate(&m.TruncateMessage, lsn, recs, st.overlay)
	}
	return nil
}

// endTx finishes the current transaction: the position moves past it.
func (s *Source) endTx(end pglogrepl.LSN) {
	st := s.stream
	s.cur = position{Epoch: s.epoch, LSN: st.tx.commit, Change: st.tx.change, Record: recordEnd, End: end}
	st.inTx = false
	st.prevEnd = end
	s.incrRing.add(st.tx.xid)
	s.st.txs.Add(1)
	s.st.behind.Store(s.now().Sub(st.tx.ts).Milliseconds())
}

// relation records a table's description.
func (s *Source) relation(ctx context.Context, m *pglogrepl.RelationMessage, into map[uint32]*table) error {
	defs := make([]colDef, len(m.Columns))
	for i, c := range m.Columns {
		defs[i] = colDef{Name: c.Name, Type: c.DataType, Typmod: c.TypeModifier}
	}
	var key []string
	if s.set.filter.table(m.Namespace, m.RelationName) {
		var err error
		if key, err = keyColumns(ctx, s.cat, m.RelationID); err != nil {
			return err
		}
	}
	t, err := s.newTable(ctx, m.RelationID, m.Namespace, m.RelationName, defs, key)
	if err != nil {
		return err
	}
	into[m.RelationID] = t
	return nil
}

func (s *Source) lookupTable(relid uint32, overlay map[uint32]*table) (*table, error) {
	if t := overlay[relid]; t != nil {
		return t, nil
	}
	if t := s.tables[relid]; t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("pgoutput: change of relation %d before its Relation message", relid)
}

// tupleGetter reads column i of a tuple.
func tupleGetter(cols []tupleCol) func(i int) (byte, []byte) {
	return func(i int) (byte, []byte) {
		c := &cols[i]
		switch c.kind {
		case 't':
			return kindText, c.data
		case 'u':
			return kindUnchanged, nil
		}
		return kindNull, nil
	}
}

func checkTuple(t *table, cols []tupleCol) error {
	if len(cols) != len(t.cols) {
		return connect.Permanentf("pgoutput: %s.%s: a row of %d columns, the relation has %d", t.schema, t.name, len(cols), len(t.cols))
	}
	for i := range cols {
		if cols[i].kind == 'b' {
			return connect.Permanentf("pgoutput: %s.%s: binary column values were not asked for", t.schema, t.name)
		}
	}
	return nil
}

// rawKey returns the key columns' text of a tuple.
func rawKey(t *table, cols []tupleCol) [][]byte {
	out := make([][]byte, len(t.key))
	for j, i := range t.key {
		out[j] = cols[i].data
	}
	return out
}

// changeRow turns one Insert, Update or Delete into records.
func (s *Source) changeRow(ctx context.Context, rc *rowChange, lsn pglogrepl.LSN, recs *[]connect.Record, overlay map[uint32]*table) error {
	s.stream.tx.change++
	t, err := s.lookupTable(rc.relid, overlay)
	if err != nil {
		return err
	}
	if t.signal && rc.op == msgInsert && checkTuple(t, rc.new) == nil {
		if err := s.signalRow(ctx, t, rc.new); err != nil {
			return err
		}
	}
	if !t.captured {
		return nil
	}
	switch rc.op {
	case msgInsert:
		if err := checkTuple(t, rc.new); err != nil {
			return err
		}
		if err := t.decode(tupleGetter(rc.new)); err != nil {
			return err
		}
		after, unchanged, key := t.imageKey()
		if len(unchanged) > 0 {
			s.touchPartial(t, rc.new, after)
		} else {
			s.touch(t, rc.new)
		}
		s.emit(recs, t, 0, &event{op: connect.OpCreate, after: after, unchanged: unchanged, key: key, lsn: lsn})
	case msgUpdate:
		var before, oldKey connect.Row
		var oldRaw [][]byte
		if rc.old != nil {
			if err := checkTuple(t, rc.old); err != nil {
				return err
			}
			if err := t.decode(tupleGetter(rc.old)); err != nil {
				return err
			}
			before, _ = t.image()
			oldKey = t.keyRow()
			oldRaw = rawKey(t, rc.old)
			s.touch(t, rc.old)
		}
		if err := checkTuple(t, rc.new); err != nil {
			return err
		}
		if rc.old != nil {
			// an unchanged TOAST value the old row carries (REPLICA IDENTITY FULL) is known:
			// the after image holds it, nothing is marked unchanged
			for i := range rc.new {
				if rc.new[i].kind == 'u' && rc.old[i].kind == 't' {
					rc.new[i] = rc.old[i]
				}
			}
		}
		if err := t.decode(tupleGetter(rc.new)); err != nil {
			return err
		}
		after, unchanged, key := t.imageKey()
		if len(unchanged) > 0 {
			s.touchPartial(t, rc.new, after)
		} else {
			s.touch(t, rc.new)
		}
		if oldRaw != nil && t.key != nil && !sameKey(oldRaw, rawKey(t, rc.new)) {
			// a new primary key: Debezium's delete of the old key, its tombstone, then a create
			s.emit(recs, t, 0, &event{op: connect.OpDelete, before: before, key: oldKey, lsn: lsn})
			s.emit(recs, t, 1, &event{op: connect.OpDelete, key: oldKey, tombstone: true, lsn: lsn})
			s.emit(recs, t, 2, &event{op: connect.OpCreate, after: after, unchanged: unchanged, key: key, lsn: lsn})
			return nil
		}
		s.emit(recs, t, 0, &event{op: connect.OpUpdate, before: before, after: after, unchanged: unchanged, key: key, lsn: lsn})
	case msgDelete:
		if err := checkTuple(t, rc.old); err != nil {
			return err
		}
		s.touch(t, rc.old)
		if err := t.decode(tupleGetter(rc.old)); err != nil {
			return err
		}
		before, _ := t.image()
		key := t.keyRow()
		s.emit(recs, t, 0, &event{op: connect.OpDelete, before: before, key: key, lsn: lsn})
		s.emit(recs, t, 1, &event{op: connect.OpDelete, key: key, tombstone: true, lsn: lsn})
	}
	return nil
}

// changeTruncate emits one truncate record per captured table of a Truncate message.
func (s *Source) changeTruncate(m *pglogrepl.TruncateMessage, lsn pglogrepl.LSN, recs *[]connect.Record, overlay map[uint32]*table) error {
	s.stream.tx.change++
	for i, relid := range m.RelationIDs {
		t, err := s.lookupTable(relid, overlay)
		if err != nil {
			return err
		}
		if !t.captured || i >= recordEnd {
			continue
		}
		if s.incr.Watching(t.id) {
			s.incr.TouchAll(t.id, snapshot.Mark(s.stream.tx.commit), uint64(s.stream.tx.xid))
		}
		s.emit(recs, t, uint16(i), &event{op: connect.OpTruncate, lsn: lsn})
	}
	return nil
}

// emit appends the record of one event of the current transaction, unless the log already
// has it (resume) or its operation is skipped.
func (s *Source) emit(recs *[]connect.Record, t *table, rec uint16, ev *event) {
	tx := &s.stream.tx
	if tx.skip != 0 && tx.change<<16|uint64(rec) <= tx.skip {
		return
	}
	if s.set.skip[ev.op] || ev.tombstone && !s.set.tombstones {
		return
	}
	ev.pos = streamPosition(s.epoch, tx.commit, tx.change, rec, tx.prefix)
	ev.version = tx.commit
	ev.commit = tx.ts
	if !ev.tombstone {
		var buf [64]byte
		seq := append(buf[:0], tx.seqPrefix...)
		seq = strconv.AppendUint(seq, uint64(ev.lsn), 10)
		seq = append(seq, `"]`...)
		ev.srcTs, ev.srcSeq, ev.srcTx, ev.srcLSN = tx.boxTs, s.slab.String(s.slab.Text(seq)), tx.boxTx, s.slab.Int(int64(ev.lsn))
	}
	*recs = append(*recs, s.record(t, ev))
	s.cur = position{Epoch: s.epoch, LSN: tx.commit, Change: tx.change, Record: rec}
	if !ev.tombstone {
		s.st.events.Add(1)
	}
}
