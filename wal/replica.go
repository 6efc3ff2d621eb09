package wal

import (
	"context"
	"errors"
	"fmt"
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

var (
	// ErrReplicated is returned by Log.Append on a partition owned by a
	// ReplicaLog: appends go through replication.
	ErrReplicated = errors.New("partition is replicated: append through its replica log")
	// ErrTruncateCommitted is returned by TruncateAfter for a truncation
	// that would remove committed entries. A replica asked to do that must
	// stop, not comply.
	ErrTruncateCommitted = errors.New("truncation would remove committed entries")
	// ErrNoEntry is returned by ReplicaLog.Batch for an index the log does
	// not hold (never written, truncated, or removed by retention).
	ErrNoEntry = errors.New("no entry at that index")
)

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
	h, err := parseBatch(b, true)
	if err != nil {
		return BatchInfo{}, err
	}
	if h.size() != len(b) {
		return BatchInfo{}, fmt.Errorf("%w: %d trailing bytes after the batch", errBadLength, len(b)-h.size())
	}
	info := BatchInfo{BaseOffset: h.baseOffset, NextOffset: h.nextOffset(), Term: h.term, Index: h.index,
		Control: h.attributes&attrControl != 0, Records: h.recordCount}
	if info.Control {
		info.Data = h.sourcePos
	}
	return info, nil
}

// EncodeBatch encodes recs as one batch at baseOffset with a replication
// term and index, as a leader does before proposing it. Records with a zero
// Timestamp get now.
func EncodeBatch(baseOffset int64, term, index uint64, recs []Record, opts AppendOptions, now time.Time) ([]byte, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("encode batch: %w: empty batch", ErrInvalidRecord)
	}
	var bb batchBuilder
	bb.encodeRecords(recs, opts.SourcePosition, opts.SourcePosition != nil, now.UnixMilli())
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
	bb.encodeRecords(nil, data, true, now.UnixMilli())
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
// called concurrently with reads, but Append, TruncateAfter and Commit must
// come from one goroutine (the replication loop), as Raft's Ready loop
// does.
type ReplicaLog struct {
	p *partition
}

// ReplicaLog hands the partition to replication: from now on Log.Append
// refuses it, and the committed end is the end of the entry commitIndex
// (from the Raft HardState; 0 for none). Create it right after Open,
// before serving readers: until then the committed end is the recovered
// end.
func (l *Log) ReplicaLog(topicName string, part int32, commitIndex uint64) (*ReplicaLog, error) {
	p, err := l.partition(topicName, part)
	if err != nil {
		return nil, fmt.Errorf("replica log: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.writable(); err != nil {
		return nil, err
	}
	if err := p.loadLastIndex(); err != nil {
		return nil, err
	}
	p.replicated = true
	if err := p.setCommitted(commitIndex, true); err != nil {
		return nil, err
	}
	return &ReplicaLog{p: p}, nil
}

// loadLastIndex finds the replication index and term of the last batch
// that has one. Caller holds mu.
func (p *partition) loadLastIndex() error {
	if p.indexKnown {
		return nil
	}
	p.lastIndex, p.lastTerm = 0, 0
	for i := len(p.segs) - 1; i >= 0 && p.lastIndex == 0; i-- {
		s := p.segs[i]
		r := newSegReader(s.f, s.size, 64<<10)
		for pos := int64(0); pos < s.size; {
			h, err := readHeaderAt(r, s, pos)
			if err != nil {
				return err
			}
			if h.index != 0 {
				p.lastIndex, p.lastTerm = h.index, h.term
			}
			pos += int64(h.size())
		}
	}
	p.indexKnown = true
	return nil
}

func readHeaderAt(r *segReader, s *segment, pos int64) (batchHeader, error) {
	hdr, err := r.at(pos, batchFixedHeader)
	if err != nil {
		return batchHeader{}, fmt.Errorf("read %s at %d: %w", s.path, pos, err)
	}
	sz, ok := peekBatchSize(hdr)
	if !ok {
		return batchHeader{}, &CorruptionError{File: s.path, Offset: pos, Reason: "bad batch length"}
	}
	b, err := r.at(pos, sz)
	if err != nil {
		return batchHeader{}, fmt.Errorf("read %s at %d: %w", s.path, pos, err)
	}
	h, err := parseBatchHeader(b)
	if err != nil {
		return batchHeader{}, &CorruptionError{File: s.path, Offset: pos, Reason: err.Error()}
	}
	return h, nil
}

// findIndex locates the batch with replication index idx. Caller holds mu.
func (p *partition) findIndex(idx uint64) (int, int64, batchHeader, error) {
	for i := len(p.segs) - 1; i >= 0; i-- {
		s := p.segs[i]
		r := newSegReader(s.f, s.size, 64<<10)
		first := true
		for pos := int64(0); pos < s.size; {
			h, err := readHeaderAt(r, s, pos)
			if err != nil {
				return 0, 0, h, err
			}
			if first && h.index != 0 && h.index > idx {
				break // in an earlier segment
			}
			first = false
			if h.index == idx {
				return i, pos, h, nil
			}
			pos += int64(h.size())
		}
	}
	return 0, 0, batchHeader{}, fmt.Errorf("%w: %d", ErrNoEntry, idx)
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
			err = fmt.Errorf("%w: trailing bytes", errBadLength)
		}
		if err == nil && h.baseOffset != p.next {
			err = fmt.Errorf("base offset %d, want %d", h.baseOffset, p.next)
		}
		if err == nil && (h.index == 0 || p.lastIndex != 0 && h.index != p.lastIndex+1) {
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

// Last returns the index and term of the last entry (0, 0 when none) and
// the next offset.
func (r *ReplicaLog) Last() (index, term uint64, next int64) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastIndex, p.lastTerm, p.next
}

// Batch returns a copy of the encoded batch with replication index idx.
// It reads the segment holding it from its start: replication keeps its
// recent entries in memory and comes here for older ones.
func (r *ReplicaLog) Batch(idx uint64) ([]byte, error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	i, pos, h, err := p.findIndex(idx)
	if err != nil {
		return nil, err
	}
	b := make([]byte, h.size())
	if _, err := p.segs[i].f.ReadAt(b, pos); err != nil {
		return nil, fmt.Errorf("read %s at %d: %w", p.segs[i].path, pos, err)
	}
	if _, err := parseBatch(b, true); err != nil {
		return nil, &CorruptionError{File: p.segs[i].path, Offset: pos, Reason: err.Error()}
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
	if idx == 0 {
		if reset {
			p.hw, p.hwBase, p.hwPos, p.commitIndex = p.segs[0].base, p.segs[0].base, 0, 0
		}
		return nil
	}
	if idx < p.commitIndex {
		return nil
	}
	i, pos, h, err := p.findIndex(idx)
	if err != nil {
		return fmt.Errorf("commit %s at index %d: %w", p.name(), idx, err)
	}
	if reset {
		p.hw = -1
	}
	p.commitIndex = idx
	end, base, epos := h.nextOffset(), p.segs[i].base, pos+int64(h.size())
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
		return fmt.Errorf("truncate %s after index %d: %w (commit index %d)", p.name(), idx, ErrTruncateCommitted, p.commitIndex)
	}
	si, pos, h, err := p.findIndex(idx + 1)
	if err != nil {
		return fmt.Errorf("truncate %s after index %d: %w", p.name(), idx, err)
	}
	if h.baseOffset < p.hw && h.attributes&attrControl == 0 {
		return fmt.Errorf("truncate %s after index %d: %w (offset %d < high watermark %d)", p.name(), idx, ErrTruncateCommitted, h.baseOffset, p.hw)
	}
	if err := p.truncateAt(si, pos, h.baseOffset); err != nil {
		return p.fail(fmt.Errorf("truncate %s after index %d: %w", p.name(), idx, err))
	}
	p.indexKnown = false
	if err := p.loadLastIndex(); err != nil {
		return p.fail(err)
	}
	return nil
}

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
