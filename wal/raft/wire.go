package raft

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

// Request ops. Each request body starts with a timeout (ms, u32) that
// bounds the serving node's waits.
const (
	opAppend         = 1  // topic, partition, batch bytes → term u64, leader u64, base i64, last i64, dup bool, append time ms
	opFetch          = 2  // topic, partition, offset, max bytes u32, max wait ms u32 → next, hw, start, records
	opOffsets        = 3  // topic, partition → start i64, hw i64
	opInitProducer   = 4  // transactional id → id i64, epoch u16
	opProducerState  = 5  // topic, partition, producer id → found bool, epoch, last seq, last offset, ts ms, source position
	opCommitOffsets  = 6  // group, count, (topic, partition, offset)… → ()
	opFetchOffsets   = 7  // group → count, (topic, partition, offset)…
	opCreateTopic    = 8  // name, replication factor u8, config map → ()
	opDescribe       = 9  // topic → partitions (start, hw, size, segments) from this node's log
	opSnapshotChunk  = 10 // topic, partition, layout, base, offset, max → bytes
	opSnapshotStatus = 11 // topic, partition, ok bool → ()
	opStatus         = 12 // () → node status (leaders, terms) for tests and tools
	opLocalRead      = 13 // topic, partition, offset, max bytes → next, hw, start, records, read from this node's committed log
	opTopics         = 14 // () → names
	opTopicMeta      = 15 // name → the topic's cluster record (key, value), at the meta leader
)

// Error codes on the wire.
const (
	errCodeOther = iota
	errCodeNotLeader
	errCodeUnknownTopic
	errCodeUnknownPartition
	errCodeTopicExists
	errCodeFenced
	errCodeOutOfOrder
	errCodeTooLarge
	errCodeInvalid
	errCodeOutOfRange
	errCodeClosed
	errCodeOutcomeUnknown
	errCodeLost
	errCodeNoLeader
	errCodeGroupFailed
	errCodeSnapshotStale
	errCodeNotReplica
	errCodeDeadline
)

var codeErrors = []struct {
	code int
	err  error
}{
	{errCodeOutcomeUnknown, ErrOutcomeUnknown}, // before the causes it wraps
	{errCodeLost, ErrLost},
	{errCodeGroupFailed, ErrGroupFailed},
	{errCodeUnknownTopic, wal.ErrUnknownTopic},
	{errCodeUnknownPartition, wal.ErrUnknownPartition},
	{errCodeTopicExists, wal.ErrTopicExists},
	{errCodeFenced, wal.ErrProducerFenced},
	{errCodeOutOfOrder, wal.ErrOutOfOrderSequence},
	{errCodeTooLarge, wal.ErrRecordTooLarge},
	{errCodeInvalid, wal.ErrInvalidRecord},
	{errCodeClosed, wal.ErrClosed},
	{errCodeNoLeader, ErrNoLeader},
	{errCodeSnapshotStale, wal.ErrSnapshotStale},
	{errCodeNotReplica, ErrNotReplica},
	{errCodeDeadline, context.DeadlineExceeded},
}

// remoteError is an error that came from another node: its text, and the
// sentinel it matches.
type remoteError struct {
	msg    string
	target error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.target }

func encodeError(e *enc, err error) {
	var nl *NotLeaderError
	var oor *wal.OffsetOutOfRangeError
	switch {
	case errors.As(err, &nl):
		e.u8(errCodeNotLeader)
		e.str(nl.Topic)
		e.u32(uint32(nl.Partition))
		e.u64(nl.Leader)
		return
	case errors.As(err, &oor):
		e.u8(errCodeOutOfRange)
		e.str(oor.Topic)
		e.u32(uint32(oor.Partition))
		e.i64(oor.Offset)
		e.i64(oor.LogStart)
		e.i64(oor.HighWatermark)
		return
	}
	code := errCodeOther
	for _, ce := range codeErrors {
		if errors.Is(err, ce.err) {
			code = ce.code
			break
		}
	}
	e.u8(uint8(code))
	e.str(err.Error())
}

func decodeError(b []byte) error {
	d := dec{b: b}
	code := int(d.u8())
	switch code {
	case errCodeNotLeader:
		e := &NotLeaderError{Topic: d.str(), Partition: int32(d.u32()), Leader: d.u64()}
		if d.err == nil {
			return e
		}
	case errCodeOutOfRange:
		e := &wal.OffsetOutOfRangeError{Topic: d.str(), Partition: int32(d.u32()), Offset: d.i64(), LogStart: d.i64(), HighWatermark: d.i64()}
		if d.err == nil {
			return e
		}
	default:
		msg := d.str()
		if d.err != nil {
			break
		}
		for _, ce := range codeErrors {
			if ce.code == code {
				return &remoteError{msg: msg, target: ce.err}
			}
		}
		return &remoteError{msg: msg}
	}
	return errors.New("malformed error from node")
}

// reqTimeout reads the timeout a request carries.
func reqTimeout(d *dec) time.Duration { return time.Duration(d.u32()) * time.Millisecond }

// putTimeout writes the time left before ctx's deadline.
func putTimeout(e *enc, ctx context.Context) {
	ms := uint32(10_000)
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl).Milliseconds()
		ms = uint32(max(left, 1))
	}
	e.u32(ms)
}
