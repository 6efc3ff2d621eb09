// Package runtimetest provides an in-memory runtime.Log with fault hooks, for fast tests of the
// runtime and of connectors. It keeps everything in memory and "durable" means "stored in the
// map"; use the real wal for crash tests.
package runtimetest

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/wal"
)

// Hooks inject faults. Each hook may be nil; each is called with the log's lock released.
type Hooks struct {
	// BeforeAppend fails an append (nothing stored) when it returns an error.
	BeforeAppend func(topic string, partition int32, recs []runtime.LogRecord) error
	// AfterAppend is called after an append was stored; an error is returned to the caller
	// although the records are durable (as when a process dies before the ack).
	AfterAppend func(topic string, partition int32, recs []runtime.LogRecord) error
	// BeforeCommit fails a consumer offset commit when it returns an error.
	BeforeCommit func(group string, offsets map[runtime.TopicPartition]int64) error
}

// Log is an in-memory runtime.Log.
type Log struct {
	Hooks Hooks

	mu        sync.Mutex
	topics    map[string]*topic
	producers map[string]*producer
	nextPID   int64
	groups    map[string]map[runtime.TopicPartition]int64
	appends   int
}

type topic struct {
	cfg   wal.TopicConfig
	parts []*partition
}

type producer struct {
	id    int64
	epoch int16
}

type partition struct {
	recs      []runtime.LogRecord
	start     int64 // offset of recs[0]
	producers map[int64]*producerState
	notify    chan struct{} // closed and replaced on every append
}

type producerState struct {
	state    wal.ProducerState
	firstSeq int32
	first    int64 // first offset of the last batch
}

// NewLog returns an empty log.
func NewLog() *Log {
	return &Log{
		topics:    map[string]*topic{},
		producers: map[string]*producer{},
		groups:    map[string]map[runtime.TopicPartition]int64{},
	}
}

var _ runtime.Log = (*Log)(nil)

// CreateTopic implements runtime.Log.
func (l *Log) CreateTopic(name string, cfg wal.TopicConfig) error {
	if cfg == (wal.TopicConfig{}) {
		cfg = wal.DefaultTopicConfig()
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	if err := wal.ValidTopicName(name); err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.topics[name]; ok {
		return fmt.Errorf("create topic %s: %w", name, wal.ErrTopicExists)
	}
	t := &topic{cfg: cfg}
	for range cfg.Partitions {
		t.parts = append(t.parts, &partition{producers: map[int64]*producerState{}, notify: make(chan struct{})})
	}
	l.topics[name] = t
	return nil
}

// Describe implements runtime.Log.
func (l *Log) Describe(name string) (wal.TopicInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.topics[name]
	if !ok {
		return wal.TopicInfo{}, fmt.Errorf("topic %s: %w", name, wal.ErrUnknownTopic)
	}
	info := wal.TopicInfo{Name: name, Config: t.cfg}
	for i, p := range t.parts {
		info.Partitions = append(info.Partitions, wal.PartitionInfo{Partition: int32(i), LogStartOffset: p.start, HighWatermark: p.start + int64(len(p.recs))})
	}
	return info, nil
}

// Topics implements runtime.Log.
func (l *Log) Topics() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.topics))
	for n := range l.topics {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (l *Log) part(name string, p int32) (*partition, error) {
	t, ok := l.topics[name]
	if !ok {
		return nil, fmt.Errorf("topic %s: %w", name, wal.ErrUnknownTopic)
	}
	if p < 0 || int(p) >= len(t.parts) {
		return nil, fmt.Errorf("topic %s partition %d: %w", name, p, wal.ErrUnknownPartition)
	}
	return t.parts[p], nil
}

// EarliestOffset implements runtime.Log.
func (l *Log) EarliestOffset(name string, p int32) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pt, err := l.part(name, p)
	if err != nil {
		return 0, err
	}
	return pt.start, nil
}

// LatestOffset implements runtime.Log.
func (l *Log) LatestOffset(name string, p int32) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pt, err := l.part(name, p)
	if err != nil {
		return 0, err
	}
	return pt.start + int64(len(pt.recs)), nil
}

// Append implements runtime.Log, with Kafka's idempotent-producer rules: an older epoch is
// fenced, a batch equal to the producer's last one is a duplicate, any other gap is an error.
func (l *Log) Append(ctx context.Context, name string, p int32, recs []runtime.LogRecord, opts runtime.AppendOptions) (runtime.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return runtime.AppendResult{}, err
	}
	if len(recs) == 0 {
		return runtime.AppendResult{}, fmt.Errorf("append to %s-%d: empty batch", name, p)
	}
	if h := l.Hooks.BeforeAppend; h != nil {
		if err := h(name, p, recs); err != nil {
			return runtime.AppendResult{}, err
		}
	}
	res, err := l.append(name, p, recs, opts)
	if err != nil {
		return res, err
	}
	if h := l.Hooks.AfterAppend; h != nil {
		if err := h(name, p, recs); err != nil {
			return runtime.AppendResult{}, err
		}
	}
	return res, nil
}

func (l *Log) append(name string, p int32, recs []runtime.LogRecord, opts runtime.AppendOptions) (runtime.AppendResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pt, err := l.part(name, p)
	if err != nil {
		return runtime.AppendResult{}, err
	}
	var ps *producerState
	if opts.ProducerID > 0 {
		ps = pt.producers[opts.ProducerID]
		if cur := l.epochOf(opts.ProducerID); opts.ProducerEpoch < cur {
			return runtime.AppendResult{}, fmt.Errorf("append to %s-%d: epoch %d < %d: %w", name, p, opts.ProducerEpoch, cur, wal.ErrProducerFenced)
		}
		last := opts.BaseSequence + int32(len(recs)) - 1
		switch {
		case ps == nil || ps.state.Epoch != opts.ProducerEpoch:
			if opts.BaseSequence != 0 {
				return runtime.AppendResult{}, fmt.Errorf("append to %s-%d: first sequence of epoch %d is %d, want 0: %w", name, p, opts.ProducerEpoch, opts.BaseSequence, wal.ErrOutOfOrderSequence)
			}
		case ps.firstSeq == opts.BaseSequence && ps.state.LastSequence == last:
			if opts.Written != nil {
				opts.Written()
			}
			return runtime.AppendResult{BaseOffset: ps.first, LastOffset: ps.state.LastOffset, Duplicate: true}, nil
		case opts.BaseSequence != ps.state.LastSequence+1:
			return runtime.AppendResult{}, fmt.Errorf("append to %s-%d: sequence %d, want %d: %w", name, p, opts.BaseSequence, ps.state.LastSequence+1, wal.ErrOutOfOrderSequence)
		}
	}
	base := pt.start + int64(len(pt.recs))
	now := time.Now()
	for i, r := range recs {
		c := runtime.LogRecord{Offset: base + int64(i), Timestamp: r.Timestamp, Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value)}
		if c.Timestamp.IsZero() {
			c.Timestamp = now
		}
		for _, h := range r.Headers {
			c.Headers = append(c.Headers, runtime.LogHeader{Key: h.Key, Value: bytes.Clone(h.Value)})
		}
		pt.recs = append(pt.recs, c)
	}
	res := runtime.AppendResult{BaseOffset: base, LastOffset: base + int64(len(recs)) - 1}
	if opts.ProducerID > 0 {
		if ps == nil {
			ps = &producerState{}
			pt.producers[opts.ProducerID] = ps
		}
		ps.firstSeq, ps.first = opts.BaseSequence, base
		ps.state = wal.ProducerState{
			Epoch:          opts.ProducerEpoch,
			LastSequence:   opts.BaseSequence + int32(len(recs)) - 1,
			LastOffset:     res.LastOffset,
			SourcePosition: bytes.Clone(opts.SourcePosition),
		}
	}
	l.appends++
	close(pt.notify)
	pt.notify = make(chan struct{})
	if opts.Written != nil {
		opts.Written() // placed; Hooks.AfterAppend runs after it, as a failed fsync would
	}
	return res, nil
}

func (l *Log) epochOf(id int64) int16 {
	for _, pr := range l.producers {
		if pr.id == id {
			return pr.epoch
		}
	}
	return 0
}

// Appends returns how many appends were stored.
func (l *Log) Appends() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.appends
}

// InitProducer implements runtime.Log.
func (l *Log) InitProducer(ctx context.Context, name string) (int64, int16, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	pr, ok := l.producers[name]
	if !ok || name == "" {
		l.nextPID++
		pr = &producer{id: l.nextPID}
		l.producers[name] = pr
	}
	pr.epoch++
	return pr.id, pr.epoch, nil
}

// ProducerState implements runtime.Log.
func (l *Log) ProducerState(name string, p int32, id int64) (wal.ProducerState, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pt, err := l.part(name, p)
	if err != nil {
		return wal.ProducerState{}, false
	}
	ps, ok := pt.producers[id]
	if !ok {
		return wal.ProducerState{}, false
	}
	st := ps.state
	st.SourcePosition = bytes.Clone(st.SourcePosition)
	return st, true
}

// Fetch implements runtime.Log.
func (l *Log) Fetch(ctx context.Context, name string, p int32, offset int64, opts runtime.FetchOptions) (runtime.FetchResult, error) {
	maxBytes := opts.MaxBytes
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	var deadline <-chan time.Time
	for {
		l.mu.Lock()
		pt, err := l.part(name, p)
		if err != nil {
			l.mu.Unlock()
			return runtime.FetchResult{}, err
		}
		end := pt.start + int64(len(pt.recs))
		if offset < pt.start || offset > end {
			l.mu.Unlock()
			return runtime.FetchResult{}, &wal.OffsetOutOfRangeError{Topic: name, Partition: p, Offset: offset, LogStart: pt.start, HighWatermark: end}
		}
		if offset < end || opts.MaxWait <= 0 {
			res := runtime.FetchResult{NextOffset: offset, HighWatermark: end, LogStartOffset: pt.start}
			size := 0
			for o := offset; o < end; o++ {
				r := pt.recs[o-pt.start]
				n := len(r.Key) + len(r.Value) + 16
				if len(res.Records) > 0 && size+n > maxBytes {
					break
				}
				size += n
				res.Records = append(res.Records, cloneRecord(r))
				res.NextOffset = o + 1
			}
			l.mu.Unlock()
			return res, nil
		}
		wake := pt.notify
		l.mu.Unlock()
		if deadline == nil {
			t := time.NewTimer(opts.MaxWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-wake:
		case <-deadline:
			return runtime.FetchResult{NextOffset: offset, HighWatermark: end}, nil
		case <-ctx.Done():
			return runtime.FetchResult{}, ctx.Err()
		}
	}
}

func cloneRecord(r runtime.LogRecord) runtime.LogRecord {
	c := r
	c.Key, c.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
	c.Headers = nil
	for _, h := range r.Headers {
		c.Headers = append(c.Headers, runtime.LogHeader{Key: h.Key, Value: bytes.Clone(h.Value)})
	}
	return c
}

// Records returns a copy of a partition's records (nil for an unknown partition).
func (l *Log) Records(name string, p int32) []runtime.LogRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	pt, err := l.part(name, p)
	if err != nil {
		return nil
	}
	out := make([]runtime.LogRecord, len(pt.recs))
	for i, r := range pt.recs {
		out[i] = cloneRecord(r)
	}
	return out
}

// CommitOffsets implements runtime.Log.
func (l *Log) CommitOffsets(ctx context.Context, group string, offsets map[runtime.TopicPartition]int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if h := l.Hooks.BeforeCommit; h != nil {
		if err := h(group, offsets); err != nil {
			return err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[group]
	if g == nil {
		g = map[runtime.TopicPartition]int64{}
		l.groups[group] = g
	}
	for tp, o := range offsets {
		g[tp] = o
	}
	return nil
}

// FetchOffsets implements runtime.Log.
func (l *Log) FetchOffsets(group string) (map[runtime.TopicPartition]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[runtime.TopicPartition]int64{}
	for tp, o := range l.groups[group] {
		out[tp] = o
	}
	return out, nil
}
