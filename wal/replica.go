package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"
)

// The replica log is the partition log seen as a replication (Raft) log:
// one batch is one entry, carrying the entry's term and index in its
// header. It is the storage that wal/raft builds its raft.Storage on: the
// leader encodes batches with EncodeBatch (assigning offsets) and proposes
// their bytes; every replica, the leader included, appends the bytes it
// is told to persist with ReplicaLog.Append; the committed end moves only
// by ReplicaLog.Commit. Leader no-ops and configuration changes are control
// batches (EncodeControlBatch): no records, no offset.

// BatchInfo describes an encoded batch.
type BatchInfo struct {
	BaseOffset int64
	NextOffset int64 // offset after the batch (BaseOffset for a control batch)
	Term       uint64
	Index      uint64
	Control    bool
	Records    int32
	// Data is a control batch's payload; it aliases the batch.
	Data []byte
}

// DecodeBatchInfo verifies an encoded batch (checksum and structure) and
// describes it.
func DecodeBatchInfo(b []byte) (BatchInfo, error) {
	info, _, err := decodeBatchInfo(b)
	return info, err
}

func decodeBatchInfo(b []byte) (BatchInfo, batchHeader, error) {
	h, err := parseBatch(b, true)
	if err != nil {
		return BatchInfo{}, h, err
	}
	if h.size() != len(b) {
		return BatchInfo{}, h, fmt.Errorf("%d trailing bytes after the batch: %w", len(b)-h.size(), errBadLength)
	}
	info := BatchInfo{BaseOffset: h.baseOffset, NextOffset: h.nextOffset(), Term: h.term, Index: h.index,
		Control: h.attributes&attrControl != 0, Records: h.recordCount}
	if info.Control {
		info.Data = h.sourcePos
	}
	return info, h, nil
}

// EncodeBatch encodes recs as one batch at baseOffset with a replication
// term and index, as a leader does before proposing it. Records with a zero
// Timestamp get now.
func EncodeBatch(baseOffset int64, term, index uint64, recs []Record, opts AppendOptions, now time.Time) ([]byte, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("encode batch: empty batch: %w", ErrInvalidRecord)
	}
	var bb batchBuilder
	bb.encodeRecords(recs, opts.SourcePosition, opts.SourcePosition != nil, now.UnixMilli(), Uncompressed)
	h := batchHeader{
		baseOffset: baseOffset, lastOffsetDelta: int32(len(recs) - 1),
		baseTimestamp: bb.baseTS, maxTimestamp: bb.maxTS,
		producerID: -1, producerEpoch: -1, baseSequence: -1,
		term: term, index: index, deleteHorizon: -1, recordCount: int32(len(recs)),
	}
	if opts.ProducerID > 0 {
		h.producerID, h.producerEpoch, h.baseSequence = opts.ProducerID, opts.ProducerEpoch, opts.BaseSequence
	}
	return bb.finish(&h), nil
}

// EncodeControlBatch encodes a replication entry without records (a leader
// no-op or a configuration change, whose bytes go in data). It takes no
// offset: baseOffset is the offset the next records will have.
func EncodeControlBatch(baseOffset int64, term, index uint64, data []byte, now time.Time) []byte {
	var bb batchBuilder
	bb.encodeRecords(nil, data, true, now.UnixMilli(), Uncompressed)
	ms := now.UnixMilli()
	h := batchHeader{
		baseOffset: baseOffset, attributes: attrControl, lastOffsetDelta: -1,
		baseTimestamp: ms, maxTimestamp: ms,
		producerID: -1, producerEpoch: -1, baseSequence: -1,
		term: term, index: index, deleteHorizon: -1,
	}
	return bb.finish(&h)
}

// ReplicaLog is a partition's log as a replication log. Its methods may be
// called concurrently with reads, but Append, TruncateAfter, Commit,
// SaveHardState and InstallSnapshot must come from one goroutine (the
// replication loop), as Raft's Ready loop does.
type ReplicaLog struct {
	p *partition
}

// OpenReplica hands the partition to replication: from now on Log.Append
// refuses it, and the committed end is the end of the entry the replica
// state file names as committed (see ReplicaState). Call it right after
// Open, before serving readers: until then the committed end is the
// recovered end.
func (l *Log) OpenReplica(topicName string, part int32) (*ReplicaLog, error) {
	return l.openReplica(topicName, part, nil)
}

// ReplicaLog is OpenReplica with the committed index given by the caller
// instead of the replica state file (0 for none).
func (l *Log) ReplicaLog(topicName string, part int32, commitIndex uint64) (*ReplicaLog, error) {
	return l.openReplica(topicName, part, &commitIndex)
}

func (l *Log) openReplica(topicName string, part int32, commit *uint64) (*ReplicaLog, error) {
	p, err := l.partition(topicName, part)
	if err != nil {
		return nil, fmt.Errorf("replica log: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.writable(); err != nil {
		return nil, err
	}
	if p.replicated {
		return nil, fmt.Errorf("replica log %s: already open", p.name())
	}
	st, err := loadReplicaState(p.fs, p.dir)
	if err != nil {
		return nil, fmt.Errorf("replica log %s: %w", p.name(), err)
	}
	p.stateMu.Lock()
	p.rstate = st
	p.stateMu.Unlock()
	p.indexKnown = false
	if err := p.loadLastIndex(); err != nil {
		return nil, err
	}
	c := max(st.st.Commit, st.st.StartIndex)
	if commit != nil {
		c = *commit
	}
	if c > p.lastIndex {
		return nil, fmt.Errorf("replica log %s: committed index %d beyond the last entry %d", p.name(), c, p.lastIndex)
	}
	p.replicated = true
	p.recent = nil
	if err := p.setCommitted(c, true); err != nil {
		return nil, err
	}
	return &ReplicaLog{p: p}, nil
}

// entryPos locates one entry.
type entryPos struct {
	index, term uint64
	base        int64 // base offset of the segment holding it
	pos         int64 // byte position in that segment
	size        int64
	baseOffset  int64
	next        int64 // offset after the entry
	control     bool
}

// liteHeader is what the fixed header says, read without the batch.
type liteHeader struct {
	baseOffset  int64
	size        int
	control     bool
	term, index uint64
	next        int64
}

// peekHeader decodes the fixed header at the start of b (at least
// batchFixedHeader bytes) without verifying the batch.
func peekHeader(b []byte) (liteHeader, bool) {
	sz, ok := peekBatchSize(b)
	if !ok || len(b) < batchFixedHeader || b[offMagic] != batchMagic {
		return liteHeader{}, false
	}
	be := binary.BigEndian
	h := liteHeader{
		baseOffset: int64(be.Uint64(b[offBaseOffset:])),
		size:       sz,
		control:    int16(be.Uint16(b[offAttributes:]))&attrControl != 0,
		term:       be.Uint64(b[offTerm:]),
		index:      be.Uint64(b[offIndex:]),
	}
	h.next = h.baseOffset + int64(int32(be.Uint32(b[offLastOffsetDelta:]))) + 1
	return h, true
}

// readLite reads the fixed header of the batch at pos of s.
func readLite(s *segment, pos int64, buf []byte) (liteHeader, error) {
	if pos+batchFixedHeader > s.size {
		return liteHeader{}, &CorruptionError{File: s.path, Offset: pos, Reason: "batch header past the segment's end"}
	}
	if _, err := s.f.ReadAt(buf[:batchFixedHeader], pos); err != nil {
		return liteHeader{}, fmt.Errorf("read %s at %d: %w", s.path, pos, err)
	}
	h, ok := peekHeader(buf[:batchFixedHeader])
	if !ok || pos+int64(h.size) > s.size {
		return liteHeader{}, &CorruptionError{File: s.path, Offset: pos, Reason: "bad batch header"}
	}
	return h, nil
}

// startIndex returns the index and term of the entry before the first one
// held. Caller holds mu.
func (p *partition) startIndex() (uint64, uint64) {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	if p.rstate == nil {
		return 0, 0
	}
	return p.rstate.st.StartIndex, p.rstate.st.StartTerm
}

// loadLastIndex finds the replication index and term of the last batch
// that has one; with none, the log's start. Caller holds mu.
func (p *partition) loadLastIndex() error {
	if p.indexKnown {
		return nil
	}
	p.lastIndex, p.lastTerm = 0, 0
	for i := len(p.segs) - 1; i >= 0; i-- {
		idx, term, err := p.lastEntryOf(p.segs[i])
		if err != nil {
			return err
		}
		if idx != 0 {
			p.lastIndex, p.lastTerm = idx, term
			break
		}
	}
	if p.lastIndex == 0 {
		p.lastIndex, p.lastTerm = p.startIndex()
	}
	p.indexKnown = true
	return nil
}

// lastEntryOf returns the index and term of the last batch of s that has
// one (0, 0 when none), scanning from its last indexed batch and, if that
// finds none, from its start. Caller holds mu.
func (p *partition) lastEntryOf(s *segment) (uint64, uint64, error) {
	if s.lastIndex != 0 || s.size == 0 {
		return s.lastIndex, s.lastTerm, nil
	}
	buf := make([]byte, batchFixedHeader)
	for _, from := range []int64{floorOffset(s.offIdx, s.base, s.next), 0} {
		var idx, term uint64
		for pos := from; pos < s.size; {
			h, err := readLite(s, pos, buf)
			if err != nil {
				return 0, 0, err
			}
			if h.index != 0 {
				idx, term = h.index, h.term
			}
			pos += int64(h.size)
		}
		if idx != 0 {
			s.lastIndex, s.lastTerm = idx, term
			return idx, term, nil
		}
		if from == 0 {
			break
		}
	}
	return 0, 0, nil
}

// firstEntryOf returns the index of the first batch of s (0 when empty or
// not replicated). Caller holds mu.
func (p *partition) firstEntryOf(s *segment, buf []byte) (uint64, error) {
	if s.firstIdx != 0 || s.size == 0 {
		return s.firstIdx, nil
	}
	h, err := readLite(s, 0, buf)
	if err != nil {
		return 0, err
	}
	s.firstIdx = h.index
	return h.index, nil
}

// segByBase returns the position in segs of the segment with that base, or
// -1. Caller holds mu.
func (p *partition) segByBase(base int64) int {
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].base >= base })
	if i < len(p.segs) && p.segs[i].base == base {
		return i
	}
	return -1
}

// findIndex locates the batch with replication index idx: from the recent
// entries without I/O, else by a binary search over a segment's sparse
// offset index reading batch headers, then a short scan. Caller holds mu.
func (p *partition) findIndex(idx uint64) (entryPos, int, error) {
	if n := len(p.recent); idx != 0 && n > 0 && idx >= p.recent[0].index && idx <= p.recent[n-1].index {
		e := p.recent[idx-p.recent[0].index]
		if si := p.segByBase(e.base); si >= 0 {
			return e, si, nil
		}
	}
	if idx == 0 || idx > p.lastIndex {
		return entryPos{}, 0, fmt.Errorf("index %d: %w", idx, ErrNoEntry)
	}
	buf := make([]byte, batchFixedHeader)
	for si := len(p.segs) - 1; si >= 0; si-- {
		s := p.segs[si]
		first, err := p.firstEntryOf(s, buf)
		if err != nil {
			return entryPos{}, 0, err
		}
		if first == 0 || first > idx {
			continue
		}
		var ioErr error
		j := sort.Search(len(s.offIdx), func(k int) bool {
			if ioErr != nil {
				return true
			}
			h, err := readLite(s, int64(s.offIdx[k].pos), buf)
			if err != nil {
				ioErr = err
				return true
			}
			return h.index > idx
		})
		if ioErr != nil {
			return entryPos{}, 0, ioErr
		}
		pos := int64(0)
		if j > 0 {
			pos = int64(s.offIdx[j-1].pos)
		}
		for pos < s.size {
			h, err := readLite(s, pos, buf)
			if err != nil {
				return entryPos{}, 0, err
			}
			if h.index == idx {
				return entryPos{index: idx, term: h.term, base: s.base, pos: pos, size: int64(h.size),
					baseOffset: h.baseOffset, next: h.next, control: h.control}, si, nil
			}
			if h.index > idx {
				break
			}
			pos += int64(h.size)
		}
		break
	}
	return entryPos{}, 0, fmt.Errorf("index %d: %w", idx, ErrNoEntry)
}

// noteRecent records the entry just written; the window keeps the newest
// recentEntries entries.
func (p *partition) noteRecent(e entryPos) {
	const recentEntries = 4096
	if n := len(p.recent); n > 0 && p.recent[n-1].index+1 != e.index {
		p.recent = p.recent[:0]
	}
	if len(p.recent) >= 2*recentEntries {
		p.recent = append(p.recent[:0], p.recent[len(p.recent)-recentEntries:]...)
	}
	p.recent = append(p.recent, e)
}

// forgetRecentAfter drops the recent entries after index idx (a
// truncation). Caller holds mu.
func (p *partition) forgetRecentAfter(idx uint64) {
	for len(p.recent) > 0 && p.recent[len(p.recent)-1].index > idx {
		p.recent = p.recent[:len(p.recent)-1]
	}
}

// forgetRecentThrough drops the recent entries up to the last one held in
// the segment with that base (replaced by compaction) and those in
// segments that are gone (retention), keeping the run contiguous. Caller
// holds mu.
func (p *partition) forgetRecentThrough(base int64) {
	cut := 0
	for i, e := range p.recent {
		if e.base == base || p.segByBase(e.base) < 0 {
			cut = i + 1
		}
	}
	p.recent = append(p.recent[:0], p.recent[cut:]...)
}

// Append verifies and writes encoded batches, which must continue the log
// (base offset = the next offset, index = the last index + 1), and returns
// once they are durable. It does not move the committed end.
func (r *ReplicaLog) Append(ctx context.Context, batches [][]byte) error {
	p := r.p
	p.mu.Lock()
	if err := p.writable(); err != nil {
		p.mu.Unlock()
		return err
	}
	for _, b := range batches {
		h, err := parseBatch(b, true)
		if err == nil && h.size() != len(b) {
			err = fmt.Errorf("trailing bytes: %w", errBadLength)
		}
		if err == nil && h.baseOffset != p.next {
			err = fmt.Errorf("base offset %d, want %d", h.baseOffset, p.next)
		}
		if err == nil && h.index != p.lastIndex+1 {
			err = fmt.Errorf("index %d, want %d", h.index, p.lastIndex+1)
		}
		if err == nil && h.term < p.lastTerm {
			err = fmt.Errorf("term %d below the last term %d", h.term, p.lastTerm)
		}
		if err != nil {
			p.mu.Unlock()
			return fmt.Errorf("replica append to %s: %w", p.name(), err)
		}
		act := p.active()
		if act.size > 0 && (act.size+int64(len(b)) > p.cfg.SegmentBytes || p.next-act.base > 1<<31) {
			if err := p.roll(); err != nil {
				p.mu.Unlock()
				return err
			}
			act = p.active()
		}
		pos := act.size
		if err := p.preallocate(act, pos+int64(len(b))); err != nil {
			p.mu.Unlock()
			return fmt.Errorf("replica append to %s: %w", p.name(), err)
		}
		if _, err := act.f.WriteAt(b, pos); err != nil {
			err = p.fail(fmt.Errorf("write segment %s at %d: %w", act.path, pos, err))
			p.mu.Unlock()
			return err
		}
		act.noteBatch(&h, pos, p.cfg.IndexIntervalBytes)
		p.noteRecent(entryPos{index: h.index, term: h.term, base: act.base, pos: pos, size: int64(len(b)),
			baseOffset: h.baseOffset, next: h.nextOffset(), control: h.attributes&attrControl != 0})
		p.next = h.nextOffset()
		p.written += int64(len(b))
		p.lastIndex, p.lastTerm = h.index, h.term
		if h.producerID > 0 {
			e := p.producers[h.producerID]
			if e == nil {
				e = &producerEntry{}
				p.producers[h.producerID] = e
			}
			e.observe(&h)
		}
	}
	if p.l.opts.Fsync == UnsafeFsyncNever {
		p.durable = p.written
		p.mu.Unlock()
		return nil
	}
	return p.waitDurable(ctx, p.written)
}

// Last returns the index and term of the last entry (the log's start when
// it holds none) and the next offset.
func (r *ReplicaLog) Last() (index, term uint64, next int64) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastIndex, p.lastTerm, p.next
}

// Start returns the index and term of the entry just before the first one
// the log holds: entries up to it were removed by retention or replaced by
// a snapshot. Raft's FirstIndex is index+1.
func (r *ReplicaLog) Start() (index, term uint64) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startIndex()
}

// CommitIndex returns the index of the last committed entry.
func (r *ReplicaLog) CommitIndex() uint64 {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.commitIndex
}

// Term returns the term of entry idx. The entry before the first one held
// keeps its term (Start); below it, ErrCompacted; past the last entry,
// ErrNoEntry.
func (r *ReplicaLog) Term(idx uint64) (uint64, error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	si, st := p.startIndex()
	switch {
	case idx == si:
		return st, nil
	case idx < si:
		return 0, fmt.Errorf("index %d (log starts after %d): %w", idx, si, ErrCompacted)
	case idx > p.lastIndex:
		return 0, fmt.Errorf("index %d (last %d): %w", idx, p.lastIndex, ErrNoEntry)
	case idx == p.lastIndex:
		return p.lastTerm, nil
	}
	e, _, err := p.findIndex(idx)
	if err != nil {
		return 0, err
	}
	return e.term, nil
}

// Entries returns copies of the encoded batches with indexes lo..hi-1, in
// order, stopping before the total would pass maxBytes (at least one
// batch). Each is verified (checksum and header). lo at or before Start is
// ErrCompacted.
func (r *ReplicaLog) Entries(lo, hi uint64, maxBytes uint64) ([][]byte, error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if si, _ := p.startIndex(); lo <= si {
		return nil, fmt.Errorf("index %d (log starts after %d): %w", lo, si, ErrCompacted)
	}
	if hi > p.lastIndex+1 || lo >= hi {
		return nil, fmt.Errorf("entries %d..%d (last %d): %w", lo, hi, p.lastIndex, ErrNoEntry)
	}
	e, si, err := p.findIndex(lo)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	var total uint64
	buf := make([]byte, batchFixedHeader)
	idx, pos := lo, e.pos
	for ; si < len(p.segs) && idx < hi; si, pos = si+1, 0 {
		s := p.segs[si]
		for pos < s.size && idx < hi {
			h, err := readLite(s, pos, buf)
			if err != nil {
				return nil, err
			}
			if len(out) > 0 && total+uint64(h.size) > maxBytes {
				return out, nil
			}
			b := make([]byte, h.size)
			if _, err := s.f.ReadAt(b, pos); err != nil {
				return nil, fmt.Errorf("read %s at %d: %w", s.path, pos, err)
			}
			full, err := parseBatch(b, false)
			if err != nil {
				return nil, &CorruptionError{File: s.path, Offset: pos, Reason: err.Error()}
			}
			if full.index != idx {
				return nil, &CorruptionError{File: s.path, Offset: pos, Reason: fmt.Sprintf("entry index %d where %d belongs", full.index, idx)}
			}
			out = append(out, b)
			total += uint64(h.size)
			idx++
			pos += int64(h.size)
		}
	}
	if idx < hi && len(out) == 0 {
		return nil, fmt.Errorf("index %d: %w", idx, ErrNoEntry)
	}
	return out, nil
}

// Batch returns a copy of the encoded batch with replication index idx.
func (r *ReplicaLog) Batch(idx uint64) ([]byte, error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	e, si, err := p.findIndex(idx)
	if err != nil {
		return nil, err
	}
	b := make([]byte, e.size)
	if _, err := p.segs[si].f.ReadAt(b, e.pos); err != nil {
		return nil, fmt.Errorf("read %s at %d: %w", p.segs[si].path, e.pos, err)
	}
	if _, err := parseBatch(b, true); err != nil {
		return nil, &CorruptionError{File: p.segs[si].path, Offset: e.pos, Reason: err.Error()}
	}
	return b, nil
}

// Commit moves the committed end to the end of entry idx and wakes
// readers. It never moves it back.
func (r *ReplicaLog) Commit(idx uint64) error {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.setCommitted(idx, false)
}

// setCommitted makes entry idx the committed end; reset allows moving it
// back (only when a ReplicaLog is created). Caller holds mu.
func (p *partition) setCommitted(idx uint64, reset bool) error {
	if !reset && idx < p.commitIndex {
		return nil
	}
	var end, base, epos int64
	e, si, err := p.findIndex(idx)
	switch {
	case err == nil:
		end, base, epos = e.next, p.segs[si].base, e.pos+e.size
	case errors.Is(err, ErrNoEntry) && idx <= func() uint64 { s, _ := p.startIndex(); return s }():
		// The log starts after idx: its committed end is the log start.
		end, base, epos = p.segs[0].base, p.segs[0].base, 0
	default:
		return fmt.Errorf("commit %s at index %d: %w", p.name(), idx, err)
	}
	if reset {
		p.hw, p.hwBase, p.hwPos = end, base, epos
		p.commitIndex = idx
		close(p.hwCh)
		p.hwCh = make(chan struct{})
		return nil
	}
	p.commitIndex = idx
	if end == p.hw {
		p.hwBase, p.hwPos = base, epos
		return nil
	}
	if end > p.hw {
		p.hw, p.hwBase, p.hwPos = end, base, epos
		close(p.hwCh)
		p.hwCh = make(chan struct{})
	}
	return nil
}

// TruncateAfter removes every entry after index idx (an entry of a
// deposed leader's term). It refuses, with ErrTruncateCommitted, to remove
// a committed entry. The truncation is durable on return.
func (r *ReplicaLog) TruncateAfter(idx uint64) error {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.writable(); err != nil {
		return err
	}
	if idx >= p.lastIndex {
		return nil
	}
	if idx < p.commitIndex {
		return fmt.Errorf("truncate %s after index %d (commit index %d): %w", p.name(), idx, p.commitIndex, ErrTruncateCommitted)
	}
	e, si, err := p.findIndex(idx + 1)
	if err != nil {
		return fmt.Errorf("truncate %s after index %d: %w", p.name(), idx, err)
	}
	if e.baseOffset < p.hw && !e.control {
		return fmt.Errorf("truncate %s after index %d (offset %d < high watermark %d): %w", p.name(), idx, e.baseOffset, p.hw, ErrTruncateCommitted)
	}
	if si < len(p.segs)-1 {
		p.layoutGen++
	}
	if err := p.truncateAt(si, e.pos, e.baseOffset); err != nil {
		return p.fail(fmt.Errorf("truncate %s after index %d: %w", p.name(), idx, err))
	}
	p.forgetRecentAfter(idx)
	p.indexKnown = false
	if err := p.loadLastIndex(); err != nil {
		return p.fail(err)
	}
	return nil
}

// State returns the replica state: the last saved HardState and the log's
// start.
func (r *ReplicaLog) State() ReplicaState {
	p := r.p
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	return p.rstate.st
}

// SaveHardState durably stores Raft's term, vote and commit index in the
// replica state file; the log's start is kept. The commit index stored is
// never below the log's start.
func (r *ReplicaLog) SaveHardState(term, vote, commit uint64) error {
	p := r.p
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	st := p.rstate.st
	st.Term, st.Vote, st.Commit = term, vote, max(commit, st.StartIndex)
	if err := p.rstate.save(st); err != nil {
		return fmt.Errorf("save replica state of %s: %w", p.name(), err)
	}
	return nil
}

// setStart records a new log start before the entries up to it are
// removed. Caller holds mu.
func (p *partition) setStart(index, term uint64) error {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	st := p.rstate.st
	if index <= st.StartIndex {
		return nil
	}
	st.StartIndex, st.StartTerm = index, term
	st.Commit = max(st.Commit, index)
	return p.rstate.save(st)
}

// CheckProducer says what an append by a producer would be: a retry of a
// batch already in the log (its original offsets, Duplicate set), a new
// batch (nil, nil), or refused (ErrProducerFenced, ErrOutOfOrderSequence).
// The state covers every entry written, committed or not, as a leader
// needs before proposing.
func (r *ReplicaLog) CheckProducer(id int64, epoch int16, baseSeq int32, count int) (*AppendResult, error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.producers[id]
	if e == nil || id <= 0 {
		return nil, nil
	}
	dup, err := e.check(epoch, baseSeq, count)
	if err != nil || dup == nil {
		return nil, err
	}
	return &AppendResult{BaseOffset: dup.firstOffset, LastOffset: dup.lastOffset, Duplicate: true, LogAppendTime: msTime(dup.timestamp)}, nil
}

// Config returns the topic configuration of the partition.
func (r *ReplicaLog) Config() TopicConfig { return r.p.cfg }

// Name returns "topic-partition".
func (r *ReplicaLog) Name() string { return r.p.name() }

// truncateAt cuts the log at byte pos of segment si, which becomes the
// active segment, and rebuilds what depends on the tail. Caller holds mu.
func (p *partition) truncateAt(si int, pos, next int64) error {
	p.filesMu.Lock()
	defer p.filesMu.Unlock()
	// Newest first, so that a crash leaves a log that is a prefix.
	for i := len(p.segs) - 1; i > si; i-- {
		s := p.segs[i]
		s.f.Close()
		for _, name := range []string{s.indexPath(), s.timeIndexPath(), s.path} {
			if err := removeIfExists(p.fs, name); err != nil {
				return err
			}
		}
	}
	s := p.segs[si]
	for _, name := range []string{s.indexPath(), s.timeIndexPath()} {
		if err := removeIfExists(p.fs, name); err != nil {
			return err
		}
	}
	if err := p.fs.SyncDir(p.dir); err != nil {
		return err
	}
	f, err := p.fs.OpenRW(s.path)
	if err != nil {
		return err
	}
	if err := f.Truncate(pos); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	s.f.Close()
	s.f = f
	if _, bad, err := scanSegment(s, pos, p.cfg.IndexIntervalBytes, nil); err != nil || bad != nil {
		return errors.Join(err, bad)
	}
	p.segs = append([]*segment(nil), p.segs[:si+1]...)
	p.next = max(next, s.base)
	p.durable = p.written
	p.created = p.l.now()
	if p.hw > p.next {
		p.hw = p.next
	}
	if p.hwBase > s.base || p.hwBase == s.base && p.hwPos > pos {
		p.hwBase, p.hwPos = s.base, pos
	}
	// Producer state: drop snapshots past the new end and rebuild.
	names, err := p.fs.ReadDir(p.dir)
	if err != nil {
		return err
	}
	var snaps []int64
	for _, n := range names {
		if off, ok := parseSnapshotName(n); ok {
			snaps = append(snaps, off)
		}
	}
	p.producers = map[int64]*producerEntry{}
	return p.rebuildProducers(snaps)
}

// HighWatermark returns the committed end: the offset after the last
// committed record.
func (r *ReplicaLog) HighWatermark() int64 {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hw
}
