package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
)

// Internal topic records. Each key and value starts with a version byte.
//
// ProducersTopic: key "t" + transactional id → value 0 | id i64 | epoch i16;
// key "n" (the anonymous id counter) → value 0 | id i64 | epoch i16.
// OffsetsTopic: key 0 | len u16 | group | len u16 | topic | partition i32 →
// value 0 | offset i64 | commit time ms i64.
const internalRecordVersion = 0

func encodeProducerValue(pe producerIDEpoch) []byte {
	b := []byte{internalRecordVersion}
	b = binary.BigEndian.AppendUint64(b, uint64(pe.id))
	return binary.BigEndian.AppendUint16(b, uint16(pe.epoch))
}

func decodeProducerValue(b []byte) (producerIDEpoch, error) {
	if len(b) != 11 || b[0] != internalRecordVersion {
		return producerIDEpoch{}, errors.New("bad producer id record")
	}
	return producerIDEpoch{id: int64(binary.BigEndian.Uint64(b[1:])), epoch: int16(binary.BigEndian.Uint16(b[9:]))}, nil
}

// readAll calls fn for every committed record of an internal topic's
// partition 0.
func (l *Log) readAll(topicName string, fn func(r *Record) error) error {
	p, err := l.partition(topicName, 0)
	if err != nil {
		return err
	}
	p.mu.Lock()
	off := p.segs[0].base
	p.mu.Unlock()
	var res FetchResult
	for {
		err := p.fetch(context.Background(), off, FetchOptions{MaxBytes: 4 << 20}, &res)
		if err != nil {
			return fmt.Errorf("read %s: %w", topicName, err)
		}
		for i := range res.Records {
			if err := fn(&res.Records[i]); err != nil {
				return fmt.Errorf("read %s at offset %d: %w", topicName, res.Records[i].Offset, err)
			}
		}
		if res.NextOffset >= res.HighWatermark {
			return nil
		}
		off = res.NextOffset
	}
}

func (l *Log) loadProducerIDs() error {
	return l.readAll(ProducersTopic, func(r *Record) error {
		if r.Value == nil || len(r.Key) == 0 {
			return nil
		}
		pe, err := decodeProducerValue(r.Value)
		if err != nil {
			return err
		}
		if pe.id >= l.nextProdID {
			l.nextProdID = pe.id + 1
		}
		if r.Key[0] == 't' {
			l.txnIDs[string(r.Key[1:])] = pe
			l.epochs[pe.id] = pe.epoch
		}
		return nil
	})
}

// InitProducer allocates a producer id and epoch, durably. For a
// transactional id seen before it returns the same id with the next epoch,
// which fences the previous holder: its appends fail with
// ErrProducerFenced. An empty transactional id gets a fresh id each time.
// A new epoch starts its sequences at 0 in every partition.
func (l *Log) InitProducer(ctx context.Context, transactionalID string) (int64, int16, error) {
	// initMu serialises allocations; prodMu is held only to read and
	// update the maps, never across the append, so that appends (which
	// read epochs) do not wait for this fsync.
	l.initMu.Lock()
	defer l.initMu.Unlock()
	l.prodMu.RLock()
	pe := producerIDEpoch{id: l.nextProdID}
	key := []byte("n")
	if transactionalID != "" {
		key = append([]byte("t"), transactionalID...)
		if cur, ok := l.txnIDs[transactionalID]; ok && cur.epoch < math.MaxInt16 {
			pe = producerIDEpoch{id: cur.id, epoch: cur.epoch + 1}
		}
	}
	l.prodMu.RUnlock()
	_, err := l.appendInternal(ctx, ProducersTopic, 0, []Record{{Key: key, Value: encodeProducerValue(pe)}}, AppendOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("init producer: %w", err)
	}
	l.prodMu.Lock()
	defer l.prodMu.Unlock()
	if pe.id >= l.nextProdID {
		l.nextProdID = pe.id + 1
	}
	if transactionalID != "" {
		l.txnIDs[transactionalID] = pe
		l.epochs[pe.id] = pe.epoch
	}
	return pe.id, pe.epoch, nil
}

// producerEpoch returns the newest epoch allocated to a transactional
// producer id.
func (l *Log) producerEpoch(id int64) (int16, bool) {
	l.prodMu.RLock()
	defer l.prodMu.RUnlock()
	e, ok := l.epochs[id]
	return e, ok
}

func encodeOffsetKey(group string, tp TopicPartition) []byte {
	b := []byte{internalRecordVersion}
	b = binary.BigEndian.AppendUint16(b, uint16(len(group)))
	b = append(b, group...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(tp.Topic)))
	b = append(b, tp.Topic...)
	return binary.BigEndian.AppendUint32(b, uint32(tp.Partition))
}

func decodeOffsetKey(b []byte) (string, TopicPartition, error) {
	bad := errors.New("bad consumer offset key")
	if len(b) < 3 || b[0] != internalRecordVersion {
		return "", TopicPartition{}, bad
	}
	gl := int(binary.BigEndian.Uint16(b[1:]))
	if len(b) < 3+gl+2 {
		return "", TopicPartition{}, bad
	}
	group := string(b[3 : 3+gl])
	b = b[3+gl:]
	tl := int(binary.BigEndian.Uint16(b))
	if len(b) != 2+tl+4 {
		return "", TopicPartition{}, bad
	}
	return group, TopicPartition{Topic: string(b[2 : 2+tl]), Partition: int32(binary.BigEndian.Uint32(b[2+tl:]))}, nil
}

func (l *Log) loadOffsets() error {
	return l.readAll(OffsetsTopic, func(r *Record) error {
		group, tp, err := decodeOffsetKey(r.Key)
		if err != nil {
			return err
		}
		if r.Value == nil {
			delete(l.offsets[group], tp)
			return nil
		}
		if len(r.Value) != 17 || r.Value[0] != internalRecordVersion {
			return errors.New("bad consumer offset value")
		}
		l.setOffset(group, tp, int64(binary.BigEndian.Uint64(r.Value[1:])), r.Offset)
		return nil
	})
}

// CommitOffsets durably stores a consumer group's offsets (the next offset
// to read in each partition), all in one atomic append.
func (l *Log) CommitOffsets(ctx context.Context, group string, offsets map[TopicPartition]int64) error {
	if group == "" || len(group) > math.MaxUint16 {
		return errors.New("commit offsets: group must be 1..65535 bytes")
	}
	if len(offsets) == 0 {
		return nil
	}
	tps := make([]TopicPartition, 0, len(offsets))
	for tp := range offsets {
		if len(tp.Topic) > math.MaxUint16 {
			return fmt.Errorf("commit offsets: topic name too long")
		}
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
	now := l.now().UnixMilli()
	recs := make([]Record, len(tps))
	for i, tp := range tps {
		v := []byte{internalRecordVersion}
		v = binary.BigEndian.AppendUint64(v, uint64(offsets[tp]))
		v = binary.BigEndian.AppendUint64(v, uint64(now))
		recs[i] = Record{Key: encodeOffsetKey(group, tp), Value: v}
	}
	// Commits run concurrently (sharing fsyncs); the cache keeps, per
	// partition, the value of the commit that is last in the log.
	res, err := l.appendInternal(ctx, OffsetsTopic, 0, recs, AppendOptions{})
	if err != nil {
		return fmt.Errorf("commit offsets of group %s: %w", group, err)
	}
	l.groupsMu.Lock()
	defer l.groupsMu.Unlock()
	for i, tp := range tps {
		l.setOffset(group, tp, offsets[tp], res.BaseOffset+int64(i))
	}
	return nil
}

// setOffset records a committed offset found at logOffset in OffsetsTopic,
// unless a later commit is already known. Caller holds groupsMu or is
// Open.
func (l *Log) setOffset(group string, tp TopicPartition, offset, logOffset int64) {
	m := l.offsets[group]
	if m == nil {
		m = map[TopicPartition]committedOffset{}
		l.offsets[group] = m
	}
	if cur, ok := m[tp]; !ok || cur.at < logOffset {
		m[tp] = committedOffset{offset: offset, at: logOffset}
	}
}

// committedOffset is a group's offset and where its commit is in the log.
type committedOffset struct{ offset, at int64 }

// FetchOffsets returns a consumer group's committed offsets.
func (l *Log) FetchOffsets(group string) (map[TopicPartition]int64, error) {
	l.mu.RLock()
	closed := l.closed
	l.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	l.groupsMu.Lock()
	defer l.groupsMu.Unlock()
	out := make(map[TopicPartition]int64, len(l.offsets[group]))
	for tp, o := range l.offsets[group] {
		out[tp] = o.offset
	}
	return out, nil
}
