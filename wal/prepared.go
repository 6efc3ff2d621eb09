package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// PreparedBatch is a batch whose records are encoded and checksummed but
// whose place in the log (base offset, replication term and index) is not
// known yet. A replication leader prepares batches outside its loop and
// finishes them inside it, where the place is decided; only the header is
// checksummed then.
type PreparedBatch struct {
	bb batchBuilder
	h  batchHeader
}

// PrepareBatch encodes recs as an uncompressed batch; see EncodeBatch.
func PrepareBatch(recs []Record, opts AppendOptions, now time.Time) (*PreparedBatch, error) {
	return PrepareCompressedBatch(recs, opts, Uncompressed, now)
}

// PrepareCompressedBatch encodes recs as a batch whose records are
// compressed with codec (when that makes them smaller), as an append to a
// topic of that compression.type stores them.
func PrepareCompressedBatch(recs []Record, opts AppendOptions, codec Compression, now time.Time) (*PreparedBatch, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("prepare batch: empty batch: %w", ErrInvalidRecord)
	}
	pb := &PreparedBatch{}
	pb.bb.encodeRecords(recs, opts.SourcePosition, opts.SourcePosition != nil, now.UnixMilli(), codec)
	pb.h = batchHeader{
		lastOffsetDelta: int32(len(recs) - 1),
		baseTimestamp:   pb.bb.baseTS, maxTimestamp: pb.bb.maxTS,
		producerID: -1, producerEpoch: -1, baseSequence: -1,
		deleteHorizon: -1, recordCount: int32(len(recs)),
	}
	if opts.ProducerID > 0 {
		pb.h.producerID, pb.h.producerEpoch, pb.h.baseSequence = opts.ProducerID, opts.ProducerEpoch, opts.BaseSequence
	}
	pb.bb.finish(&pb.h)
	return pb, nil
}

// ParsePreparedBatch takes an encoded data batch (as Bytes or EncodeBatch
// return it, whatever its offset, term and index), verifies it and
// prepares it to be finished at another place. b is copied.
func ParsePreparedBatch(b []byte) (*PreparedBatch, error) {
	h, err := parseBatch(b, true)
	if err == nil && h.size() != len(b) {
		err = fmt.Errorf("%d trailing bytes: %w", len(b)-h.size(), errBadLength)
	}
	if err == nil && (h.attributes&attrControl != 0 || h.recordCount == 0) {
		err = fmt.Errorf("not a data batch: %w", ErrInvalidRecord)
	}
	if err != nil {
		return nil, fmt.Errorf("parse batch: %w", err)
	}
	pb := &PreparedBatch{h: h}
	pb.bb.buf = append([]byte(nil), b...)
	pb.bb.recordsAt = h.recordsAt
	pb.bb.codec = h.codec()
	pb.bb.recordsCRC = crc32.Update(0, castagnoli, pb.bb.buf[h.recordsAt:])
	pb.bb.count = h.recordCount
	pb.bb.baseTS, pb.bb.maxTS = h.baseTimestamp, h.maxTimestamp
	pb.h.sourcePos, pb.h.inflated = nil, nil
	return pb, nil
}

// Compress compresses the records of an uncompressed batch with codec,
// when that makes them smaller; a compressed batch stays as it is.
func (pb *PreparedBatch) Compress(codec Compression) {
	bb := &pb.bb
	if bb.codec != Uncompressed || codec == Uncompressed || bb.count == 0 {
		return
	}
	var ok bool
	if bb.buf, bb.zbuf, ok = compressBatch(bb.buf, bb.zbuf, bb.recordsAt, codec); ok {
		bb.codec = codec
		bb.recordsCRC = crc32.Update(0, castagnoli, bb.buf[bb.recordsAt:])
		pb.h.attributes = pb.h.attributes&^attrCodec | int16(codec)
		pb.h.length = int32(len(bb.buf) - lengthPrefix)
	}
}

// Finish places the batch at baseOffset with a replication term and index
// and returns its bytes, which alias the prepared batch until the next
// Finish.
func (pb *PreparedBatch) Finish(baseOffset int64, term, index uint64) []byte {
	pb.h.baseOffset, pb.h.term, pb.h.index = baseOffset, term, index
	return pb.bb.finish(&pb.h)
}

// Bytes returns the batch as last finished (at offset 0, term 0, index 0
// when never finished).
func (pb *PreparedBatch) Bytes() []byte { return pb.bb.buf }

// Records returns the number of records (the offsets the batch takes).
func (pb *PreparedBatch) Records() int { return int(pb.h.recordCount) }

// Size returns the encoded size in bytes.
func (pb *PreparedBatch) Size() int { return len(pb.bb.buf) }

// Producer returns the producer fields (id <= 0: none).
func (pb *PreparedBatch) Producer() (id int64, epoch int16, baseSequence int32) {
	return pb.h.producerID, pb.h.producerEpoch, pb.h.baseSequence
}

// LastSequence returns the producer sequence number of the last record.
func (pb *PreparedBatch) LastSequence() int32 {
	return seqAdd(pb.h.baseSequence, max(pb.h.recordCount, 1)-1)
}

// NextSequence returns the sequence number that follows seq (they wrap
// from math.MaxInt32 to 0).
func NextSequence(seq int32) int32 { return seqAdd(seq, 1) }

// MaxTimestamp returns the largest record timestamp.
func (pb *PreparedBatch) MaxTimestamp() time.Time { return msTime(pb.h.maxTimestamp) }

// DecodeBatch verifies an encoded batch and appends its records, with
// their offsets, to dst. Keys, values and header values alias b (or, for a
// compressed batch, the memory its records were inflated into).
func DecodeBatch(b []byte, dst []Record) ([]Record, BatchInfo, error) {
	info, h, err := decodeBatchInfo(b)
	if err != nil {
		return dst, info, err
	}
	rest, err := h.records(b) // inflated once, by the check
	if err != nil {
		return dst, info, fmt.Errorf("%v: %w", err, errBadRecords)
	}
	for j := int32(0); j < h.recordCount; j++ {
		var r rawRecord
		n, err := parseRecord(rest, &r)
		if err != nil {
			return dst, info, fmt.Errorf("record %d: %v: %w", j, err, errBadRecords)
		}
		rest = rest[n:]
		rec := Record{Offset: h.baseOffset + int64(r.offsetDelta), Timestamp: msTime(h.baseTimestamp + r.timestampDelta), Key: r.key, Value: r.value}
		if r.headerCount > 0 {
			rec.Headers = r.decodeHeaders(nil)
		}
		dst = append(dst, rec)
	}
	return dst, info, nil
}

// ProducerIDRecord is the ProducersTopic record that allocates a producer
// id and epoch, for a transactional id ("" for an anonymous producer).
func ProducerIDRecord(transactionalID string, id int64, epoch int16) Record {
	key := []byte("n")
	if transactionalID != "" {
		key = append([]byte("t"), transactionalID...)
	}
	return Record{Key: key, Value: encodeProducerValue(producerIDEpoch{id: id, epoch: epoch})}
}

// ParseProducerIDRecord reads a ProducersTopic record; ok is false for a
// record to skip (a tombstone).
func ParseProducerIDRecord(r Record) (transactionalID string, id int64, epoch int16, ok bool, err error) {
	if r.Value == nil || len(r.Key) == 0 {
		return "", 0, 0, false, nil
	}
	pe, err := decodeProducerValue(r.Value)
	if err != nil {
		return "", 0, 0, false, err
	}
	if r.Key[0] == 't' {
		transactionalID = string(r.Key[1:])
	}
	return transactionalID, pe.id, pe.epoch, true, nil
}

// OffsetCommitRecord is the OffsetsTopic record of a consumer group's
// committed offset for one partition.
func OffsetCommitRecord(group string, tp TopicPartition, offset int64, now time.Time) Record {
	v := []byte{internalRecordVersion}
	v = binary.BigEndian.AppendUint64(v, uint64(offset))
	v = binary.BigEndian.AppendUint64(v, uint64(now.UnixMilli()))
	return Record{Key: encodeOffsetKey(group, tp), Value: v}
}

// ParseOffsetCommit reads an OffsetsTopic record; deleted is set for a
// tombstone.
func ParseOffsetCommit(r Record) (group string, tp TopicPartition, offset int64, deleted bool, err error) {
	group, tp, err = decodeOffsetKey(r.Key)
	if err != nil {
		return "", tp, 0, false, err
	}
	if r.Value == nil {
		return group, tp, 0, true, nil
	}
	if len(r.Value) != 17 || r.Value[0] != internalRecordVersion {
		return "", tp, 0, false, fmt.Errorf("bad consumer offset value")
	}
	return group, tp, int64(binary.BigEndian.Uint64(r.Value[1:])), false, nil
}

// BatchPlace is where a batch's header puts it.
type BatchPlace struct {
	BaseOffset int64
	NextOffset int64 // BaseOffset for a control batch
	Term       uint64
	Index      uint64
	Control    bool
	Size       int
}

// PeekBatch reads the placement fields of the batch header at the start
// of b without verifying the batch (ReplicaLog.Append verifies it).
func PeekBatch(b []byte) (BatchPlace, bool) {
	h, ok := peekHeader(b)
	if !ok {
		return BatchPlace{}, false
	}
	return BatchPlace{BaseOffset: h.baseOffset, NextOffset: h.next, Term: h.term, Index: h.index, Control: h.control, Size: h.size}, true
}

// PlaceBatch returns a copy of the encoded batch b with its base offset
// set to baseOffset and its checksum recomputed (the record offsets are
// relative, so nothing else changes). b is verified first, so that the
// new checksum does not bless damaged bytes; b is not modified.
func PlaceBatch(b []byte, baseOffset int64) ([]byte, error) {
	h, err := parseBatch(b, false)
	if err != nil {
		return nil, err
	}
	if h.size() != len(b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadLength, len(b)-h.size())
	}
	out := append([]byte(nil), b...)
	binary.BigEndian.PutUint64(out[offBaseOffset:], uint64(baseOffset))
	binary.BigEndian.PutUint32(out[offCRC:], batchCRC(out, h.recordsAt))
	return out, nil
}
