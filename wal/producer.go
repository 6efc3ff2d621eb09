package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// producerBatches is how many recent batches per producer a partition
// remembers to recognise retries, as Kafka does.
const producerBatches = 5

type batchMeta struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
	timestamp               int64
}

// producerEntry is what a partition knows of one producer.
type producerEntry struct {
	epoch     int16
	recent    [producerBatches]batchMeta
	n         int // valid entries in recent, newest last
	lastTS    int64
	sourcePos []byte
}

func (e *producerEntry) last() *batchMeta { return &e.recent[e.n-1] }

// observe applies a batch of this producer to its state, whether appended
// now or read back from the log.
func (e *producerEntry) observe(h *batchHeader) {
	if h.producerEpoch != e.epoch {
		e.epoch, e.n = h.producerEpoch, 0
	}
	m := batchMeta{
		firstSeq: h.baseSequence, lastSeq: h.lastSequence(),
		firstOffset: h.baseOffset, lastOffset: h.lastOffset(), timestamp: h.maxTimestamp,
	}
	if e.n == producerBatches {
		copy(e.recent[:], e.recent[1:])
		e.n--
	}
	e.recent[e.n] = m
	e.n++
	e.lastTS = h.maxTimestamp
	if h.sourcePos != nil {
		e.sourcePos = append(e.sourcePos[:0:0], h.sourcePos...)
	} else {
		e.sourcePos = nil
	}
}

// check decides what to do with a batch from a producer: a nil meta and
// nil error means append; a meta means it is a retry of that batch.
func (e *producerEntry) check(epoch int16, baseSeq int32, count int) (*batchMeta, error) {
	if epoch < e.epoch {
		return nil, fmt.Errorf("epoch %d, current %d: %w", epoch, e.epoch, ErrProducerFenced)
	}
	if epoch > e.epoch || e.n == 0 {
		if baseSeq != 0 && epoch > e.epoch {
			return nil, fmt.Errorf("first batch of epoch %d has sequence %d, want 0: %w", epoch, baseSeq, ErrOutOfOrderSequence)
		}
		return nil, nil
	}
	lastSeq := seqAdd(baseSeq, int32(count-1))
	for i := 0; i < e.n; i++ {
		if m := &e.recent[i]; m.firstSeq == baseSeq && m.lastSeq == lastSeq {
			return m, nil
		}
	}
	if want := seqAdd(e.last().lastSeq, 1); baseSeq != want {
		return nil, fmt.Errorf("got %d, want %d: %w", baseSeq, want, ErrOutOfOrderSequence)
	}
	return nil, nil
}

// Producer snapshots: a partition's producer state as of an offset,
// written when a segment is rolled and on close, so that opening a
// partition reads only the batches after it.
//
//	"SLPS" | version u8 | offset i64 | count u32 | entries | crc32c u32
//	entry: id i64 | epoch i16 | lastTS i64 | n u8 | n × (firstSeq i32,
//	       lastSeq i32, firstOffset i64, lastOffset i64, ts i64) |
//	       sourcePosLen i32 (-1 = none) | sourcePos
const (
	snapshotMagic   = "SLPS"
	snapshotVersion = 1
	snapshotSuffix  = ".snapshot"
)

func snapshotName(offset int64) string { return fmt.Sprintf("%020d%s", offset, snapshotSuffix) }

func parseSnapshotName(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, snapshotSuffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func encodeSnapshot(offset int64, producers map[int64]*producerEntry) []byte {
	be := binary.BigEndian
	b := []byte(snapshotMagic)
	b = append(b, snapshotVersion)
	b = be.AppendUint64(b, uint64(offset))
	b = be.AppendUint32(b, uint32(len(producers)))
	// By id, so that the same state always encodes to the same bytes.
	for _, id := range slices.Sorted(maps.Keys(producers)) {
		e := producers[id]
		b = be.AppendUint64(b, uint64(id))
		b = be.AppendUint16(b, uint16(e.epoch))
		b = be.AppendUint64(b, uint64(e.lastTS))
		b = append(b, byte(e.n))
		for _, m := range e.recent[:e.n] {
			b = be.AppendUint32(b, uint32(m.firstSeq))
			b = be.AppendUint32(b, uint32(m.lastSeq))
			b = be.AppendUint64(b, uint64(m.firstOffset))
			b = be.AppendUint64(b, uint64(m.lastOffset))
			b = be.AppendUint64(b, uint64(m.timestamp))
		}
		if e.sourcePos == nil {
			b = be.AppendUint32(b, 0xffffffff)
		} else {
			b = be.AppendUint32(b, uint32(len(e.sourcePos)))
			b = append(b, e.sourcePos...)
		}
	}
	return be.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errBadSnapshot = errors.New("bad producer snapshot")

func decodeSnapshot(b []byte) (int64, map[int64]*producerEntry, error) {
	be := binary.BigEndian
	if len(b) < 4+1+8+4+4 || string(b[:4]) != snapshotMagic || b[4] != snapshotVersion {
		return 0, nil, errBadSnapshot
	}
	if crc32.Checksum(b[:len(b)-4], castagnoli) != be.Uint32(b[len(b)-4:]) {
		return 0, nil, fmt.Errorf("checksum mismatch: %w", errBadSnapshot)
	}
	offset := int64(be.Uint64(b[5:]))
	n := be.Uint32(b[13:])
	p := b[17 : len(b)-4]
	out := make(map[int64]*producerEntry, min(n, 1<<16))
	need := func(k int) bool { return len(p) >= k }
	for i := uint32(0); i < n; i++ {
		if !need(8 + 2 + 8 + 1) {
			return 0, nil, errBadSnapshot
		}
		id := int64(be.Uint64(p))
		e := &producerEntry{epoch: int16(be.Uint16(p[8:])), lastTS: int64(be.Uint64(p[10:])), n: int(p[18])}
		p = p[19:]
		if e.n == 0 || e.n > producerBatches || !need(e.n*32+4) {
			return 0, nil, errBadSnapshot
		}
		for j := 0; j < e.n; j++ {
			e.recent[j] = batchMeta{
				firstSeq: int32(be.Uint32(p)), lastSeq: int32(be.Uint32(p[4:])),
				firstOffset: int64(be.Uint64(p[8:])), lastOffset: int64(be.Uint64(p[16:])),
				timestamp: int64(be.Uint64(p[24:])),
			}
			p = p[32:]
		}
		spLen := int32(be.Uint32(p))
		p = p[4:]
		if spLen >= 0 {
			if !need(int(spLen)) {
				return 0, nil, errBadSnapshot
			}
			e.sourcePos = append([]byte{}, p[:spLen]...)
			p = p[spLen:]
		} else if spLen != -1 {
			return 0, nil, errBadSnapshot
		}
		out[id] = e
	}
	if len(p) != 0 {
		return 0, nil, errBadSnapshot
	}
	return offset, out, nil
}

// writeSnapshot persists the producer state as of offset and removes all
// but the newest two older snapshots.
func writeSnapshot(fsys vfs.FS, dir string, offset int64, producers map[int64]*producerEntry) error {
	if err := writeFileAtomic(fsys, dir, filepath.Join(dir, snapshotName(offset)), encodeSnapshot(offset, producers)); err != nil {
		return fmt.Errorf("write producer snapshot %d: %w", offset, err)
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	var snaps []int64
	for _, n := range names {
		if off, ok := parseSnapshotName(n); ok {
			snaps = append(snaps, off)
		}
	}
	for i := 0; i+2 < len(snaps); i++ {
		if err := fsys.Remove(filepath.Join(dir, snapshotName(snaps[i]))); err != nil {
			return err
		}
	}
	return nil
}
