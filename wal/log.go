package wal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/wal/vfs"
)

// FsyncPolicy says when an append is acknowledged.
type FsyncPolicy int

const (
	// FsyncGroupCommit, the default, acknowledges an append only after the
	// segment holding it was fsynced. Concurrent appends to a partition
	// share fsyncs: one runs while the others queue, then one more covers
	// all that queued.
	FsyncGroupCommit FsyncPolicy = iota
	// UnsafeFsyncNever acknowledges an append once written to the
	// operating system, which writes it to disk when it likes. A machine
	// crash loses acknowledged records. Only for tests and benchmarks.
	UnsafeFsyncNever
)

// Options configure a Log. The zero value is usable.
type Options struct {
	// FS does the file I/O; nil is the operating system's.
	FS vfs.FS
	// Fsync is the durability policy; see FsyncPolicy.
	Fsync FsyncPolicy
	// Clock is the time source; nil is time.Now.
	Clock func() time.Time
	// Logger receives lifecycle and recovery messages; nil discards them.
	Logger *slog.Logger
	// TopicDefaults is the configuration CreateTopic starts from when
	// given a zero TopicConfig; zero means DefaultTopicConfig().
	TopicDefaults TopicConfig
	// MaintenanceInterval is how often Run enforces retention and runs
	// compaction; zero means 30 seconds.
	MaintenanceInterval time.Duration
	// UnsafeTruncateCorruptTail makes Open truncate an active segment at
	// its first invalid batch even when valid batches follow, instead of
	// failing with a CorruptionError. That is what a power loss that
	// persisted a later page of an unsynced write before an earlier one
	// looks like; but if the damage is to acknowledged data, the batches
	// after it are lost too. For an operator who has read the error, once.
	UnsafeTruncateCorruptTail bool
}

// Internal topics.
const (
	// OffsetsTopic holds consumer groups' committed offsets.
	OffsetsTopic = "__consumer_offsets"
	// ProducersTopic holds allocated producer ids and epochs.
	ProducersTopic = "__sluice_producers"
)

// Log is an embedded, durable log of topics and partitions. Its methods are
// safe for concurrent use.
type Log struct {
	dir    string
	fs     vfs.FS
	opts   Options
	logger *slog.Logger
	lock   io.Closer

	mu     sync.RWMutex
	topics map[string]*topic
	closed bool

	// initMu serialises InitProducer. prodMu guards the producer maps;
	// it is never held while waiting for a partition.
	initMu     sync.Mutex
	prodMu     sync.RWMutex
	txnIDs     map[string]producerIDEpoch
	epochs     map[int64]int16
	nextProdID int64

	groupsMu sync.Mutex
	offsets  map[string]map[TopicPartition]committedOffset
}

type topic struct {
	name  string
	cfg   TopicConfig
	dir   string
	parts []*partition
}

type producerIDEpoch struct {
	id    int64
	epoch int16
}

func (l *Log) now() time.Time { return l.opts.Clock() }

// Open opens the log in dir, creating it if needed, and recovers every
// partition (see the package documentation). It starts no goroutine; call
// Run for background work.
func Open(dir string, opts Options) (*Log, error) {
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.TopicDefaults.Partitions == 0 {
		opts.TopicDefaults = DefaultTopicConfig()
	} else if err := opts.TopicDefaults.Validate(); err != nil {
		return nil, fmt.Errorf("open log %s: topic defaults: %w", dir, err)
	}
	if opts.MaintenanceInterval <= 0 {
		opts.MaintenanceInterval = 30 * time.Second
	}
	l := &Log{
		dir: dir, fs: opts.FS, opts: opts, logger: opts.Logger,
		topics: map[string]*topic{}, txnIDs: map[string]producerIDEpoch{}, epochs: map[int64]int16{},
		nextProdID: 1, offsets: map[string]map[TopicPartition]committedOffset{},
	}
	if err := l.fs.MkdirAll(filepath.Join(dir, "topics")); err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	// The directories' own entries, so that topics created later are not
	// lost with a directory entry that never reached the disk.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := l.fs.SyncDir(d); err != nil {
			return nil, fmt.Errorf("open log %s: %w", dir, err)
		}
	}
	lock, err := l.fs.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	l.lock = lock
	if err := l.load(); err != nil {
		l.closeAll()
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	return l, nil
}

func (l *Log) topicsDir() string { return filepath.Join(l.dir, "topics") }

func (l *Log) load() error {
	if err := l.fs.RemoveAll(filepath.Join(l.dir, "trash")); err != nil {
		return err
	}
	names, err := l.fs.ReadDir(l.topicsDir())
	if err != nil {
		return err
	}
	for _, n := range names {
		tdir := filepath.Join(l.topicsDir(), n)
		if strings.HasPrefix(n, "+") {
			// An unfinished CreateTopic.
			if err := l.fs.RemoveAll(tdir); err != nil {
				return err
			}
			continue
		}
		b, err := readFile(l.fs, filepath.Join(tdir, "topic.conf"))
		if err != nil {
			return fmt.Errorf("topic %s: %w", n, err)
		}
		cfg, err := decodeTopicConf(b)
		if err != nil {
			return fmt.Errorf("topic %s: %w", n, err)
		}
		t := &topic{name: n, cfg: cfg, dir: tdir}
		l.topics[n] = t
		for i := int32(0); i < cfg.Partitions; i++ {
			p, err := openPartition(l, n, i, filepath.Join(tdir, strconv.Itoa(int(i))), cfg)
			if err != nil {
				return fmt.Errorf("open partition %s-%d: %w", n, i, err)
			}
			t.parts = append(t.parts, p)
		}
	}
	for _, it := range []struct {
		name string
		cfg  TopicConfig
	}{{OffsetsTopic, internalTopicConfig()}, {ProducersTopic, internalTopicConfig()}} {
		if _, ok := l.topics[it.name]; !ok {
			if err := l.createTopic(it.name, it.cfg); err != nil {
				return err
			}
		}
	}
	if err := l.loadProducerIDs(); err != nil {
		return err
	}
	return l.loadOffsets()
}

func internalTopicConfig() TopicConfig {
	c := DefaultTopicConfig()
	c.Delete, c.Compact = false, true
	c.SegmentBytes = 16 << 20
	return c
}

const topicConfHeader = "sluice-topic 1"

func encodeTopicConf(cfg TopicConfig) []byte {
	m := cfg.Map()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString(topicConfHeader + "\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, m[k])
	}
	return b.Bytes()
}

func decodeTopicConf(b []byte) (TopicConfig, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	if !sc.Scan() || sc.Text() != topicConfHeader {
		return TopicConfig{}, errors.New("topic.conf: unknown format (want first line " + strconv.Quote(topicConfHeader) + ")")
	}
	kv := map[string]string{}
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			return TopicConfig{}, fmt.Errorf("topic.conf: bad line %q", sc.Text())
		}
		kv[k] = v
	}
	return ParseTopicConfig(DefaultTopicConfig(), kv)
}

// ValidTopicName reports why name cannot be a topic name, or nil. The rules
// are Kafka's: 1..249 characters of [a-zA-Z0-9._-], not "." or "..".
func ValidTopicName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 249 {
		return fmt.Errorf("invalid topic name %q: must be 1..249 characters, not \".\" or \"..\"", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("invalid topic name %q: character %q not in [a-zA-Z0-9._-]", name, c)
		}
	}
	return nil
}

// CreateTopic creates a topic. A zero cfg means Options.TopicDefaults.
// It fails with ErrTopicExists if the name is taken.
func (l *Log) CreateTopic(name string, cfg TopicConfig) error {
	if err := ValidTopicName(name); err != nil {
		return err
	}
	if cfg == (TopicConfig{}) {
		cfg = l.opts.TopicDefaults
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if _, ok := l.topics[name]; ok {
		return fmt.Errorf("create topic %s: %w", name, ErrTopicExists)
	}
	return l.createTopic(name, cfg)
}

// createTopic builds the topic's directory, with topic.conf and the
// partition directories, under a temporary name, fsyncs it, and renames it
// into place, so that a crash leaves either no topic or a whole one, and
// never a topic whose partition directories can vanish. Caller holds mu.
func (l *Log) createTopic(name string, cfg TopicConfig) error {
	tmp := filepath.Join(l.topicsDir(), "+"+name)
	final := filepath.Join(l.topicsDir(), name)
	if err := l.fs.RemoveAll(tmp); err != nil {
		return err
	}
	if err := l.fs.MkdirAll(tmp); err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	for i := int32(0); i < cfg.Partitions; i++ {
		if err := l.fs.MkdirAll(filepath.Join(tmp, strconv.Itoa(int(i)))); err != nil {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
	}
	// writeFileAtomic fsyncs tmp, which makes the partition directories'
	// entries durable too.
	if err := writeFileAtomic(l.fs, tmp, filepath.Join(tmp, "topic.conf"), encodeTopicConf(cfg)); err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	if err := l.fs.Rename(tmp, final); err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	if err := l.fs.SyncDir(l.topicsDir()); err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	t := &topic{name: name, cfg: cfg, dir: final}
	for i := int32(0); i < cfg.Partitions; i++ {
		p, err := openPartition(l, name, i, filepath.Join(final, strconv.Itoa(int(i))), cfg)
		if err != nil {
			for _, p := range t.parts {
				p.close()
			}
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		t.parts = append(t.parts, p)
	}
	l.topics[name] = t
	return nil
}

// DeleteTopic deletes a topic and its data. Internal topics cannot be
// deleted.
func (l *Log) DeleteTopic(name string) error {
	if isInternalTopic(name) {
		return fmt.Errorf("delete topic %s: it cannot be deleted: %w", name, ErrInternalTopic)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	t, ok := l.topics[name]
	if !ok {
		return fmt.Errorf("delete topic %s: %w", name, ErrUnknownTopic)
	}
	delete(l.topics, name)
	for _, p := range t.parts {
		p.close()
	}
	trash := filepath.Join(l.dir, "trash")
	if err := l.fs.MkdirAll(trash); err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	gone := filepath.Join(trash, fmt.Sprintf("%s-%d", name, time.Now().UnixNano()))
	if err := l.fs.Rename(t.dir, gone); err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	if err := l.fs.SyncDir(l.topicsDir()); err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	if err := l.fs.RemoveAll(gone); err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	return nil
}

// Topics returns the topic names, sorted, internal ones included.
func (l *Log) Topics() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]string, 0, len(l.topics))
	for n := range l.topics {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Describe returns a topic's configuration and partitions.
func (l *Log) Describe(name string) (TopicInfo, error) {
	l.mu.RLock()
	t, ok := l.topics[name]
	l.mu.RUnlock()
	if !ok {
		return TopicInfo{}, fmt.Errorf("describe topic %s: %w", name, ErrUnknownTopic)
	}
	info := TopicInfo{Name: name, Config: t.cfg}
	for _, p := range t.parts {
		p.mu.Lock()
		pi := PartitionInfo{Partition: p.id, LogStartOffset: p.segs[0].base, HighWatermark: p.hw, Segments: len(p.segs),
			Compactions: p.compactions.Load(), CompactedBytes: p.compactedBytes.Load()}
		for _, s := range p.segs {
			pi.SizeBytes += s.size
		}
		p.mu.Unlock()
		info.Partitions = append(info.Partitions, pi)
	}
	return info, nil
}

func (l *Log) partition(topicName string, part int32) (*partition, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	t, ok := l.topics[topicName]
	if !ok {
		return nil, fmt.Errorf("%s: %w", topicName, ErrUnknownTopic)
	}
	if part < 0 || int(part) >= len(t.parts) {
		return nil, fmt.Errorf("%s-%d (topic has %d): %w", topicName, part, len(t.parts), ErrUnknownPartition)
	}
	return t.parts[part], nil
}

// Append appends recs to a partition as one batch: all of them become
// visible together or none does, with dense offsets. It returns once the
// batch is committed (fsynced under the default policy). With a producer
// id, a retry of a batch already in the log returns the original offsets
// and writes nothing. If ctx ends while waiting for the fsync, the batch
// may or may not be in the log; retry with the same sequence to find out.
// The log's internal topics (OffsetsTopic, ProducersTopic) refuse appends
// with ErrInternalTopic: their records are written by CommitOffsets and
// InitProducer, and read back by every Open.
func (l *Log) Append(ctx context.Context, topicName string, part int32, recs []Record, opts AppendOptions) (AppendResult, error) {
	if isInternalTopic(topicName) {
		return AppendResult{}, fmt.Errorf("append to %s: %w", topicName, ErrInternalTopic)
	}
	return l.appendInternal(ctx, topicName, part, recs, opts)
}

// isInternalTopic reports whether name is one of the log's own topics.
func isInternalTopic(name string) bool { return name == OffsetsTopic || name == ProducersTopic }

// appendInternal is Append without the internal-topic check, for the log's
// own writes to its internal topics.
func (l *Log) appendInternal(ctx context.Context, topicName string, part int32, recs []Record, opts AppendOptions) (AppendResult, error) {
	p, err := l.partition(topicName, part)
	if err != nil {
		return AppendResult{}, fmt.Errorf("append: %w", err)
	}
	return p.appendBatch(ctx, recs, opts)
}

// Fetch returns committed records of a partition from offset on, at most
// about opts.MaxBytes of batches. At the high watermark it waits up to
// opts.MaxWait for a commit. An offset outside [log start, high watermark]
// fails with an *OffsetOutOfRangeError.
func (l *Log) Fetch(ctx context.Context, topicName string, part int32, offset int64, opts FetchOptions) (FetchResult, error) {
	var res FetchResult
	err := l.FetchInto(ctx, topicName, part, offset, opts, &res)
	return res, err
}

// FetchInto is Fetch into res, reusing its record slice and read buffer
// (so that a reader in a loop allocates nothing per fetch). The records of
// the previous FetchInto into res become invalid.
func (l *Log) FetchInto(ctx context.Context, topicName string, part int32, offset int64, opts FetchOptions, res *FetchResult) error {
	p, err := l.partition(topicName, part)
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	return p.fetch(ctx, offset, opts, res)
}

// OffsetForTime returns the offset of the first committed record whose
// timestamp is at or after ts, or the high watermark if there is none.
func (l *Log) OffsetForTime(topicName string, part int32, ts time.Time) (int64, error) {
	p, err := l.partition(topicName, part)
	if err != nil {
		return 0, fmt.Errorf("offset for time: %w", err)
	}
	return p.offsetForTime(ts.UnixMilli())
}

// EarliestOffset returns the partition's log start offset.
func (l *Log) EarliestOffset(topicName string, part int32) (int64, error) {
	p, err := l.partition(topicName, part)
	if err != nil {
		return 0, fmt.Errorf("earliest offset: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.segs[0].base, nil
}

// LatestOffset returns the partition's high watermark: the offset the next
// committed record will have.
func (l *Log) LatestOffset(topicName string, part int32) (int64, error) {
	p, err := l.partition(topicName, part)
	if err != nil {
		return 0, fmt.Errorf("latest offset: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hw, nil
}

// ProducerState returns what a partition knows of a producer: its epoch,
// last sequence and offset, and the source position stored with its last
// batch. The state is rebuilt from the log on open.
func (l *Log) ProducerState(topicName string, part int32, producerID int64) (ProducerState, bool) {
	p, err := l.partition(topicName, part)
	if err != nil {
		return ProducerState{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.producers[producerID]
	if !ok || e.n == 0 {
		return ProducerState{}, false
	}
	m := e.last()
	return ProducerState{
		Epoch: e.epoch, LastSequence: m.lastSeq, LastOffset: m.lastOffset,
		LastTimestamp:  msTime(e.lastTS),
		SourcePosition: append([]byte(nil), e.sourcePos...),
	}, true
}

// Run does the background work (retention, compaction) every
// Options.MaintenanceInterval until ctx ends, then returns nil. It starts
// no goroutines of its own.
func (l *Log) Run(ctx context.Context) error {
	t := time.NewTicker(l.opts.MaintenanceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := l.EnforceRetention(ctx); err != nil && ctx.Err() == nil {
			l.logger.Error("retention failed", "err", err)
		}
		if err := l.Compact(ctx); err != nil && ctx.Err() == nil {
			l.logger.Error("compaction failed", "err", err)
		}
	}
}

// Close syncs and closes every partition. Appends and fetches in flight
// return ErrClosed. Close does not wait for Run; cancel its context.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	return l.closeAll()
}

func (l *Log) closeAll() error {
	var errs []error
	for _, t := range l.topics {
		for _, p := range t.parts {
			if err := p.close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if l.lock != nil {
		if err := l.lock.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// close makes what was written durable, writes a producer snapshot for a
// fast reopen and closes the files.
func (p *partition) close() error {
	// Stop a compaction in flight and wait for it (and retention), so that
	// nothing touches the files once Close returns and the lock is gone.
	p.closing.Store(true)
	p.maintMu.Lock()
	defer p.maintMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	var err error
	if p.failed == nil {
		act := p.active()
		if err = act.f.Sync(); err == nil {
			p.durable = p.written
			if !p.replicated {
				p.advanceHW(p.next, act.base, act.size)
			}
			err = writeSnapshot(p.fs, p.dir, p.next, p.producers)
		}
		if err == nil {
			err = p.writeCleanMarker()
		}
		if err != nil {
			err = fmt.Errorf("close %s: %w", p.name(), err)
		}
	}
	p.closed = true
	close(p.hwCh)
	p.hwCh = make(chan struct{})
	p.filesMu.Lock()
	p.closeFiles()
	p.filesMu.Unlock()
	p.stateMu.Lock()
	if p.rstate != nil {
		p.rstate.close()
	}
	p.stateMu.Unlock()
	return err
}
