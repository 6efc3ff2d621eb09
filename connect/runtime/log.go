package runtime

import (
	"context"

	"github.com/sluice-cdc/sluice/wal"
)

// Log is what the runtime needs of the log. *wal.Log implements it; runtimetest.Log implements
// it in memory. Every method may be called concurrently.
type Log interface {
	// CreateTopic creates a topic; wal.ErrTopicExists if the name is taken.
	CreateTopic(name string, cfg wal.TopicConfig) error
	// Describe returns a topic's partitions; wal.ErrUnknownTopic if it does not exist.
	Describe(name string) (wal.TopicInfo, error)
	// Topics lists the topics, sorted, internal ones included.
	Topics() []string
	// EarliestOffset and LatestOffset return a partition's log start and high watermark.
	EarliestOffset(topic string, partition int32) (int64, error)
	LatestOffset(topic string, partition int32) (int64, error)
	// Append stores recs atomically and durably after every earlier append to the
	// partition; opts.SourcePosition is stored with the batch (see ProducerState). A retried
	// batch of an idempotent producer returns its original offsets.
	Append(ctx context.Context, topic string, partition int32, recs []wal.Record, opts wal.AppendOptions) (wal.AppendResult, error)
	// InitProducer returns the durable producer id of a transactional id and a new epoch,
	// fencing every older epoch (wal.ErrProducerFenced).
	InitProducer(ctx context.Context, transactionalID string) (int64, int16, error)
	// ProducerState returns what a partition knows of a producer, including the source
	// position of its last batch; ok is false if it never appended there. A log that may
	// fail to tell (a replicated log) also has ProducerStateContext, which the runtime uses.
	ProducerState(topic string, partition int32, producerID int64) (wal.ProducerState, bool)
	// Fetch returns committed records from offset on, waiting up to opts.MaxWait at the high
	// watermark; an offset outside the partition is a *wal.OffsetOutOfRangeError.
	Fetch(ctx context.Context, topic string, partition int32, offset int64, opts wal.FetchOptions) (wal.FetchResult, error)
	// CommitOffsets durably stores a consumer group's next offsets; FetchOffsets reads them.
	CommitOffsets(ctx context.Context, group string, offsets map[wal.TopicPartition]int64) error
	FetchOffsets(group string) (map[wal.TopicPartition]int64, error)
}

var _ Log = (*wal.Log)(nil)

// The log's types, under the names the runtime uses.
type (
	LogRecord      = wal.Record
	LogHeader      = wal.Header
	TopicPartition = wal.TopicPartition
	AppendOptions  = wal.AppendOptions
	AppendResult   = wal.AppendResult
	FetchOptions   = wal.FetchOptions
	FetchResult    = wal.FetchResult
)

// TopicSpec is how the runtime asks for a topic it creates on first use: a partition count
// (<= 0: the runtime's default) and Kafka-named topic settings over the runtime's defaults.
type TopicSpec struct {
	Partitions int32
	Config     map[string]string
}

// offsetsLog is a log whose offsets can be asked for with a context: a replicated log waits
// for a partition's leader.
type offsetsLog interface {
	OffsetsContext(ctx context.Context, topic string, partition int32) (start, end int64, err error)
}

// bounds returns a partition's log start offset and high watermark; a log that can (a
// replicated log) stops waiting for them when ctx ends.
func bounds(ctx context.Context, log Log, topic string, partition int32) (start, end int64, err error) {
	if ol, ok := log.(offsetsLog); ok {
		return ol.OffsetsContext(ctx, topic, partition)
	}
	if start, err = log.EarliestOffset(topic, partition); err != nil {
		return 0, 0, err
	}
	if end, err = log.LatestOffset(topic, partition); err != nil {
		return 0, 0, err
	}
	return start, end, nil
}

// producerStateLog is a log whose producer state can be asked for with a context and whose
// failure to answer is an error: a replicated log asks the partition's leader.
type producerStateLog interface {
	ProducerStateContext(ctx context.Context, topic string, partition int32, producerID int64) (wal.ProducerState, bool, error)
}

// producerState returns what a partition knows of a producer; ok is false only when the
// producer never appended there, a log that could not tell returns an error.
func producerState(ctx context.Context, log Log, topic string, partition int32, producerID int64) (wal.ProducerState, bool, error) {
	if pl, ok := log.(producerStateLog); ok {
		return pl.ProducerStateContext(ctx, topic, partition, producerID)
	}
	st, ok := log.ProducerState(topic, partition, producerID)
	return st, ok, nil
}

// partitionCount returns a topic's partition count; wal.ErrUnknownTopic if it does not exist.
func partitionCount(log Log, topic string) (int32, error) {
	info, err := log.Describe(topic)
	if err != nil {
		return 0, err
	}
	return int32(len(info.Partitions)), nil
}
