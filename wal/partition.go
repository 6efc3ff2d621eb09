package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// partition is one partition's log: a list of segments, the last of which
// (the active one) takes appends.
//
// Locking: mu guards all fields. filesMu is held for reading while a
// segment's file is used without mu (reads, fsync) and for writing, only
// while mu is held too, to close or replace files (retention, compaction,
// close). So nobody waits for mu while holding filesMu.
type partition struct {
	l     *Log
	fs    vfs.FS
	topic string
	id    int32
	dir   string
	cfg   TopicConfig

	mu       sync.Mutex
	segs     []*segment // copy on write; the last is active
	next     int64      // offset after the last written batch
	hw       int64      // committed end: readers see offsets below it
	hwBase   int64      // base of the segment holding the committed end
	hwPos    int64      // byte position of the committed end in that segment
	written  int64      // bytes written by this process, all segments
	durable  int64      // how many of those are fsynced
	hwCh     chan struct{}
	syncing  bool
	syncDone chan struct{}
	failed   error
	closed   bool
	// parked counts the long-polls waiting on hwCh; wakeups counts their
	// returns from the wait (for tests: a poll that wakes without a
	// commit shows there).
	parked, wakeups int
	syncWaiters     int // appends waiting for another's fsync (for tests)
	// created is when the active segment was created, for segment.ms: the
	// time of the roll, or after a reopen the largest timestamp of its
	// first batch (as Kafka does), but no later than the open.
	created time.Time

	// replicated is set once a ReplicaLog owns the partition: appends go
	// through it and the committed end moves only by ReplicaLog.Commit.
	replicated  bool
	lastIndex   uint64 // replication index and term of the last batch
	lastTerm    uint64
	indexKnown  bool // lastIndex and lastTerm are loaded
	commitIndex uint64
	// rstate is the replica state file, loaded by OpenReplica. stateMu
	// guards it; it is taken after mu when both are held.
	stateMu sync.Mutex
	rstate  *replicaStateStore
	// recent locates the latest entries by replication index without I/O;
	// recent[i].index == recent[0].index+i. Kept in step with appends,
	// truncations, compaction swaps and retention.
	recent []entryPos
	// layoutGen changes whenever a sealed segment file is replaced or
	// removed, so that a snapshot transfer reading sealed files can tell
	// that they changed under it. It starts at a per-process random value.
	layoutGen uint64

	producers map[int64]*producerEntry
	// cleanedTo is the offset below which this process has compacted.
	cleanedTo int64
	// compactions counts this process's compaction runs of the partition, compactedBytes
	// the segment bytes they removed (PartitionInfo).
	compactions, compactedBytes atomic.Int64

	filesMu sync.RWMutex
	// maintMu serialises retention and compaction, the only writers of
	// sealed segment files, and close waits for it.
	maintMu sync.Mutex
	closing atomic.Bool // set by close; compaction gives up
	bufs    sync.Pool   // *batchBuilder
}

func (p *partition) active() *segment { return p.segs[len(p.segs)-1] }

func (p *partition) name() string { return fmt.Sprintf("%s-%d", p.topic, p.id) }

// openPartition opens (creating if empty) the partition in dir and recovers
// it: completes or rolls back compaction swaps, loads or rebuilds indexes,
// truncates a torn tail and rebuilds the producer state.
func openPartition(l *Log, topic string, id int32, dir string, cfg TopicConfig) (*partition, error) {
	p := &partition{
		l: l, fs: l.fs, topic: topic, id: id, dir: dir, cfg: cfg,
		hwCh: make(chan struct{}), producers: map[int64]*producerEntry{},
		created: l.now(),
	}
	p.bufs.New = func() any { return &batchBuilder{} }
	p.layoutGen = uint64(time.Now().UnixNano())
	if err := p.load(); err != nil {
		return nil, err
	}
	return p, nil
}

// load recovers the partition from its directory into p, whose segments,
// producers and offsets are empty: it completes or rolls back compaction
// swaps and snapshot installs, loads or rebuilds indexes, truncates a torn
// tail and rebuilds the producer state.
func (p *partition) load() error {
	dir := p.dir
	if err := p.fs.MkdirAll(dir); err != nil {
		return err
	}
	if err := p.recoverInstall(); err != nil {
		return err
	}
	names, err := p.fs.ReadDir(dir)
	if err != nil {
		return err
	}
	var bases, snaps []int64
	for _, n := range names {
		full := filepath.Join(dir, n)
		switch {
		case strings.HasSuffix(n, ".cleaned"), strings.HasSuffix(n, ".tmp"):
			// An unfinished compaction output or atomic write: roll back.
			if err := p.fs.Remove(full); err != nil {
				return err
			}
		case strings.HasSuffix(n, ".log.swap"):
			// A finished compaction output: complete the swap. Its old
			// indexes were removed before the .swap was made.
			if err := p.fs.Rename(full, strings.TrimSuffix(full, ".swap")); err != nil {
				return err
			}
			if base, ok := parseSegmentName(strings.TrimSuffix(n, ".swap")); ok {
				bases = append(bases, base)
			}
		default:
			if base, ok := parseSegmentName(n); ok {
				bases = append(bases, base)
			} else if off, ok := parseSnapshotName(n); ok {
				snaps = append(snaps, off)
			}
		}
	}
	if err := p.fs.SyncDir(dir); err != nil {
		return err
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	bases = dedupe(bases)
	if err := p.removeOrphanIndexes(names, bases); err != nil {
		return err
	}
	if len(bases) == 0 {
		seg, err := p.createSegment(0)
		if err != nil {
			return err
		}
		p.segs = []*segment{seg}
		return nil
	}
	for i, base := range bases {
		last := i == len(bases)-1
		seg, err := p.openSegment(base, last)
		if err != nil {
			p.closeFiles()
			return err
		}
		p.segs = append(p.segs, seg)
		if i > 0 {
			// Segments are contiguous: each ends where the next begins
			// (compaction keeps a segment's last batch, emptied if need
			// be, so that its end stays in it). A missing or misplaced
			// segment is lost data, not something to skip over.
			if prev := p.segs[i-1]; prev.next != base {
				p.closeFiles()
				return &CorruptionError{File: prev.path, Offset: prev.size,
					Reason: fmt.Sprintf("segment ends at offset %d but the next segment, %s, starts at %d", prev.next, segmentName(base), base)}
			}
		}
	}
	act := p.active()
	p.next = act.next
	p.hw, p.hwBase, p.hwPos = p.next, act.base, act.size
	if ts, ok, err := act.firstBatchTime(); err != nil {
		p.closeFiles()
		return err
	} else if ok && ts < p.created.UnixMilli() {
		p.created = msTime(ts)
	}
	if err := p.rebuildProducers(snaps); err != nil {
		p.closeFiles()
		return err
	}
	// The marker describes one clean close; writes follow from now on.
	if err := removeIfExists(p.fs, filepath.Join(dir, cleanMarker)); err != nil {
		p.closeFiles()
		return err
	}
	return nil
}

// removeOrphanIndexes removes index files whose segment is gone.
func (p *partition) removeOrphanIndexes(names []string, bases []int64) error {
	have := make(map[int64]bool, len(bases))
	for _, b := range bases {
		have[b] = true
	}
	for _, n := range names {
		stem, ok := strings.CutSuffix(n, ".timeindex")
		if !ok {
			stem, ok = strings.CutSuffix(n, ".index")
		}
		if !ok {
			continue
		}
		if base, ok := parseSegmentName(stem + ".log"); ok && !have[base] {
			if err := removeIfExists(p.fs, filepath.Join(p.dir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

func dedupe(s []int64) []int64 {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// createSegment creates an empty, preallocated segment file and makes its
// directory entry durable.
func (p *partition) createSegment(base int64) (*segment, error) {
	path := segmentPath(p.dir, base)
	f, err := p.fs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create segment %s: %w", path, err)
	}
	seg := newSegmentState(base, path, f)
	if err := p.preallocate(seg, 0); err != nil {
		f.Close()
		return nil, err
	}
	if err := p.fs.SyncDir(p.dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("create segment %s: %w", path, err)
	}
	return seg, nil
}

// preallocChunk is how much disk a segment reserves ahead of its written
// end: enough that appends rarely allocate blocks (which would make each
// fdatasync also commit metadata), without reserving a whole segment.bytes
// per partition up front.
const preallocChunk = 64 << 20

// preallocate reserves disk for s up to at least need bytes plus a chunk,
// capped at segment.bytes. Caller holds mu or owns s.
func (p *partition) preallocate(s *segment, need int64) error {
	if need < s.prealloc && s.prealloc > 0 {
		return nil
	}
	want := min(max(need, s.size)+preallocChunk, max(p.cfg.SegmentBytes, need))
	if err := s.f.Preallocate(want); err != nil {
		return fmt.Errorf("preallocate segment %s: %w", s.path, err)
	}
	s.prealloc = want
	return nil
}

// openSegment opens an existing segment. A sealed segment trusts its index
// files if they match it, else is scanned, and any invalid batch in it is
// corruption. The active segment is always scanned; an invalid batch with
// no valid batch after it is a torn write and is truncated away.
func (p *partition) openSegment(base int64, active bool) (*segment, error) {
	path := segmentPath(p.dir, base)
	var f vfs.File
	var err error
	if active {
		f, err = p.fs.OpenRW(path)
	} else {
		f, err = p.fs.Open(path)
	}
	if err != nil {
		return nil, fmt.Errorf("open segment %s: %w", path, err)
	}
	s := newSegmentState(base, path, f)
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open segment %s: %w", path, err)
	}
	if !active {
		s.size = size
		err := s.loadIndexes(p.fs)
		if err == nil {
			if err = s.verifyIndexedTail(); err == nil {
				return s, nil
			}
			s.resetIndex()
		}
		if !vfs.IsNotExist(err) && !errors.Is(err, errStaleIndex) {
			f.Close()
			return nil, fmt.Errorf("load indexes of %s: %w", path, err)
		}
		p.l.logger.Warn("rebuilding segment indexes", "topic", p.topic, "partition", p.id, "segment", path, "reason", err.Error())
	}
	cleanClose := false
	if active {
		var trusted bool
		cleanClose, trusted = p.trustCleanShutdown(s, size)
		if trusted {
			if err := p.preallocate(s, size); err != nil {
				f.Close()
				return nil, err
			}
			return s, nil
		}
	}
	end, bad, err := scanSegment(s, size, p.cfg.IndexIntervalBytes, nil)
	if err != nil {
		f.Close()
		return nil, err
	}
	if bad != nil {
		if !active || cleanClose {
			// A sealed segment was fsynced whole when rolled, and a
			// cleanly closed one at exactly this size: nothing in them
			// can be a torn write.
			f.Close()
			return nil, &CorruptionError{File: path, Offset: end, Reason: bad.Error()}
		}
		if at, ok := validBatchAfter(f, end+1, size, s.next); ok {
			if !p.l.opts.UnsafeTruncateCorruptTail {
				f.Close()
				return nil, &CorruptionError{File: path, Offset: end,
					Reason: fmt.Sprintf("%v (a valid batch follows at byte %d, so this is not a torn write)", bad, at)}
			}
			p.l.logger.Error("truncating a damaged active segment as asked: batches after the damage are lost",
				"topic", p.topic, "partition", p.id, "segment", path, "position", end, "valid_batch_at", at)
		}
		p.l.logger.Warn("truncating torn tail", "topic", p.topic, "partition", p.id,
			"segment", path, "position", end, "dropped_bytes", size-end, "reason", bad.Error())
		if err := f.Truncate(end); err != nil {
			f.Close()
			return nil, fmt.Errorf("truncate torn tail of %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("truncate torn tail of %s: %w", path, err)
		}
	}
	if active {
		if err := p.preallocate(s, end); err != nil {
			f.Close()
			return nil, err
		}
	} else if err := s.writeIndexes(p.fs, p.dir); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// rebuildProducers loads the newest usable producer snapshot and applies
// the batches after it. Without one it reads every batch header.
func (p *partition) rebuildProducers(snaps []int64) error {
	from := p.segs[0].base
	sort.Slice(snaps, func(i, j int) bool { return snaps[i] > snaps[j] })
	for _, off := range snaps {
		name := filepath.Join(p.dir, snapshotName(off))
		if off > p.next || off < p.segs[0].base {
			// From a suffix that no longer exists, or below the log start.
			if off > p.next {
				if err := p.fs.Remove(name); err != nil {
					return err
				}
			}
			continue
		}
		b, err := readFile(p.fs, name)
		if err != nil {
			return fmt.Errorf("read producer snapshot %s: %w", name, err)
		}
		soff, prods, err := decodeSnapshot(b)
		if err != nil || soff != off {
			p.l.logger.Warn("ignoring damaged producer snapshot", "topic", p.topic, "partition", p.id, "file", name)
			continue
		}
		p.producers, from = prods, off
		break
	}
	return p.scanHeaders(from, func(h *batchHeader) {
		if h.producerID > 0 {
			e := p.producers[h.producerID]
			if e == nil {
				e = &producerEntry{}
				p.producers[h.producerID] = e
			}
			e.observe(h)
		}
	})
}

// scanHeaders calls fn for each batch with base offset >= from, reading
// only headers. Caller holds mu or has the partition to itself.
func (p *partition) scanHeaders(from int64, fn func(h *batchHeader)) error {
	for i, s := range p.segs {
		if i+1 < len(p.segs) && p.segs[i+1].base <= from {
			continue
		}
		pos := floorOffset(s.offIdx, s.base, from)
		r := newSegReader(s.f, s.size, 64<<10)
		for pos < s.size {
			hdr, err := r.at(pos, batchFixedHeader)
			if err != nil {
				return fmt.Errorf("read %s at %d: %w", s.path, pos, err)
			}
			sz, ok := peekBatchSize(hdr)
			if !ok || len(hdr) < batchFixedHeader {
				return &CorruptionError{File: s.path, Offset: pos, Reason: "bad batch length"}
			}
			b, err := r.at(pos, sz)
			if err != nil {
				return fmt.Errorf("read %s at %d: %w", s.path, pos, err)
			}
			h, err := parseBatch(b, false)
			if err != nil {
				return &CorruptionError{File: s.path, Offset: pos, Reason: err.Error()}
			}
			if h.baseOffset >= from {
				fn(&h)
			}
			pos += int64(sz)
		}
	}
	return nil
}

func (p *partition) closeFiles() {
	for _, s := range p.segs {
		if s.f != nil {
			s.f.Close()
		}
	}
}

// fail stops the partition for writes after an I/O error whose effect on
// disk is unknown, and returns the error every later write gets; the
// caller returns it (it is not logged here). Caller holds mu.
func (p *partition) fail(err error) error {
	if p.failed == nil {
		p.failed = fmt.Errorf("%s: %w: %w", p.name(), err, ErrPartitionFailed)
	}
	return p.failed
}

// roll seals the active segment (fsync, indexes) and starts a new one at
// p.next. Everything written so far is durable afterwards. Caller holds mu.
func (p *partition) roll() error {
	act := p.active()
	if err := act.f.Sync(); err != nil {
		return p.fail(fmt.Errorf("sync segment %s: %w", act.path, err))
	}
	if err := act.writeIndexes(p.fs, p.dir); err != nil {
		return p.fail(err)
	}
	if err := writeSnapshot(p.fs, p.dir, p.next, p.producers); err != nil {
		return p.fail(err)
	}
	seg, err := p.createSegment(p.next)
	if err != nil {
		return p.fail(err)
	}
	act.next = p.next
	segs := make([]*segment, len(p.segs), len(p.segs)+1)
	copy(segs, p.segs)
	p.segs = append(segs, seg)
	p.created = p.l.now()
	p.durable = p.written
	if !p.replicated {
		p.advanceHW(p.next, seg.base, 0)
	}
	return nil
}

// advanceHW moves the committed end forward and wakes long-polls. Caller
// holds mu.
func (p *partition) advanceHW(hw, base, pos int64) {
	if hw < p.hw {
		return
	}
	if hw == p.hw {
		// Same end, possibly in a new active segment after a roll.
		p.hwBase, p.hwPos = base, pos
		return
	}
	p.hw, p.hwBase, p.hwPos = hw, base, pos
	close(p.hwCh)
	p.hwCh = make(chan struct{})
}

// appendBatch writes one batch and waits until it is committed (durable
// per the fsync policy).
func (p *partition) appendBatch(ctx context.Context, recs []Record, opts AppendOptions) (AppendResult, error) {
	if len(recs) == 0 {
		return AppendResult{}, fmt.Errorf("append to %s: empty batch: %w", p.name(), ErrInvalidRecord)
	}
	if err := ctx.Err(); err != nil {
		return AppendResult{}, fmt.Errorf("append to %s: %w", p.name(), err) // nothing written
	}
	if p.cfg.Compact {
		for i := range recs {
			if recs[i].Key == nil {
				return AppendResult{}, fmt.Errorf("append to %s: record %d has a null key on a compacted topic: %w", p.name(), i, ErrInvalidRecord)
			}
		}
	}
	nowT := p.l.now()
	now := nowT.UnixMilli()
	bb := p.bufs.Get().(*batchBuilder)
	defer func() {
		if cap(bb.buf) <= 4<<20 && cap(bb.zbuf) <= 4<<20 {
			p.bufs.Put(bb)
		}
	}()
	bb.encodeRecords(recs, opts.SourcePosition, opts.SourcePosition != nil, now, p.cfg.Compression)
	if len(bb.buf) > int(p.cfg.MaxMessageBytes) {
		return AppendResult{}, fmt.Errorf("append to %s: %d bytes > %d: %w", p.name(), len(bb.buf), p.cfg.MaxMessageBytes, ErrRecordTooLarge)
	}
	h := batchHeader{
		lastOffsetDelta: int32(len(recs) - 1),
		baseTimestamp:   bb.baseTS,
		maxTimestamp:    bb.maxTS,
		producerID:      -1,
		producerEpoch:   -1,
		baseSequence:    -1,
		deleteHorizon:   -1,
		recordCount:     int32(len(recs)),
	}
	if opts.ProducerID > 0 {
		h.producerID, h.producerEpoch, h.baseSequence = opts.ProducerID, opts.ProducerEpoch, opts.BaseSequence
	}

	if h.producerID > 0 {
		// Read before taking mu: the producer maps' lock is never taken
		// under a partition's (InitProducer appends while allocating).
		if cur, ok := p.l.producerEpoch(h.producerID); ok && h.producerEpoch < cur {
			return AppendResult{}, fmt.Errorf("append to %s: epoch %d, current %d: %w", p.name(), h.producerEpoch, cur, ErrProducerFenced)
		}
	}

	p.mu.Lock()
	if err := p.writable(); err != nil {
		p.mu.Unlock()
		return AppendResult{}, err
	}
	if p.replicated {
		p.mu.Unlock()
		return AppendResult{}, fmt.Errorf("append to %s: %w", p.name(), ErrReplicated)
	}
	var entry *producerEntry
	if h.producerID > 0 {
		entry = p.producers[h.producerID]
		if entry != nil {
			dup, err := entry.check(h.producerEpoch, h.baseSequence, len(recs))
			if err != nil {
				p.mu.Unlock()
				return AppendResult{}, fmt.Errorf("append to %s: %w", p.name(), err)
			}
			if dup != nil {
				// The original may still be in flight: wait until all
				// that was written is durable.
				res := AppendResult{BaseOffset: dup.firstOffset, LastOffset: dup.lastOffset, Duplicate: true, LogAppendTime: msTime(dup.timestamp)}
				if opts.Written != nil {
					opts.Written()
				}
				return res, p.waitDurable(ctx, p.written) // unlocks
			}
		}
	}
	act := p.active()
	if act.size > 0 && (act.size+int64(len(bb.buf)) > p.cfg.SegmentBytes ||
		nowT.Sub(p.created) >= p.cfg.SegmentAge ||
		p.next+int64(len(recs))-act.base > 1<<31) {
		if err := p.roll(); err != nil {
			p.mu.Unlock()
			return AppendResult{}, err
		}
		act = p.active()
	}
	h.baseOffset = p.next
	b := bb.finish(&h)
	pos := act.size
	if err := p.preallocate(act, pos+int64(len(b))); err != nil {
		// Nothing was written: the append fails, the partition goes on.
		p.mu.Unlock()
		return AppendResult{}, fmt.Errorf("append to %s: %w", p.name(), err)
	}
	if _, err := act.f.WriteAt(b, pos); err != nil {
		err = p.fail(fmt.Errorf("write segment %s at %d: %w", act.path, pos, err))
		p.mu.Unlock()
		return AppendResult{}, err
	}
	h.length = int32(len(b) - lengthPrefix)
	h.sourcePos = opts.SourcePosition
	act.noteBatch(&h, pos, p.cfg.IndexIntervalBytes)
	p.next = h.nextOffset()
	p.written += int64(len(b))
	if h.producerID > 0 {
		if entry == nil {
			entry = &producerEntry{}
			p.producers[h.producerID] = entry
		}
		entry.observe(&h)
	}
	res := AppendResult{BaseOffset: h.baseOffset, LastOffset: h.lastOffset(), LogAppendTime: nowT}
	if opts.Written != nil {
		opts.Written()
	}
	if p.l.opts.Fsync == UnsafeFsyncNever {
		p.durable = p.written
		p.advanceHW(p.next, act.base, act.size)
		p.mu.Unlock()
		return res, nil
	}
	return res, p.waitDurable(ctx, p.written) // unlocks
}

func (p *partition) writable() error {
	if p.closed {
		return ErrClosed
	}
	return p.failed
}

// waitDurable waits until the first target bytes written are fsynced,
// taking part in group commit: the first waiter to find no fsync in flight
// runs one for everyone, covering all that was written when it started.
// Unless the partition is replicated, the committed end follows. Called
// with mu held; returns with it released.
func (p *partition) waitDurable(ctx context.Context, target int64) error {
	for {
		if p.durable >= target {
			p.mu.Unlock()
			return nil
		}
		if err := p.writable(); err != nil {
			p.mu.Unlock()
			return err
		}
		if p.syncing {
			done := p.syncDone
			p.syncWaiters++
			p.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				p.mu.Lock()
				p.syncWaiters--
				p.mu.Unlock()
				return fmt.Errorf("wait for fsync of %s: %w", p.name(), ctx.Err())
			}
			p.mu.Lock()
			p.syncWaiters--
			continue
		}
		act, written, end, pos := p.active(), p.written, p.next, p.active().size
		p.syncing = true
		p.syncDone = make(chan struct{})
		p.filesMu.RLock()
		p.mu.Unlock()
		err := act.f.Sync()
		p.filesMu.RUnlock()
		p.mu.Lock()
		p.syncing = false
		close(p.syncDone)
		p.syncDone = nil
		if err != nil {
			err = p.fail(fmt.Errorf("sync segment %s: %w", act.path, err))
			p.mu.Unlock()
			return err
		}
		// A roll in between synced everything before it itself.
		p.durable = max(p.durable, written)
		if act == p.active() && !p.replicated {
			p.advanceHW(end, act.base, pos)
		}
	}
}

// The clean-shutdown marker, written by a clean close after the final fsync
// and the active segment's indexes, lets the next open skip scanning the
// active segment:
//
//	"SLCS" | version u8 (1) | segment base i64 | segment size i64 |
//	next offset i64 | CRC-32C u32
//
// It is trusted only if base and size equal the active segment's, and the
// segment's index files are valid for that size. Appends only grow a
// segment, and recovery truncates only to a verified prefix, so a segment
// of the recorded size holds exactly the bytes that were verified then.
const cleanMarker = "clean-shutdown"

func encodeCleanMarker(base, size, next int64) []byte {
	b := []byte("SLCS\x01")
	b = binary.BigEndian.AppendUint64(b, uint64(base))
	b = binary.BigEndian.AppendUint64(b, uint64(size))
	b = binary.BigEndian.AppendUint64(b, uint64(next))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeCleanMarker(b []byte) (base, size, next int64, ok bool) {
	if len(b) != 33 || string(b[:5]) != "SLCS\x01" || crc32.Checksum(b[:29], castagnoli) != binary.BigEndian.Uint32(b[29:]) {
		return 0, 0, 0, false
	}
	be := binary.BigEndian
	return int64(be.Uint64(b[5:])), int64(be.Uint64(b[13:])), int64(be.Uint64(b[21:])), true
}

// trustCleanShutdown loads the active segment's state from the last clean
// close if it still describes the file. clean reports that the marker
// names the segment at its current size (every byte of it was fsynced);
// trusted, that its indexes were loaded and checked, so that it need not
// be scanned.
func (p *partition) trustCleanShutdown(s *segment, size int64) (clean, trusted bool) {
	b, err := readFile(p.fs, filepath.Join(p.dir, cleanMarker))
	if err != nil {
		return false, false
	}
	base, msize, next, ok := decodeCleanMarker(b)
	if !ok || base != s.base || msize != size || next < s.base {
		return false, false
	}
	s.size = size
	if err := s.loadIndexes(p.fs); err != nil {
		s.resetIndex()
		return true, false
	}
	if err := s.verifyIndexedTail(); err != nil || s.next != next {
		s.resetIndex()
		return true, false
	}
	return true, true
}

// writeCleanMarker persists the active segment's indexes and the marker.
// Caller holds mu, after the final fsync.
func (p *partition) writeCleanMarker() error {
	act := p.active()
	if err := act.writeIndexes(p.fs, p.dir); err != nil {
		return err
	}
	return writeFileAtomic(p.fs, p.dir, filepath.Join(p.dir, cleanMarker), encodeCleanMarker(act.base, act.size, p.next))
}
