package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// Layout of a batch; see doc.go for the drawing.
const (
	offBaseOffset      = 0
	offLength          = 8
	offMagic           = 12
	offCRC             = 13
	offAttributes      = 17
	offLastOffsetDelta = 19
	offBaseTimestamp   = 23
	offMaxTimestamp    = 31
	offProducerID      = 39
	offProducerEpoch   = 47
	offBaseSequence    = 49
	offTerm            = 53
	offIndex           = 61
	offDeleteHorizon   = 69
	offRecordCount     = 77
	offSourcePosLen    = 81
	batchFixedHeader   = 85

	// lengthPrefix is the part of a batch before its length field counts.
	lengthPrefix = offMagic

	batchMagic byte = 1

	// attrControl marks a batch that is a replication entry (leader no-op,
	// configuration change): it has no records and takes no offset.
	attrControl int16 = 1 << 5

	// maxBatchBytes bounds what the decoder accepts, whatever the topic
	// says, so that a corrupt length cannot make it allocate wildly.
	maxBatchBytes = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	errShortBatch = errors.New("batch shorter than its header or length")
	errBadLength  = errors.New("batch length out of range")
	errBadMagic   = errors.New("unknown batch format version")
	errBadCRC     = errors.New("batch checksum mismatch")
	errBadRecords = errors.New("malformed records in batch")
)

// batchHeader is the decoded fixed part of a batch. sourcePos aliases the
// bytes it was parsed from.
type batchHeader struct {
	baseOffset      int64
	length          int32
	attributes      int16
	lastOffsetDelta int32
	baseTimestamp   int64
	maxTimestamp    int64
	producerID      int64
	producerEpoch   int16
	baseSequence    int32
	term            uint64
	index           uint64
	deleteHorizon   int64
	recordCount     int32
	sourcePos       []byte
	recordsAt       int    // offset of the first record within the batch
	inflated        []byte // a compressed batch's records, once parseBatch(full) inflated them
}

// size is the whole batch's size in bytes.
func (h *batchHeader) size() int { return lengthPrefix + int(h.length) }

// lastOffset is the offset of the batch's last record (baseOffset-1 for a
// control batch, which takes no offset).
func (h *batchHeader) lastOffset() int64 { return h.baseOffset + int64(h.lastOffsetDelta) }

// nextOffset is the offset after the batch.
func (h *batchHeader) nextOffset() int64 { return h.lastOffset() + 1 }

// codec is the compression of the batch's records.
func (h *batchHeader) codec() Compression { return Compression(h.attributes & attrCodec) }

// records returns the records of the batch b (uncompressed: a slice of b;
// compressed: a new slice), for parseRecord.
func (h *batchHeader) records(b []byte) ([]byte, error) {
	raw := b[h.recordsAt:h.size()]
	switch {
	case h.codec() == Uncompressed:
		return raw, nil
	case h.inflated != nil:
		return h.inflated, nil
	}
	return decompressRecords(h.codec(), raw)
}

// lastSequence is the sequence number of the batch's last record.
func (h *batchHeader) lastSequence() int32 {
	if h.baseSequence < 0 {
		return -1
	}
	return seqAdd(h.baseSequence, h.lastOffsetDelta)
}

func seqAdd(seq int32, n int32) int32 {
	s := int64(seq) + int64(n)
	if s > math.MaxInt32 {
		s -= math.MaxInt32 + 1
	}
	return int32(s)
}

// batchCRC computes the checksum of a complete batch b: CRC-32C over the
// records, then the header from the attributes to the end of the source
// position, then the base offset. The records come first so that appenders
// can checksum them before they hold the partition lock.
func batchCRC(b []byte, recordsAt int) uint32 {
	c := crc32.Update(0, castagnoli, b[recordsAt:])
	return finishCRC(c, b, recordsAt)
}

func finishCRC(recordsCRC uint32, b []byte, recordsAt int) uint32 {
	c := crc32.Update(recordsCRC, castagnoli, b[offAttributes:recordsAt])
	return crc32.Update(c, castagnoli, b[offBaseOffset:offLength])
}

// peekBatchSize reads the size of the batch starting at b from its length
// field; ok is false if b is too short to hold the field or the length is
// out of range.
func peekBatchSize(b []byte) (int, bool) {
	if len(b) < lengthPrefix {
		return 0, false
	}
	l := int32(binary.BigEndian.Uint32(b[offLength:]))
	if l < batchFixedHeader-lengthPrefix || l > maxBatchBytes {
		return 0, false
	}
	return lengthPrefix + int(l), true
}

// parseBatchHeader decodes the header of the batch at the start of b,
// checking only the framing. Use parseBatch unless b was verified before.
func parseBatchHeader(b []byte) (batchHeader, error) {
	var h batchHeader
	if len(b) < lengthPrefix {
		return h, errShortBatch
	}
	h.length = int32(binary.BigEndian.Uint32(b[offLength:]))
	if h.length < batchFixedHeader-lengthPrefix || h.length > maxBatchBytes {
		return h, fmt.Errorf("length %d: %w", h.length, errBadLength)
	}
	if len(b) < h.size() {
		return h, errShortBatch
	}
	b = b[:h.size()]
	if b[offMagic] != batchMagic {
		return h, fmt.Errorf("magic %d: %w", b[offMagic], errBadMagic)
	}
	be := binary.BigEndian
	h.baseOffset = int64(be.Uint64(b[offBaseOffset:]))
	h.attributes = int16(be.Uint16(b[offAttributes:]))
	h.lastOffsetDelta = int32(be.Uint32(b[offLastOffsetDelta:]))
	h.baseTimestamp = int64(be.Uint64(b[offBaseTimestamp:]))
	h.maxTimestamp = int64(be.Uint64(b[offMaxTimestamp:]))
	h.producerID = int64(be.Uint64(b[offProducerID:]))
	h.producerEpoch = int16(be.Uint16(b[offProducerEpoch:]))
	h.baseSequence = int32(be.Uint32(b[offBaseSequence:]))
	h.term = be.Uint64(b[offTerm:])
	h.index = be.Uint64(b[offIndex:])
	h.deleteHorizon = int64(be.Uint64(b[offDeleteHorizon:]))
	h.recordCount = int32(be.Uint32(b[offRecordCount:]))
	spLen := int32(be.Uint32(b[offSourcePosLen:]))
	h.recordsAt = batchFixedHeader
	if spLen >= 0 {
		if int(spLen) > len(b)-batchFixedHeader {
			return h, fmt.Errorf("source position length %d: %w", spLen, errBadLength)
		}
		h.sourcePos = b[batchFixedHeader : batchFixedHeader+int(spLen)]
		h.recordsAt += int(spLen)
	} else if spLen != -1 {
		return h, fmt.Errorf("source position length %d: %w", spLen, errBadLength)
	}
	return h, nil
}

// parseBatch decodes and verifies the batch at the start of b. It checks the
// framing, version, checksum and header consistency and, when full, that
// the records parse.
func parseBatch(b []byte, full bool) (batchHeader, error) {
	h, err := parseBatchHeader(b)
	if err != nil {
		return h, err
	}
	b = b[:h.size()]
	be := binary.BigEndian
	if got, want := batchCRC(b, h.recordsAt), be.Uint32(b[offCRC:]); got != want {
		return h, fmt.Errorf("computed %08x, stored %08x: %w", got, want, errBadCRC)
	}
	if h.baseOffset < 0 || h.lastOffsetDelta < -1 || h.recordCount < 0 ||
		int64(h.recordCount) > int64(h.lastOffsetDelta)+1 ||
		(h.attributes&attrControl != 0 && (h.recordCount != 0 || h.lastOffsetDelta != -1)) ||
		(h.attributes&attrControl == 0 && h.lastOffsetDelta < 0) {
		return h, fmt.Errorf("inconsistent header (records %d, last offset delta %d): %w", h.recordCount, h.lastOffsetDelta, errBadRecords)
	}
	if c := h.codec(); c > Zstd || c != Uncompressed && h.attributes&attrControl != 0 {
		return h, fmt.Errorf("%s: %w", c, errBadCodec)
	}
	if !full {
		return h, nil
	}
	// Verify that exactly recordCount records fill the rest.
	rest, err := h.records(b)
	if err != nil {
		return h, fmt.Errorf("%v: %w", err, errBadRecords)
	}
	if h.codec() != Uncompressed {
		h.inflated = rest // verified below; the caller reads the records without inflating again
	}
	prev := int64(-1)
	for i := int32(0); i < h.recordCount; i++ {
		var r rawRecord
		n, err := parseRecord(rest, &r)
		if err != nil {
			return h, fmt.Errorf("record %d: %v: %w", i, err, errBadRecords)
		}
		if int64(r.offsetDelta) <= prev || r.offsetDelta > h.lastOffsetDelta {
			return h, fmt.Errorf("record %d: offset delta %d out of order: %w", i, r.offsetDelta, errBadRecords)
		}
		prev = int64(r.offsetDelta)
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return h, fmt.Errorf("%d trailing bytes: %w", len(rest), errBadRecords)
	}
	return h, nil
}

// rawRecord is a record as laid out in a batch; the slices alias the batch.
type rawRecord struct {
	timestampDelta int64
	offsetDelta    int32
	key            []byte // nil when null
	value          []byte // nil when null (tombstone)
	headerCount    int
	headers        []byte // the encoded headers
}

func readVarint(b []byte) (int64, int, error) {
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, 0, errors.New("bad varint")
	}
	return v, n, nil
}

// readBytes reads a varint length then that many bytes; -1 is null.
func readBytes(b []byte) ([]byte, int, error) {
	l, n, err := readVarint(b)
	if err != nil {
		return nil, 0, err
	}
	if l == -1 {
		return nil, n, nil
	}
	if l < 0 || l > int64(len(b)-n) {
		return nil, 0, errors.New("bad length")
	}
	return b[n : n+int(l) : n+int(l)], n + int(l), nil
}

// parseRecord decodes one record at the start of b and returns its size.
func parseRecord(b []byte, r *rawRecord) (int, error) {
	l, n, err := readVarint(b)
	if err != nil {
		return 0, err
	}
	if l < 0 || l > int64(len(b)-n) {
		return 0, errors.New("bad record length")
	}
	total := n + int(l)
	b = b[n:total]
	if len(b) < 1 {
		return 0, errors.New("short record")
	}
	p := 1 // attributes, unused
	v, n, err := readVarint(b[p:])
	if err != nil {
		return 0, err
	}
	r.timestampDelta = v
	p += n
	v, n, err = readVarint(b[p:])
	if err != nil {
		return 0, err
	}
	if v < 0 || v > math.MaxInt32 {
		return 0, errors.New("bad offset delta")
	}
	r.offsetDelta = int32(v)
	p += n
	if r.key, n, err = readBytes(b[p:]); err != nil {
		return 0, err
	}
	p += n
	if r.value, n, err = readBytes(b[p:]); err != nil {
		return 0, err
	}
	p += n
	hc, n, err := readVarint(b[p:])
	if err != nil {
		return 0, err
	}
	if hc < 0 || hc > int64(len(b)) {
		return 0, errors.New("bad header count")
	}
	p += n
	hstart := p
	for i := int64(0); i < hc; i++ {
		k, n, err := readBytes(b[p:])
		if err != nil || k == nil {
			return 0, errors.New("bad header key")
		}
		p += n
		if _, n, err = readBytes(b[p:]); err != nil {
			return 0, errors.New("bad header value")
		}
		p += n
	}
	r.headerCount = int(hc)
	r.headers = b[hstart:p]
	if p != len(b) {
		return 0, errors.New("record length mismatch")
	}
	return total, nil
}

// decodeHeaders appends the headers of r to dst. Values alias the batch;
// keys are converted to strings.
func (r *rawRecord) decodeHeaders(dst []Header) []Header {
	b := r.headers
	for i := 0; i < r.headerCount; i++ {
		k, n, _ := readBytes(b)
		b = b[n:]
		v, n, _ := readBytes(b)
		b = b[n:]
		dst = append(dst, Header{Key: string(k), Value: v})
	}
	return dst
}

func appendBytesField(dst []byte, b []byte, null bool) []byte {
	if null {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

func varintLen(v int64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutVarint(buf[:], v)
}

// appendRecord encodes one record body (after its length) into dst.
func recordBodyLen(tsDelta int64, offsetDelta int32, key, value []byte, headers []Header) int {
	n := 1 + varintLen(tsDelta) + varintLen(int64(offsetDelta))
	if key == nil {
		n += 1
	} else {
		n += varintLen(int64(len(key))) + len(key)
	}
	if value == nil {
		n += 1
	} else {
		n += varintLen(int64(len(value))) + len(value)
	}
	n += varintLen(int64(len(headers)))
	for _, h := range headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key)
		if h.Value == nil {
			n += 1
		} else {
			n += varintLen(int64(len(h.Value))) + len(h.Value)
		}
	}
	return n
}

func appendRecord(dst []byte, tsDelta int64, offsetDelta int32, key, value []byte, headers []Header) []byte {
	dst = binary.AppendVarint(dst, int64(recordBodyLen(tsDelta, offsetDelta, key, value, headers)))
	dst = append(dst, 0)
	dst = binary.AppendVarint(dst, tsDelta)
	dst = binary.AppendVarint(dst, int64(offsetDelta))
	dst = appendBytesField(dst, key, key == nil)
	dst = appendBytesField(dst, value, value == nil)
	dst = binary.AppendVarint(dst, int64(len(headers)))
	for _, h := range headers {
		dst = binary.AppendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendBytesField(dst, h.Value, h.Value == nil)
	}
	return dst
}

// batchBuilder encodes a batch in two steps: records (no lock needed), then
// the header once offsets and replication fields are known.
type batchBuilder struct {
	buf        []byte
	zbuf       []byte // the other buffer, when compression swaps them
	codec      Compression
	recordsAt  int
	recordsCRC uint32
	count      int32
	baseTS     int64
	maxTS      int64
}

// encodeRecords lays out the header space and the records of recs,
// compressed with codec when that makes them smaller. now is the timestamp
// given to records with a zero Timestamp.
func (bb *batchBuilder) encodeRecords(recs []Record, sourcePos []byte, hasSourcePos bool, now int64, codec Compression) {
	spLen := 0
	if hasSourcePos {
		spLen = len(sourcePos)
	}
	bb.recordsAt = batchFixedHeader + spLen
	// room for the whole batch at once: growing by doubling would copy it
	// and leave garbage several times its size
	if n := bb.recordsAt + recordsBound(recs); cap(bb.buf) < n {
		bb.buf = make([]byte, 0, n)
	}
	bb.buf = append(bb.buf[:0], make([]byte, bb.recordsAt)...)
	if hasSourcePos {
		copy(bb.buf[batchFixedHeader:], sourcePos)
		binary.BigEndian.PutUint32(bb.buf[offSourcePosLen:], uint32(spLen))
	} else {
		binary.BigEndian.PutUint32(bb.buf[offSourcePosLen:], math.MaxUint32) // -1
	}
	bb.count = int32(len(recs))
	bb.baseTS, bb.maxTS = -1, -1
	for i := range recs {
		ts := now
		if !recs[i].Timestamp.IsZero() {
			ts = recs[i].Timestamp.UnixMilli()
		}
		if i == 0 {
			bb.baseTS = ts
		}
		if ts > bb.maxTS {
			bb.maxTS = ts
		}
		bb.buf = appendRecord(bb.buf, ts-bb.baseTS, int32(i), recs[i].Key, recs[i].Value, recs[i].Headers)
	}
	bb.codec = Uncompressed
	if codec != Uncompressed && len(recs) > 0 {
		var ok bool
		if bb.buf, bb.zbuf, ok = compressBatch(bb.buf, bb.zbuf, bb.recordsAt, codec); ok {
			bb.codec = codec
		}
	}
	bb.recordsCRC = crc32.Update(0, castagnoli, bb.buf[bb.recordsAt:])
}

// recordsBound is at least the encoded size of recs: their bytes, and
// every varint at its largest.
func recordsBound(recs []Record) int {
	const lenField = binary.MaxVarintLen32
	n := 0
	for i := range recs {
		r := &recs[i]
		// length, attributes, timestamp delta, offset delta, key, value,
		// header count
		n += lenField + 1 + binary.MaxVarintLen64 + lenField + lenField + len(r.Key) + lenField + len(r.Value) + lenField
		for _, h := range r.Headers {
			n += lenField + len(h.Key) + lenField + len(h.Value)
		}
	}
	return n
}

// finish fills in the header and checksum.
func (bb *batchBuilder) finish(h *batchHeader) []byte {
	b := bb.buf
	be := binary.BigEndian
	be.PutUint64(b[offBaseOffset:], uint64(h.baseOffset))
	be.PutUint32(b[offLength:], uint32(len(b)-lengthPrefix))
	b[offMagic] = batchMagic
	h.attributes = h.attributes&^attrCodec | int16(bb.codec)
	be.PutUint16(b[offAttributes:], uint16(h.attributes))
	be.PutUint32(b[offLastOffsetDelta:], uint32(h.lastOffsetDelta))
	be.PutUint64(b[offBaseTimestamp:], uint64(h.baseTimestamp))
	be.PutUint64(b[offMaxTimestamp:], uint64(h.maxTimestamp))
	be.PutUint64(b[offProducerID:], uint64(h.producerID))
	be.PutUint16(b[offProducerEpoch:], uint16(h.producerEpoch))
	be.PutUint32(b[offBaseSequence:], uint32(h.baseSequence))
	be.PutUint64(b[offTerm:], h.term)
	be.PutUint64(b[offIndex:], h.index)
	be.PutUint64(b[offDeleteHorizon:], uint64(h.deleteHorizon))
	be.PutUint32(b[offRecordCount:], uint32(h.recordCount))
	be.PutUint32(b[offCRC:], finishCRC(bb.recordsCRC, b, bb.recordsAt))
	return b
}

// msTime converts milliseconds since the epoch to a time.Time.
func msTime(ms int64) time.Time { return time.UnixMilli(ms) }
