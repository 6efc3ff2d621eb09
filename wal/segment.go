package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// segment is one file of a partition's log, holding the batches with
// offsets from base up to the next segment's base.
type segment struct {
	base  int64
	path  string
	f     vfs.File
	size  int64 // bytes of whole batches written (the written end)
	next  int64 // offset after the last batch
	maxTS int64 // largest record timestamp, -1 when empty
	// prealloc is the size the file's disk space is reserved up to.
	prealloc int64

	offIdx     []offsetEntry
	timeIdx    []timeEntry
	sinceIndex int64
	runMaxTS   int64
	lastIndex  uint64 // replication index of the last batch (0 when none or not read)
	lastTerm   uint64
	firstIdx   uint64 // replication index of the first batch (0 when none or not read)
}

func segmentName(base int64) string { return fmt.Sprintf("%020d.log", base) }

func parseSegmentName(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, ".log")
	if !ok || len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}

func (s *segment) indexPath() string     { return strings.TrimSuffix(s.path, ".log") + ".index" }
func (s *segment) timeIndexPath() string { return strings.TrimSuffix(s.path, ".log") + ".timeindex" }

func newSegmentState(base int64, path string, f vfs.File) *segment {
	return &segment{base: base, path: path, f: f, next: base, maxTS: -1, runMaxTS: -1}
}

// indexView is the active segment's in-memory indexes as they were when it was taken, under
// the partition's mu: appends grow them under mu, so a reader that goes on without mu (holding
// filesMu for reading) reads them through the view. The other segments' indexes change only
// under filesMu held for writing.
type indexView struct {
	active  *segment
	offIdx  []offsetEntry
	timeIdx []timeEntry
	maxTS   int64
}

// viewIndexes takes the view of segs' active (last) segment. Caller holds mu.
func viewIndexes(segs []*segment) indexView {
	if len(segs) == 0 {
		return indexView{}
	}
	a := segs[len(segs)-1]
	return indexView{active: a, offIdx: a.offIdx, timeIdx: a.timeIdx, maxTS: a.maxTS}
}

// offsets returns s's offset index as the view saw it.
func (v *indexView) offsets(s *segment) []offsetEntry {
	if s == v.active {
		return v.offIdx
	}
	return s.offIdx
}

// times returns s's time index as the view saw it.
func (v *indexView) times(s *segment) []timeEntry {
	if s == v.active {
		return v.timeIdx
	}
	return s.timeIdx
}

// maxTime returns s's largest timestamp as the view saw it.
func (v *indexView) maxTime(s *segment) int64 {
	if s == v.active {
		return v.maxTS
	}
	return s.maxTS
}

// noteBatch records a batch written at pos in the in-memory indexes.
func (s *segment) noteBatch(h *batchHeader, pos int64, interval int32) {
	if h.maxTimestamp > s.runMaxTS {
		s.runMaxTS = h.maxTimestamp
	}
	if len(s.offIdx) == 0 || s.sinceIndex >= int64(interval) {
		rel := uint32(h.baseOffset - s.base)
		s.offIdx = append(s.offIdx, offsetEntry{rel: rel, pos: uint32(pos)})
		if n := len(s.timeIdx); n == 0 || s.timeIdx[n-1].ts < s.runMaxTS {
			s.timeIdx = append(s.timeIdx, timeEntry{ts: s.runMaxTS, rel: rel})
		}
		s.sinceIndex = 0
	}
	s.sinceIndex += int64(h.size())
	if h.maxTimestamp > s.maxTS {
		s.maxTS = h.maxTimestamp
	}
	if h.nextOffset() > s.next {
		s.next = h.nextOffset()
	}
	s.size = pos + int64(h.size())
	if h.index != 0 {
		s.lastIndex, s.lastTerm = h.index, h.term
		if pos == 0 {
			s.firstIdx = h.index
		}
	}
}

// resetIndex forgets the in-memory indexes, before a rescan.
func (s *segment) resetIndex() {
	s.offIdx, s.timeIdx = nil, nil
	s.sinceIndex, s.runMaxTS, s.maxTS = 0, -1, -1
	s.size, s.next = 0, s.base
	s.lastIndex, s.lastTerm, s.firstIdx = 0, 0, 0
}

// writeIndexes persists both indexes for the segment as it is now.
func (s *segment) writeIndexes(fsys vfs.FS, dir string) error {
	if err := writeFileAtomic(fsys, dir, s.indexPath(), encodeIndex(indexKindOffset, s.base, s.size, s.offIdx, nil)); err != nil {
		return fmt.Errorf("write offset index of %s: %w", s.path, err)
	}
	times := s.timeIdx
	// Seal with the segment's largest timestamp so that time lookups and
	// time retention need not scan.
	if n := len(times); s.maxTS >= 0 && (n == 0 || times[n-1].ts < s.maxTS) {
		times = append(times[:n:n], timeEntry{ts: s.maxTS, rel: uint32(max(s.next-1, s.base) - s.base)})
	}
	if err := writeFileAtomic(fsys, dir, s.timeIndexPath(), encodeIndex(indexKindTime, s.base, s.size, nil, times)); err != nil {
		return fmt.Errorf("write time index of %s: %w", s.path, err)
	}
	return nil
}

// loadIndexes reads both index files; it fails if either is missing or
// does not match the segment's current size.
func (s *segment) loadIndexes(fsys vfs.FS) error {
	b, err := readFile(fsys, s.indexPath())
	if err != nil {
		return err
	}
	offs, _, err := decodeIndex(b, indexKindOffset, s.base, s.size)
	if err != nil {
		return err
	}
	b, err = readFile(fsys, s.timeIndexPath())
	if err != nil {
		return err
	}
	_, times, err := decodeIndex(b, indexKindTime, s.base, s.size)
	if err != nil {
		return err
	}
	s.offIdx, s.timeIdx = offs, times
	if n := len(times); n > 0 {
		s.maxTS, s.runMaxTS = times[n-1].ts, times[n-1].ts
	}
	return nil
}

// segReader reads batches from a segment file through a buffer.
type segReader struct {
	f      vfs.File
	limit  int64 // bytes of the file to consider
	buf    []byte
	bufPos int64
	bufLen int
}

func newSegReader(f vfs.File, limit int64, bufSize int) *segReader {
	// No bigger than what there is to read: a lookup in a small segment
	// should not allocate a megabyte.
	bufSize = int(max(min(int64(bufSize), limit), batchFixedHeader))
	return &segReader{f: f, limit: limit, buf: make([]byte, bufSize), bufPos: -1}
}

// at returns n bytes at pos, or fewer when the file ends before.
func (r *segReader) at(pos int64, n int) ([]byte, error) {
	if pos >= r.limit {
		return nil, nil
	}
	n = int(min(int64(n), r.limit-pos))
	if r.bufPos >= 0 && pos >= r.bufPos && pos+int64(n) <= r.bufPos+int64(r.bufLen) {
		off := int(pos - r.bufPos)
		return r.buf[off : off+n], nil
	}
	if n > len(r.buf) {
		r.buf = make([]byte, n)
	}
	want := int(min(int64(len(r.buf)), r.limit-pos))
	got, err := r.f.ReadAt(r.buf[:want], pos)
	if err != nil && !(errors.Is(err, io.EOF) && got == want) {
		if !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	r.bufPos, r.bufLen = pos, got
	return r.buf[:min(n, got)], nil
}

// batchAt returns the bytes of the batch at pos, which may be short or
// malformed; parseBatch judges them.
func (r *segReader) batchAt(pos int64) ([]byte, error) {
	hdr, err := r.at(pos, batchFixedHeader)
	if err != nil {
		return nil, err
	}
	sz, ok := peekBatchSize(hdr)
	if !ok {
		return hdr, nil
	}
	return r.at(pos, sz)
}

// scanSegment reads and verifies every batch of s's file from pos 0 and
// rebuilds the in-memory indexes. fn, if not nil, sees each valid batch.
// It returns the position of the first invalid batch (the file size if
// none) and the reason it is invalid.
func scanSegment(s *segment, fileSize int64, interval int32, fn func(h *batchHeader)) (int64, error, error) {
	s.resetIndex()
	r := newSegReader(s.f, fileSize, 1<<20)
	pos := int64(0)
	for pos < fileSize {
		b, err := r.batchAt(pos)
		if err != nil {
			return pos, nil, fmt.Errorf("read %s at %d: %w", s.path, pos, err)
		}
		h, perr := parseBatch(b, true)
		if perr == nil && h.baseOffset < s.next {
			perr = fmt.Errorf("batch base offset %d below the previous batch's end %d", h.baseOffset, s.next)
		}
		if perr == nil && h.attributes&attrControl == 0 && h.lastOffset()-s.base > 1<<32-1 {
			perr = fmt.Errorf("batch offset %d beyond the segment's range", h.lastOffset())
		}
		if perr != nil {
			return pos, perr, nil
		}
		s.noteBatch(&h, pos, interval)
		if fn != nil {
			fn(&h)
		}
		pos += int64(h.size())
	}
	return pos, nil, nil
}

// validBatchAfter reports whether a complete, verified batch with a base
// offset of at least minOffset starts anywhere in the file after from. It
// tells a torn tail (nothing valid follows) from damage to data that was
// followed by more writes.
func validBatchAfter(f vfs.File, from, fileSize, minOffset int64) (int64, bool) {
	r := newSegReader(f, fileSize, 1<<20)
	for pos := from; pos+batchFixedHeader <= fileSize; pos++ {
		hdr, err := r.at(pos, lengthPrefix+1)
		if err != nil || len(hdr) < lengthPrefix+1 || hdr[offMagic] != batchMagic {
			continue
		}
		sz, ok := peekBatchSize(hdr)
		if !ok || pos+int64(sz) > fileSize {
			continue
		}
		b, err := r.at(pos, sz)
		if err != nil {
			continue
		}
		if h, err := parseBatch(b, true); err == nil && h.baseOffset >= minOffset {
			return pos, true
		}
	}
	return 0, false
}

func segmentPath(dir string, base int64) string { return filepath.Join(dir, segmentName(base)) }

// firstBatchTime returns the largest timestamp of the segment's first
// batch, or false for an empty segment.
func (s *segment) firstBatchTime() (int64, bool, error) {
	if s.size == 0 {
		return 0, false, nil
	}
	r := newSegReader(s.f, s.size, batchFixedHeader)
	b, err := r.at(0, batchFixedHeader)
	if err != nil {
		return 0, false, fmt.Errorf("read %s at 0: %w", s.path, err)
	}
	if len(b) < offMaxTimestamp+8 || b[offMagic] != batchMagic {
		return 0, false, &CorruptionError{File: s.path, Offset: 0, Reason: "bad batch header"}
	}
	// Only the timestamp is used: a damaged header shows when the batch
	// is read.
	return int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])), true, nil
}

// verifyIndexedTail checks loaded indexes against the segment before they
// are trusted: the batch at the last offset-index entry must be a valid
// batch with that offset, and the batches from it on must end exactly at
// the segment's size. It sets s.next to the end offset they give. An index
// that fails is stale (errStaleIndex), whatever its checksum says. It reads
// at most index.interval.bytes and a batch.
func (s *segment) verifyIndexedTail() error {
	if s.size == 0 {
		if len(s.offIdx) != 0 {
			return fmt.Errorf("entries for an empty segment: %w", errStaleIndex)
		}
		s.next = s.base
		return nil
	}
	n := len(s.offIdx)
	if n == 0 {
		return fmt.Errorf("no entry: %w", errStaleIndex)
	}
	last := s.offIdx[n-1]
	pos, want := int64(last.pos), s.base+int64(last.rel)
	r := newSegReader(s.f, s.size, int(min(s.size-pos, 1<<20)))
	next := want
	for pos < s.size {
		b, err := r.batchAt(pos)
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", s.path, pos, err)
		}
		h, err := parseBatch(b, true)
		if err != nil {
			return fmt.Errorf("batch at indexed position %d: %v: %w", pos, err, errStaleIndex)
		}
		if want >= 0 && h.baseOffset != want {
			return fmt.Errorf("last entry says offset %d at byte %d, the batch there has %d: %w", want, pos, h.baseOffset, errStaleIndex)
		}
		want = -1
		next = max(next, h.nextOffset())
		pos += int64(h.size())
	}
	if pos != s.size {
		return fmt.Errorf("batches end at byte %d past the size %d: %w", pos, s.size, errStaleIndex)
	}
	s.next = next
	return nil
}
