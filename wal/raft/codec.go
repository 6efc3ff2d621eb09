package raft

import (
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

// enc and dec are the wire encoding of frames and requests: big-endian
// integers, uvarint lengths, strings and byte slices with a -1 (as a
// uvarint of 0) for nil.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u16(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) i64(v int64)  { e.u64(uint64(v)) }
func (e *enc) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// bytes writes len+1 (0 for nil) then the bytes.
func (e *enc) bytes(b []byte) {
	if b == nil {
		e.b = binary.AppendUvarint(e.b, 0)
		return
	}
	e.b = binary.AppendUvarint(e.b, uint64(len(b))+1)
	e.b = append(e.b, b...)
}
func (e *enc) str(s string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}

var errShortFrame = errors.New("malformed frame")

type dec struct {
	b   []byte
	err error
}

func (d *dec) need(n int) bool {
	if d.err != nil {
		return false
	}
	if len(d.b) < n {
		d.err = errShortFrame
		return false
	}
	return true
}
func (d *dec) u8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}
func (d *dec) u16() uint16 {
	if !d.need(2) {
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}
func (d *dec) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}
func (d *dec) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}
func (d *dec) i64() int64 { return int64(d.u64()) }
func (d *dec) bool() bool { return d.u8() != 0 }
func (d *dec) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShortFrame
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns a slice aliasing the frame.
func (d *dec) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n == 0 {
		return nil
	}
	if n-1 > uint64(len(d.b)) {
		d.err = errShortFrame
		return nil
	}
	v := d.b[: n-1 : n-1]
	d.b = d.b[n-1:]
	return v
}
func (d *dec) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errShortFrame
		return ""
	}
	v := string(d.b[:n])
	d.b = d.b[n:]
	return v
}

// encodeRecords writes records for a fetch response: count, then per
// record offset, timestamp (ms), key, value, headers.
func encodeRecords(e *enc, recs []wal.Record) {
	e.u32(uint32(len(recs)))
	for i := range recs {
		r := &recs[i]
		e.i64(r.Offset)
		e.i64(r.Timestamp.UnixMilli())
		e.bytes(r.Key)
		e.bytes(r.Value)
		e.u32(uint32(len(r.Headers)))
		for _, h := range r.Headers {
			e.str(h.Key)
			e.bytes(h.Value)
		}
	}
}

// decodeRecords reads what encodeRecords wrote; keys and values alias the
// frame.
func decodeRecords(d *dec) []wal.Record {
	n := d.u32()
	if d.err != nil || uint64(n) > uint64(len(d.b)) {
		d.err = errShortFrame
		return nil
	}
	out := make([]wal.Record, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		r := wal.Record{Offset: d.i64(), Timestamp: time.UnixMilli(d.i64()), Key: d.bytes(), Value: d.bytes()}
		hn := d.u32()
		if hn > math.MaxInt32 || uint64(hn) > uint64(len(d.b)) {
			d.err = errShortFrame
			return nil
		}
		for j := uint32(0); j < hn && d.err == nil; j++ {
			r.Headers = append(r.Headers, wal.Header{Key: d.str(), Value: d.bytes()})
		}
		out = append(out, r)
	}
	return out
}

// snapData is the Data of a Raft snapshot: who took it and the wal
// descriptor of the segments to fetch from it.
//
//	version u8 (1) | from node u64 | wal.Snapshot bytes
type snapData struct {
	From uint64
	Snap wal.Snapshot
}

func encodeSnapData(s snapData) ([]byte, error) {
	b, err := s.Snap.MarshalBinary()
	if err != nil {
		return nil, err
	}
	e := enc{b: make([]byte, 0, 9+len(b))}
	e.u8(1)
	e.u64(s.From)
	e.b = append(e.b, b...)
	return e.b, nil
}

func decodeSnapData(b []byte) (snapData, error) {
	d := dec{b: b}
	if d.u8() != 1 {
		return snapData{}, errors.New("unknown snapshot data version")
	}
	s := snapData{From: d.u64()}
	if d.err != nil {
		return snapData{}, d.err
	}
	if err := s.Snap.UnmarshalBinary(d.b); err != nil {
		return snapData{}, err
	}
	return s, nil
}
