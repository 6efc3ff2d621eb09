package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// Sparse indexes of one segment. Both are kept in memory and written to
// disk when a segment is sealed and on a clean close. They are a cache: a
// missing, damaged or stale index file is rebuilt from the segment.

type offsetEntry struct {
	rel uint32 // batch base offset - segment base
	pos uint32 // byte position of the batch in the segment
}

type timeEntry struct {
	ts  int64  // largest timestamp in the segment up to and including the batch
	rel uint32 // base offset of that batch - segment base
}

const (
	indexMagic      = "SLIX"
	indexVersion    = 1
	indexKindOffset = 1
	indexKindTime   = 2
	indexHeaderSize = 4 + 1 + 1 + 2 + 8 + 8 + 4 // magic, version, kind, reserved, base, covered, count
)

// floorOffset returns the position of the last indexed batch whose base
// offset is <= off (0 when none).
func floorOffset(idx []offsetEntry, base, off int64) int64 {
	if off < base {
		return 0
	}
	rel := off - base
	i := sort.Search(len(idx), func(i int) bool { return int64(idx[i].rel) > rel })
	if i == 0 {
		return 0
	}
	return int64(idx[i-1].pos)
}

// floorTime returns the base offset of the batch just before the first
// indexed one whose running maximum timestamp reaches ts, i.e. a batch from
// which scanning forward finds the first record with timestamp >= ts.
func floorTime(idx []timeEntry, base, ts int64) int64 {
	i := sort.Search(len(idx), func(i int) bool { return idx[i].ts >= ts })
	if i == 0 {
		return base
	}
	return base + int64(idx[i-1].rel)
}

func encodeIndex(kind byte, base, covered int64, offs []offsetEntry, times []timeEntry) []byte {
	n := len(offs)
	esz := 8
	if kind == indexKindTime {
		n, esz = len(times), 12
	}
	b := make([]byte, indexHeaderSize, indexHeaderSize+n*esz+4)
	copy(b, indexMagic)
	b[4] = indexVersion
	b[5] = kind
	be := binary.BigEndian
	be.PutUint64(b[8:], uint64(base))
	be.PutUint64(b[16:], uint64(covered))
	be.PutUint32(b[24:], uint32(n))
	for _, e := range offs {
		if kind == indexKindOffset {
			b = be.AppendUint32(b, e.rel)
			b = be.AppendUint32(b, e.pos)
		}
	}
	for _, e := range times {
		if kind == indexKindTime {
			b = be.AppendUint64(b, uint64(e.ts))
			b = be.AppendUint32(b, e.rel)
		}
	}
	return be.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errStaleIndex = errors.New("index does not match its segment")

// decodeIndex parses an index file written by encodeIndex and checks that
// it belongs to the segment with that base and size.
func decodeIndex(b []byte, kind byte, base, covered int64) ([]offsetEntry, []timeEntry, error) {
	if len(b) < indexHeaderSize+4 || string(b[:4]) != indexMagic {
		return nil, nil, fmt.Errorf("bad header: %w", errStaleIndex)
	}
	if b[4] != indexVersion || b[5] != kind {
		return nil, nil, fmt.Errorf("version %d kind %d: %w", b[4], b[5], errStaleIndex)
	}
	be := binary.BigEndian
	if got := crc32.Checksum(b[:len(b)-4], castagnoli); got != be.Uint32(b[len(b)-4:]) {
		return nil, nil, fmt.Errorf("checksum mismatch: %w", errStaleIndex)
	}
	if int64(be.Uint64(b[8:])) != base || int64(be.Uint64(b[16:])) != covered {
		return nil, nil, fmt.Errorf("covers base %d size %d, segment is base %d size %d: %w",
			int64(be.Uint64(b[8:])), int64(be.Uint64(b[16:])), base, covered, errStaleIndex)
	}
	n := int(be.Uint32(b[24:]))
	body := b[indexHeaderSize : len(b)-4]
	if kind == indexKindOffset {
		if len(body) != n*8 {
			return nil, nil, fmt.Errorf("bad length: %w", errStaleIndex)
		}
		out := make([]offsetEntry, n)
		for i := range out {
			out[i] = offsetEntry{rel: be.Uint32(body[i*8:]), pos: be.Uint32(body[i*8+4:])}
		}
		return out, nil, nil
	}
	if len(body) != n*12 {
		return nil, nil, fmt.Errorf("bad length: %w", errStaleIndex)
	}
	out := make([]timeEntry, n)
	for i := range out {
		out[i] = timeEntry{ts: int64(be.Uint64(body[i*12:])), rel: be.Uint32(body[i*12+8:])}
	}
	return nil, out, nil
}

// writeFileAtomic writes data to name through a temporary file, fsync and
// rename, then fsyncs the directory.
func writeFileAtomic(fsys vfs.FS, dir, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, name); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

// readFile reads a whole file.
func readFile(fsys vfs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sz, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, sz)
	if _, err := f.ReadAt(b, 0); err != nil && sz > 0 {
		return nil, err
	}
	return b, nil
}
