package snapshot

import "encoding/binary"

// Mark is a position in a source's change stream as a number that grows along the stream:
// an LSN for PostgreSQL, binlog file number << 32 | position for MySQL.
type Mark uint64

// Orders of the records an engine emits.
//
// Chunk rows and notifications are emitted between two transactions of the stream, so their
// Orders extend the Order of the stream position they follow (base: the Order of the last
// stream record or heartbeat the source emitted, which every later stream record exceeds in
// its own bytes):
//
//	base | mark (8) | unit (8) | index (4)
//
// mark is the stream frontier at the emission (never smaller than the chunk's high
// watermark), unit the emission's number (the state's "emit", one per chunk or notification
// group, persisted), index the record's place in the unit. Within a run (mark, unit) grows
// with every emission. After a restart the same (base, mark, unit) can only come back if the
// server's stream did not move at all since the crash (mark is a fresh watermark or the
// server's position), that is, if the same committed state reads the same rows again: then the
// replayed records are the same, and the runtime rightly drops them.
const orderSuffixLen = 8 + 8 + 4

// orderSlab is how many Orders an emission allocates at a time.
const orderSlab = 256

// appendOrder appends the Order of record idx of an emission unit.
func appendOrder(dst, base []byte, mark Mark, unit uint64, idx uint32) []byte {
	if dst == nil {
		dst = make([]byte, 0, len(base)+orderSuffixLen) // one allocation per record
	}
	dst = append(dst, base...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(mark))
	dst = binary.BigEndian.AppendUint64(dst, unit)
	return binary.BigEndian.AppendUint32(dst, idx)
}
