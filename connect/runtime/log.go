package runtime

import (
	"context"
	"errors"
	"time"
)

// Log is what the runtime needs of the log. The storage engine (wal) provides it; tests use
// runtimetest.Log. Every method may be called concurrently.
type Log interface {
	// CreateTopic creates a topic; ErrTopicExists if it exists already.
	CreateTopic(name string, spec TopicSpec) error
	// Partitions returns a topic's partition count; ErrUnknownTopic if it does not exist.
	Partitions(topic string) (int32, error)
	// Topics lists the topics, sorted.
	Topics() []string
	// Bounds returns the first and the next offset of a partition (the log start offset and
	// the high watermark).
	Bounds(topic string, partition int32) (start, end int64, err error)
	// Append stores recs atomically and durably, after the records of every earlier Append to
	// the partition. opts.SourcePosition is kept with the batch (see ProducerState). A
	// retried batch of an idempotent producer returns its first offsets again.
	Append(ctx context.Context, topic string, partition int32, recs []LogRecord, opts AppendOptions) (AppendResult, error)
	// InitProducer returns the durable producer id for name and a new epoch, fencing every
	// producer of that id with an older epoch.
	InitProducer(ctx context.Context, name string) (Producer, error)
	// ProducerState returns what the partition knows of a producer; ok is false if the
	// producer never appended to it.
	ProducerState(topic string, partition int32, producerID int64) (state ProducerState, ok bool, err error)
	// Fetch returns records from offset on, waiting up to opts.MaxWait when there are none;
	// the result's buffers belong to the caller.
	Fetch(ctx context.Context, topic string, partition int32, offset int64, opts FetchOptions) (FetchResult, error)
	// CommitOffsets durably stores a consumer group's next offsets.
	CommitOffsets(ctx context.Context, group string, offsets map[TopicPartition]int64) error
	// FetchOffsets returns a consumer group's committed offsets.
	FetchOffsets(ctx context.Context, group string) (map[TopicPartition]int64, error)
}

// Errors a Log returns that the runtime tells apart.
var (
	ErrTopicExists   = errors.New("topic already exists")
	ErrUnknownTopic  = errors.New("unknown topic")
	ErrOffsetTooOld  = errors.New("offset below the log start")
	ErrProducerFence = errors.New("producer fenced by a newer epoch")
)

// TopicSpec is how the runtime creates a topic: a partition count and Kafka-named topic
// settings ("cleanup.policy", "retention.ms", ...).
type TopicSpec struct {
	Partitions int32
	Config     map[string]string
}

// LogRecord is one record as the log stores it.
type LogRecord struct {
	Offset    int64
	Timestamp time.Time
	Key       []byte // nil: null key
	Value     []byte // nil: tombstone
	Headers   []LogHeader
}

// LogHeader is a record header as the log stores it.
type LogHeader struct {
	Key   string
	Value []byte
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Producer is an idempotent producer's identity.
type Producer struct {
	ID    int64
	Epoch int16
}

// AppendOptions say who appends. A zero Producer appends without deduplication.
type AppendOptions struct {
	ProducerID     int64
	ProducerEpoch  int16
	BaseSequence   int32
	SourcePosition []byte
}

// AppendResult is where an append landed.
type AppendResult struct {
	BaseOffset int64
	LastOffset int64
	Duplicate  bool
}

// FetchOptions bound a Fetch.
type FetchOptions struct {
	MaxBytes int
	MaxWait  time.Duration
}

// FetchResult is what one Fetch returned.
type FetchResult struct {
	Records       []LogRecord
	NextOffset    int64
	HighWatermark int64
}

// ProducerState is what a partition knows of a producer: its last batch.
type ProducerState struct {
	Epoch          int16
	LastSequence   int32
	LastOffset     int64
	SourcePosition []byte
}
