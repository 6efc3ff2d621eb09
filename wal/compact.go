package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

func isNotExist(err error) bool { return vfs.IsNotExist(err) }

// compactionMapBytes bounds the memory of one compaction's key map; a
// larger dirty section is compacted over several runs.
const compactionMapBytes = 64 << 20

// Compact compacts every partition of every topic with the compact policy
// whose dirty ratio or compaction lag says so. Run calls it periodically.
func (l *Log) Compact(ctx context.Context) error {
	var errs []error
	for _, p := range l.allPartitions() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !p.cfg.Compact {
			continue
		}
		if _, err := p.compact(ctx); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CompactionStats says what one compaction of a partition did.
type CompactionStats struct {
	SegmentsRewritten int
	BytesRead         int64
	BytesWritten      int64
	BytesRemoved      int64 // segment bytes the rewrites removed
	RecordsRemoved    int64
}

// compact compacts the partition's sealed segments:
//
//  1. Map each key to its newest offset, reading from the first dirty
//     offset to the high watermark (active segment included), within a
//     memory budget.
//  2. Rewrite each sealed segment old enough for min.compaction.lag.ms,
//     keeping a record unless the map holds a newer offset for its key, and
//     dropping a kept tombstone once its batch's delete horizon (set to
//     now + delete.retention.ms the first time compaction keeps it) has
//     passed. A batch left empty is dropped, except the last batch of a
//     producer, which stays (without records) to keep that producer's
//     sequence and source position in the log, and the segment's last
//     batch, which stays to keep the segment's end offset in it.
//  3. Swap each rewritten segment in crash-safely: write X.log.cleaned and
//     fsync it; remove X's index files; rename to X.log.swap; fsync the
//     directory; rename over X.log; fsync the directory. On open, a
//     .cleaned file is deleted (rolled back) and a .swap file is renamed
//     over its segment (completed).
//
// Offsets never change: records keep their offsets, batches their headers.
func (p *partition) compact(ctx context.Context) (CompactionStats, error) {
	var st CompactionStats
	p.maintMu.Lock()
	defer p.maintMu.Unlock()
	p.mu.Lock()
	if p.closed || p.failed != nil || len(p.segs) < 2 {
		p.mu.Unlock()
		return st, nil
	}
	segs, hw, mark, view := p.segs, p.hw, p.hwMark(), viewIndexes(p.segs)
	now := p.l.now().UnixMilli()
	lastBatch := make(map[int64]int64, len(p.producers))
	for id, e := range p.producers {
		lastBatch[id] = e.last().firstOffset
	}
	firstDirty := max(p.cleanedTo, segs[0].base)
	// under mu: a replica's truncation may rescan a sealed segment that holds uncommitted
	// entries
	sealed := segs[:len(segs)-1]
	var dirty, total int64
	oldestDirty := int64(-1)
	for _, s := range sealed {
		total += s.size
		if s.next > firstDirty {
			dirty += s.size
			if oldestDirty < 0 && s.maxTS >= 0 {
				oldestDirty = s.maxTS
			}
		}
	}
	p.mu.Unlock()
	ratio := 0.0
	if total > 0 {
		ratio = float64(dirty) / float64(total)
	}
	lagged := oldestDirty >= 0 && now-oldestDirty >= p.cfg.MaxCompactionLag.Milliseconds()
	if ratio < p.cfg.MinCleanableDirtyRatio && !lagged && p.cfg.MinCleanableDirtyRatio > 0 {
		return st, nil
	}
	// a run: the partition was due, whatever the rewrites then removed (PartitionInfo)
	defer func() {
		p.compactions.Add(1)
		p.compactedBytes.Add(st.BytesRemoved)
	}()

	// 1. The key map.
	keys := map[string]int64{}
	var mapBytes int64
	mappedTo := firstDirty
	full := false
	for i := findSegment(segs, firstDirty); i < len(segs) && !full; i++ {
		s := segs[i]
		limit := readLimit(s, mark)
		p.filesMu.RLock() // truncation rescans under filesMu held for writing
		from := floorOffset(view.offsets(s), s.base, firstDirty)
		p.filesMu.RUnlock()
		err := p.eachBatch(s, from, limit, func(h *batchHeader, b []byte, _ int64) (bool, error) {
			if h.nextOffset() > hw {
				return false, nil
			}
			if h.baseOffset < firstDirty {
				return true, nil
			}
			need := int64(0)
			err := eachRecord(h, b, func(r *rawRecord, _ []byte) {
				if _, ok := keys[string(r.key)]; !ok {
					need += int64(len(r.key)) + 64
				}
			})
			if err != nil {
				return false, err
			}
			if mapBytes+need > compactionMapBytes && len(keys) > 0 {
				full = true
				return false, nil
			}
			mapBytes += need
			_ = eachRecord(h, b, func(r *rawRecord, _ []byte) {
				keys[string(r.key)] = h.baseOffset + int64(r.offsetDelta)
			})
			mappedTo = h.nextOffset()
			st.BytesRead += int64(h.size())
			return true, ctx.Err()
		})
		if err != nil {
			return st, err
		}
	}

	// 2 and 3. Rewrite and swap.
	minLag := p.cfg.MinCompactionLag.Milliseconds()
	for _, s := range sealed {
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
		if s.maxTS >= 0 && now-s.maxTS < minLag || s.next > hw || s.base >= mark.base {
			break // too young, or not wholly committed
		}
		if err := p.rewriteSegment(s, keys, lastBatch, now, &st); err != nil {
			return st, err
		}
		if s.next <= mappedTo {
			p.mu.Lock()
			p.cleanedTo = max(p.cleanedTo, s.next)
			p.mu.Unlock()
		}
	}
	return st, nil
}

// eachBatch calls fn for each verified batch of s from pos to limit, with
// its bytes and position, until fn returns false. It holds filesMu for
// reading.
func (p *partition) eachBatch(s *segment, pos, limit int64, fn func(h *batchHeader, b []byte, pos int64) (bool, error)) error {
	p.filesMu.RLock()
	defer p.filesMu.RUnlock()
	r := newSegReader(s.f, limit, 1<<20)
	for pos < limit {
		b, err := r.batchAt(pos)
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", s.path, pos, err)
		}
		h, err := parseBatch(b, true)
		if err != nil {
			return &CorruptionError{File: s.path, Offset: pos, Reason: err.Error()}
		}
		if p.closing.Load() {
			return ErrClosed
		}
		ok, err := fn(&h, b, pos)
		if err != nil || !ok {
			return err
		}
		pos += int64(h.size())
	}
	return nil
}

// eachRecord calls fn for each record of a verified batch with its raw
// bytes (length prefix included, uncompressed).
func eachRecord(h *batchHeader, b []byte, fn func(r *rawRecord, raw []byte)) error {
	rest, err := h.records(b)
	if err != nil {
		return err
	}
	for j := int32(0); j < h.recordCount; j++ {
		var r rawRecord
		n, err := parseRecord(rest, &r)
		if err != nil {
			return err
		}
		fn(&r, rest[:n])
		rest = rest[n:]
	}
	return nil
}

func (p *partition) rewriteSegment(s *segment, keys map[string]int64, lastBatch map[int64]int64, now int64, st *CompactionStats) error {
	cleanedPath := s.path + ".cleaned"
	var out vfs.File
	ns := newSegmentState(s.base, s.path, nil)
	var wpos int64
	changed := false
	var buf, zbuf []byte
	err := p.eachBatch(s, 0, s.size, func(h *batchHeader, b []byte, pos int64) (bool, error) {
		buf = buf[:0]
		buf = append(buf, b[:h.recordsAt]...)
		kept := int32(0)
		horizon := h.deleteHorizon
		tombstoneKept := false
		err := eachRecord(h, b, func(r *rawRecord, raw []byte) {
			off := h.baseOffset + int64(r.offsetDelta)
			if newest, ok := keys[string(r.key)]; ok && newest > off {
				return
			}
			if r.value == nil {
				if horizon >= 0 && now >= horizon {
					return
				}
				tombstoneKept = true
			}
			buf = append(buf, raw...)
			kept++
		})
		if err != nil {
			return false, err
		}
		if tombstoneKept && horizon < 0 {
			horizon = now + p.cfg.DeleteRetention.Milliseconds()
		}
		st.RecordsRemoved += int64(h.recordCount - kept)
		isLast := h.producerID > 0 && lastBatch[h.producerID] == h.baseOffset
		// The segment's last batch stays, emptied, so that the segment
		// still ends where the next one begins (open checks it).
		// Replication entries stay, emptied: Raft reads the log by index,
		// so a replicated segment keeps every index.
		endsSegment := pos+int64(h.size()) == s.size
		if kept == 0 && !isLast && !endsSegment && h.attributes&attrControl == 0 && h.index == 0 {
			changed = true
			return true, nil
		}
		if kept == h.recordCount && horizon == h.deleteHorizon {
			buf = append(buf[:0], b[:h.size()]...)
		} else {
			changed = true
			be := binary.BigEndian
			// The kept records are compressed again with the batch's codec
			// (uncompressed if that no longer makes them smaller).
			codec := Uncompressed
			if h.codec() != Uncompressed {
				var ok bool
				if buf, zbuf, ok = compressBatch(buf, zbuf, h.recordsAt, h.codec()); ok {
					codec = h.codec()
				}
			}
			be.PutUint16(buf[offAttributes:], uint16(h.attributes&^attrCodec|int16(codec)))
			be.PutUint32(buf[offLength:], uint32(len(buf)-lengthPrefix))
			be.PutUint32(buf[offRecordCount:], uint32(kept))
			be.PutUint64(buf[offDeleteHorizon:], uint64(horizon))
			be.PutUint32(buf[offCRC:], finishCRC(crc32.Update(0, castagnoli, buf[h.recordsAt:]), buf, h.recordsAt))
		}
		if out == nil {
			f, err := p.fs.Create(cleanedPath)
			if err != nil {
				return false, fmt.Errorf("compact %s: %w", s.path, err)
			}
			out = f
		}
		if _, err := out.WriteAt(buf, wpos); err != nil {
			return false, fmt.Errorf("compact %s: %w", s.path, err)
		}
		nh, err := parseBatch(buf, false)
		if err != nil {
			return false, fmt.Errorf("compact %s: rewritten batch invalid: %w", s.path, err)
		}
		ns.noteBatch(&nh, wpos, p.cfg.IndexIntervalBytes)
		wpos += int64(len(buf))
		return true, nil
	})
	if err == nil && !changed {
		if out != nil {
			out.Close()
			err = p.fs.Remove(cleanedPath)
		}
		return err
	}
	if err == nil && out == nil {
		out, err = p.fs.Create(cleanedPath)
	}
	if err == nil {
		err = out.Sync()
	}
	if out != nil {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		p.fs.Remove(cleanedPath)
		return err
	}
	size := s.size
	if err := p.swapSegment(s, ns, cleanedPath); err != nil {
		return err
	}
	st.SegmentsRewritten++
	st.BytesWritten += wpos
	st.BytesRemoved += size - wpos
	return nil
}

// swapSegment replaces s by the cleaned file; see compact for the protocol.
// The renames run under maintMu only (retention and compaction are the only
// other users of sealed segment files); mu and filesMu are held just to
// switch the segment and close the old file.
func (p *partition) swapSegment(s, ns *segment, cleanedPath string) error {
	p.mu.Lock()
	idx := p.segIndex(s)
	closed := p.closed
	p.mu.Unlock()
	if closed || idx < 0 {
		// Closed, or the segment was deleted meanwhile: drop the output.
		err := p.fs.Remove(cleanedPath)
		if closed {
			err = errors.Join(err, ErrClosed)
		}
		return err
	}
	swapPath := strings.TrimSuffix(cleanedPath, ".cleaned") + ".swap"
	steps := []func() error{
		func() error { return removeIfExists(p.fs, s.indexPath()) },
		func() error { return removeIfExists(p.fs, s.timeIndexPath()) },
		func() error { return p.fs.Rename(cleanedPath, swapPath) },
		func() error { return p.fs.SyncDir(p.dir) },
		func() error { return p.fs.Rename(swapPath, s.path) },
		func() error { return p.fs.SyncDir(p.dir) },
	}
	fail := func(err error) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.fail(fmt.Errorf("swap compacted segment %s: %w", s.path, err))
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fail(err)
		}
	}
	f, err := p.fs.Open(s.path)
	if err != nil {
		return fail(err)
	}
	ns.f = f
	ns.next = s.next
	p.mu.Lock()
	p.filesMu.Lock()
	if idx = p.segIndex(s); idx >= 0 {
		segs := append([]*segment(nil), p.segs...)
		segs[idx] = ns
		p.segs = segs
		s.f.Close()
		p.layoutGen++
		p.forgetRecentThrough(s.base)
	} else {
		f.Close() // closed meanwhile
	}
	p.filesMu.Unlock()
	p.mu.Unlock()
	if idx >= 0 {
		if err := ns.writeIndexes(p.fs, p.dir); err != nil {
			p.l.logger.Warn("index write after compaction failed; it will be rebuilt", "segment", s.path, "err", err)
		}
	}
	return nil
}

// segIndex returns the position of s among the sealed segments, or -1.
// Caller holds mu.
func (p *partition) segIndex(s *segment) int {
	for i, x := range p.segs[:len(p.segs)-1] {
		if x == s {
			return i
		}
	}
	return -1
}

func removeIfExists(fsys vfs.FS, name string) error {
	if err := fsys.Remove(name); err != nil && !vfs.IsNotExist(err) {
		return err
	}
	return nil
}
