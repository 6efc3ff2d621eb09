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

	// Replication (ReplicaLog).

	// ErrReplicated is returned by Log.Append on a partition owned by a
	// ReplicaLog: appends go through replication.
	ErrReplicated = errors.New("partition is replicated: append through its replica log")
	// ErrTruncateCommitted is returned by TruncateAfter for a truncation
	// that would remove committed entries. A replica asked to do that must
	// stop, not comply.
	ErrTruncateCommitted = errors.New("truncation would remove committed entries")
	// ErrNoEntry is returned by ReplicaLog.Batch for an index the log does
	// not hold (never written, truncated, or removed by retention).
	ErrNoEntry = errors.New("no entry at that index")
	// ErrCompacted is returned by ReplicaLog.Term and Entries for an index
	// at or before the log's start (see ReplicaLog.Start): those entries
	// were removed by retention or replaced by a snapshot.
	ErrCompacted = errors.New("entry before the log's start")
	// ErrSnapshotStale is returned by ReadSegment when the sender's sealed
	// segments changed (compaction, retention, truncation, restart) since its
	// Snapshot was taken: the receiver must ask for a new one.
	ErrSnapshotStale = errors.New("snapshot's segment files changed; a new snapshot is needed")
	// ErrNoSnapshot is returned by ReplicaLog.Snapshot when the log holds no
	// committed entry to describe.
	ErrNoSnapshot = errors.New("no committed entry to snapshot")
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

// Error implements error.
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

// Error implements error.
func (e *CorruptionError) Error() string {
	return fmt.Sprintf("corrupt log file %s at byte %d: %s", e.File, e.Offset, e.Reason)
}
