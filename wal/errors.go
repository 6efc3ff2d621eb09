package wal

import (
	"errors"
	"fmt"
)

var (
	// ErrTopicExists is returned by CreateTopic for a name already in use.
	ErrTopicExists = errors.New("topic already exists")
	// ErrUnknownTopic is returned for a topic that does not exist.
	ErrUnknownTopic = errors.New("unknown topic")
	// ErrUnknownPartition is returned for a partition the topic lacks.
	ErrUnknownPartition = errors.New("unknown partition")
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("log closed")
	// ErrOutOfOrderSequence is returned when an idempotent producer's
	// sequence skips ahead or goes back beyond the retained window.
	ErrOutOfOrderSequence = errors.New("out of order sequence number")
	// ErrProducerFenced is returned when a producer's epoch is older than
	// the newest one known for its id.
	ErrProducerFenced = errors.New("producer fenced by a newer epoch")
	// ErrRecordTooLarge is returned for an append larger than the topic's
	// max.message.bytes.
	ErrRecordTooLarge = errors.New("batch larger than max.message.bytes")
	// ErrInvalidRecord is returned for an append the log refuses as such
	// (empty batch, null key on a compacted topic).
	ErrInvalidRecord = errors.New("invalid record")
	// ErrPartitionFailed is returned by every write to a partition after a
	// write or fsync failed on it: what reached the disk is unknown, so the
	// partition stops until the log is reopened and recovers it.
	ErrPartitionFailed = errors.New("partition failed and needs a reopen")
	// ErrInternalTopic is returned by Append to one of the log's own
	// topics (OffsetsTopic, ProducersTopic), which only the log writes:
	// through CommitOffsets and InitProducer.
	ErrInternalTopic = errors.New("topic is internal to the log")
)

// OffsetOutOfRangeError is returned by Fetch for an offset outside
// [LogStart, HighWatermark].
type OffsetOutOfRangeError struct {
	Topic         string
	Partition     int32
	Offset        int64
	LogStart      int64
	HighWatermark int64
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("offset %d out of range for %s-%d: valid offsets are %d..%d",
		e.Offset, e.Topic, e.Partition, e.LogStart, e.HighWatermark)
}

// Is lets errors.Is(err, ErrOffsetOutOfRange) match.
func (e *OffsetOutOfRangeError) Is(target error) bool { return target == ErrOffsetOutOfRange }

// ErrOffsetOutOfRange matches every *OffsetOutOfRangeError.
var ErrOffsetOutOfRange = errors.New("offset out of range")

// CorruptionError reports data on disk that fails verification below the
// tail of a partition: it was durable once and is damaged now. The log does
// not repair it.
type CorruptionError struct {
	File   string // the segment or index file
	Offset int64  // byte position in File
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("corrupt log file %s at byte %d: %s", e.File, e.Offset, e.Reason)
}
