package wal

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

const defaultFetchBytes = 1 << 20

// fetch reads committed records from offset on into res, reusing its
// buffers; see Log.FetchInto.
func (p *partition) fetch(ctx context.Context, offset int64, opts FetchOptions, res *FetchResult) error {
	res.Records = res.Records[:0]
	res.NextOffset, res.HighWatermark, res.LogStartOffset = offset, 0, 0
	maxBytes := opts.MaxBytes
	if maxBytes <= 0 {
		maxBytes = defaultFetchBytes
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	waited, unpark := false, false
	for {
		p.mu.Lock()
		if unpark {
			p.parked--
			p.wakeups++
			unpark = false
		}
		if p.closed {
			p.mu.Unlock()
			return ErrClosed
		}
		start, hw := p.segs[0].base, p.hw
		res.HighWatermark, res.LogStartOffset = hw, start
		if offset < start || offset > hw {
			p.mu.Unlock()
			return &OffsetOutOfRangeError{
				Topic: p.topic, Partition: p.id, Offset: offset, LogStart: start, HighWatermark: hw}
		}
		if offset == hw {
			if opts.MaxWait <= 0 || waited {
				p.mu.Unlock()
				return nil
			}
			ch := p.hwCh
			p.parked++
			p.mu.Unlock()
			if timer == nil {
				timer = time.NewTimer(opts.MaxWait)
			}
			select {
			case <-ch:
			case <-timer.C:
				waited = true
			case <-ctx.Done():
				p.mu.Lock()
				p.parked--
				p.mu.Unlock()
				return ctx.Err()
			}
			unpark = true
			continue
		}
		segs, mark, view := p.segs, p.hwMark(), viewIndexes(p.segs)
		p.filesMu.RLock()
		p.mu.Unlock()
		err := readRecords(segs, &view, mark, hw, maxBytes, res)
		p.filesMu.RUnlock()
		return err
	}
}

// hwMark is where the committed end lies in the files.
type hwMark struct{ base, pos int64 }

func (p *partition) hwMark() hwMark { return hwMark{p.hwBase, p.hwPos} }

// readLimit is how many bytes of s hold committed batches.
func readLimit(s *segment, m hwMark) int64 {
	switch {
	case s.base == m.base:
		return m.pos
	case s.base > m.base:
		return 0
	default:
		return s.size
	}
}

// findSegment returns the index of the segment holding offset.
func findSegment(segs []*segment, offset int64) int {
	i := len(segs) - 1
	for i > 0 && segs[i].base > offset {
		i--
	}
	return i
}

// readRecords decodes committed records from offset on, reading windows of
// up to maxBytes and moving on while batches emptied by compaction yield
// nothing. Caller holds filesMu for reading.
func readRecords(segs []*segment, view *indexView, mark hwMark, hw int64, maxBytes int, res *FetchResult) error {
	for i := findSegment(segs, res.NextOffset); i < len(segs) && res.NextOffset < hw; i++ {
		s := segs[i]
		limit := readLimit(s, mark)
		pos := floorOffset(view.offsets(s), s.base, res.NextOffset)
		for pos < limit {
			n, err := readWindow(s, pos, limit, hw, maxBytes, res)
			if err != nil || len(res.Records) > 0 {
				return err
			}
			if n == 0 {
				return &CorruptionError{File: s.path, Offset: pos, Reason: "no batch at an indexed position"}
			}
			pos += int64(n)
		}
		if i+1 < len(segs) {
			res.NextOffset = max(res.NextOffset, segs[i+1].base)
		}
	}
	return nil
}

// readWindow reads the batches in one window of s from pos, appends the
// records at or after res.NextOffset to res and returns the bytes consumed.
func readWindow(s *segment, pos, limit, hw int64, maxBytes int, res *FetchResult) (int, error) {
	n := min(int64(max(maxBytes, batchFixedHeader)), limit-pos)
	buf := res.grow(int(n))
	if got, err := s.f.ReadAt(buf, pos); int64(got) < n {
		return 0, fmt.Errorf("read %s at %d: %w", s.path, pos, err)
	}
	// The first batch is returned whole even if larger than maxBytes.
	if sz, ok := peekBatchSize(buf); ok && sz > len(buf) && pos+int64(sz) <= limit {
		buf = res.grow(sz)
		if _, err := s.f.ReadAt(buf, pos); err != nil {
			return 0, fmt.Errorf("read %s at %d: %w", s.path, pos, err)
		}
	}
	offset := res.NextOffset
	// First pass: verify the batches and count the records. Compressed
	// batches count at their inflated size, so that maxBytes bounds the
	// memory a fetch takes (the first batch with records is returned
	// whole, as the first batch is).
	count, end, inflated := 0, 0, 0
	budget := max(maxBytes, batchFixedHeader)
	for end < len(buf) {
		h, err := parseBatch(buf[end:], false)
		if err == errShortBatch && end > 0 {
			break
		}
		if err != nil {
			return 0, &CorruptionError{File: s.path, Offset: pos + int64(end), Reason: err.Error()}
		}
		if h.nextOffset() > hw {
			return 0, &CorruptionError{File: s.path, Offset: pos + int64(end), Reason: "batch extends past the committed end"}
		}
		if h.nextOffset() > offset {
			if h.codec() != Uncompressed {
				size, _ := binary.Uvarint(buf[end+h.recordsAt : end+h.size()])
				if count > 0 && uint64(inflated)+size > uint64(budget) {
					break
				}
				inflated += int(min(size, maxBatchBytes))
			} else {
				inflated += h.size()
			}
			count += int(h.recordCount)
		}
		end += h.size()
	}
	res.Records = slices.Grow(res.Records[:0], count)
	hdrs := res.hdrs[:0]
	defer func() { res.hdrs = hdrs[:0] }()
	for p := 0; p < end; {
		at := p
		h, _ := parseBatchHeader(buf[p:]) // verified above
		b := buf[p : p+h.size()]
		p += h.size()
		if h.nextOffset() <= offset {
			continue
		}
		rest, err := h.records(b)
		if err != nil {
			return 0, &CorruptionError{File: s.path, Offset: pos + int64(at), Reason: err.Error()}
		}
		for j := int32(0); j < h.recordCount; j++ {
			var r rawRecord
			m, err := parseRecord(rest, &r)
			if err != nil {
				return 0, &CorruptionError{File: s.path, Offset: pos + int64(at), Reason: fmt.Sprintf("record %d: %v", j, err)}
			}
			rest = rest[m:]
			off := h.baseOffset + int64(r.offsetDelta)
			if off < offset {
				continue
			}
			rec := Record{Offset: off, Timestamp: msTime(h.baseTimestamp + r.timestampDelta), Key: r.key, Value: r.value}
			if r.headerCount > 0 {
				k := len(hdrs)
				hdrs = r.decodeHeaders(hdrs)
				rec.Headers = hdrs[k:len(hdrs):len(hdrs)]
			}
			res.Records = append(res.Records, rec)
		}
		res.NextOffset = h.nextOffset()
	}
	return end, nil
}

// offsetForTime returns the offset of the first committed record with a
// timestamp >= ts, or hw if there is none.
func (p *partition) offsetForTime(ts int64) (int64, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0, ErrClosed
	}
	segs, hw, mark, view := p.segs, p.hw, p.hwMark(), viewIndexes(p.segs)
	p.filesMu.RLock()
	p.mu.Unlock()
	defer p.filesMu.RUnlock()
	for _, s := range segs {
		if view.maxTime(s) < ts {
			continue
		}
		limit := readLimit(s, mark)
		from := floorTime(view.times(s), s.base, ts)
		pos := floorOffset(view.offsets(s), s.base, from)
		r := newSegReader(s.f, limit, int(min(limit-pos, 1<<20)))
		for pos < limit {
			b, err := r.batchAt(pos)
			if err != nil {
				return 0, fmt.Errorf("read %s at %d: %w", s.path, pos, err)
			}
			h, err := parseBatch(b, false)
			if err != nil {
				return 0, &CorruptionError{File: s.path, Offset: pos, Reason: err.Error()}
			}
			pos += int64(h.size())
			if h.nextOffset() > hw {
				return hw, nil
			}
			if h.maxTimestamp < ts {
				continue
			}
			rest, err := h.records(b)
			if err != nil {
				return 0, &CorruptionError{File: s.path, Offset: pos - int64(h.size()), Reason: err.Error()}
			}
			for j := int32(0); j < h.recordCount; j++ {
				var rr rawRecord
				m, err := parseRecord(rest, &rr)
				if err != nil {
					return 0, &CorruptionError{File: s.path, Offset: pos - int64(h.size()), Reason: err.Error()}
				}
				rest = rest[m:]
				if h.baseTimestamp+rr.timestampDelta >= ts {
					return h.baseOffset + int64(rr.offsetDelta), nil
				}
			}
		}
	}
	return hw, nil
}

// grow returns the result's read buffer with length n, reallocating it
// only when too small.
func (res *FetchResult) grow(n int) []byte {
	if cap(res.buf) < n {
		res.buf = make([]byte, n)
	}
	return res.buf[:n]
}
