package wal

import "time"

// Record is one key/value entry of a partition.
type Record struct {
	// Offset is assigned by Append and ignored on input.
	Offset int64
	// Timestamp is the record's time, stored with millisecond precision.
	// The zero value means "now" on Append.
	Timestamp time.Time
	// Key is the record's key; nil is a null key.
	Key []byte
	// Value is the record's value; nil is a tombstone (a delete for
	// compaction), distinct from an empty value.
	Value []byte
	// Headers are application metadata, kept in order.
	Headers []Header
}

// Header is a record header. A nil Value is a null header value.
type Header struct {
	Key   string
	Value []byte
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// AppendOptions carry what an append says about its producer.
type AppendOptions struct {
	// ProducerID, ProducerEpoch and BaseSequence make the append idempotent
	// (see InitProducer). ProducerID <= 0 means no producer: the append is
	// neither deduplicated nor fenced, and BaseSequence is ignored.
	ProducerID    int64
	ProducerEpoch int16
	// BaseSequence is the sequence number of the first record; each record
	// takes one. A producer's first batch in a partition (per epoch) has
	// sequence 0.
	BaseSequence int32
	// SourcePosition is opaque bytes stored in the same batch as the
	// records, read back by ProducerState. nil stores no position.
	SourcePosition []byte
	// Written, if set, is called once the batch has its place in the
	// partition (it is written, or it is a duplicate of a written batch)
	// and before the append waits for it to be durable: an append started
	// after Written returned lands after this batch. It is called with the
	// partition locked, so it must only signal (close a channel, say). It
	// is not called when the append fails before writing. A replicated log
	// (package wal/raft) calls it for an idempotent producer's batch (a
	// ProducerID) once the partition's leader proposed it, if the append
	// reached the leader on the caller's node, on the leader's Raft loop
	// (which it must not hold up): a later batch of the same producer
	// lands after it, or is refused for a sequence gap if this one was
	// lost. Elsewhere it is not called, and the caller learns the order
	// only when Append returns.
	Written func()
}

// AppendResult says where an append landed.
type AppendResult struct {
	BaseOffset int64
	LastOffset int64
	// Duplicate is true when the batch was a retry of one already in the
	// log; the offsets are the original ones and nothing was written.
	Duplicate bool
	// LogAppendTime is when the log wrote the batch; for a duplicate, the
	// original batch's newest record timestamp.
	LogAppendTime time.Time
}

// FetchOptions bound a Fetch.
type FetchOptions struct {
	// MaxBytes bounds the size of the returned batches; the first batch is
	// returned whole even if larger, so that a reader always progresses.
	// Zero means 1 MiB.
	MaxBytes int
	// MaxWait is how long a Fetch at the high watermark waits for new
	// records. Zero returns at once.
	MaxWait time.Duration
}

// FetchResult is what Fetch returns. Record keys, values and header values
// alias a buffer owned by the result (or, for a compressed batch, memory
// its records were inflated into): a FetchInto with the same result
// reuses it, so copy what must outlive that.
type FetchResult struct {
	Records []Record
	// NextOffset is where the next Fetch should start: after the last
	// returned record, or past batches that compaction emptied.
	NextOffset     int64
	HighWatermark  int64
	LogStartOffset int64

	buf  []byte
	hdrs []Header
}

// ProducerState is what a partition knows of one producer.
type ProducerState struct {
	Epoch          int16
	LastSequence   int32
	LastOffset     int64
	LastTimestamp  time.Time
	SourcePosition []byte // of the producer's last batch; nil if it had none
}

// PartitionInfo describes one partition.
type PartitionInfo struct {
	Partition      int32
	LogStartOffset int64
	HighWatermark  int64
	SizeBytes      int64
	Segments       int
	// Compactions counts the compaction runs of the partition since the log was opened (a run:
	// the partition was due by its dirty ratio or lag, and compaction mapped its keys and
	// rewrote the segments old enough), CompactedBytes the segment bytes they removed.
	Compactions    int64
	CompactedBytes int64
}

// TopicInfo describes one topic.
type TopicInfo struct {
	Name       string
	Config     TopicConfig
	Partitions []PartitionInfo
}
