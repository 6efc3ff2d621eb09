package raft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/sluice-cdc/sluice/wal"
)

// Log is one node of a replicated log: a wal.Log whose partitions are
// Raft groups over the cluster's nodes. Its methods mirror *wal.Log's and
// may be called on any node: a node that does not lead a partition
// forwards the call to the leader. Methods are safe for concurrent use.
type Log struct {
	cfg    Config
	wal    *wal.Log
	self   uint64
	nodes  []uint64 // sorted
	tr     *transport
	logger *slog.Logger
	now    func() time.Time

	meta  *metaState
	prods *producerIDs
	offs  *groupOffsets

	initMu   sync.Mutex // InitProducer at the producers leader
	createMu sync.Mutex // CreateTopic at the meta leader

	mu       sync.RWMutex
	groups   map[groupKey]*group
	runCtx   context.Context
	runWG    *sync.WaitGroup
	runErr   func(error)
	snapRecv map[groupKey]bool
}

// Open opens the node's log in cfg.Dir and the Raft group of every
// partition it replicates, rebuilding the cluster state (topics, producer
// ids, consumer offsets) from the committed internal topics. It starts no
// goroutine: call Run.
func Open(cfg Config) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open replicated log: %w", err)
	}
	cfg.setDefaults()
	wl, err := wal.Open(cfg.Dir, cfg.WAL)
	if err != nil {
		return nil, err
	}
	l := &Log{
		cfg: cfg, wal: wl, self: cfg.NodeID, nodes: cfg.nodeIDs(), logger: cfg.Logger.With("node", cfg.NodeID),
		now: time.Now, meta: newMetaState(), prods: newProducerIDs(), offs: newGroupOffsets(),
		groups: map[groupKey]*group{}, snapRecv: map[groupKey]bool{},
	}
	if l.cfg.WAL.Clock != nil {
		l.now = l.cfg.WAL.Clock
	}
	l.tr = newTransport(&l.cfg, l)
	if err := l.load(); err != nil {
		wl.Close()
		return nil, fmt.Errorf("open replicated log %s: %w", cfg.Dir, err)
	}
	return l, nil
}

func (l *Log) load() error {
	if err := l.wal.CreateTopic(MetaTopic, internalConfig()); err != nil && !errors.Is(err, wal.ErrTopicExists) {
		return err
	}
	appliers := map[string]func([]wal.Record) error{
		MetaTopic: l.meta.apply, wal.ProducersTopic: l.prods.apply, wal.OffsetsTopic: l.offs.apply,
	}
	// Producers and offsets first: applying the meta state opens groups.
	for _, name := range []string{wal.ProducersTopic, wal.OffsetsTopic, MetaTopic} {
		g, err := l.openGroup(groupKey{name, 0}, l.nodes)
		if err != nil {
			return err
		}
		g.apply = appliers[name]
		g.replay = func() error { return l.replay(g) }
		if err := l.replay(g); err != nil {
			return fmt.Errorf("rebuild %s: %w", name, err)
		}
	}
	l.meta.created = l.topicCreated
	for _, name := range l.meta.names() {
		tm, _ := l.meta.get(name)
		if err := l.topicCreated(tm); err != nil {
			return err
		}
	}
	return nil
}

// replay applies the committed records of an internal partition.
func (l *Log) replay(g *group) error {
	off, err := l.wal.EarliestOffset(g.key.topic, g.key.part)
	if err != nil {
		return err
	}
	for {
		res, err := l.wal.Fetch(context.Background(), g.key.topic, g.key.part, off, wal.FetchOptions{MaxBytes: 4 << 20})
		if err != nil {
			return err
		}
		if err := g.apply(res.Records); err != nil {
			return err
		}
		if res.NextOffset >= res.HighWatermark || res.NextOffset <= off {
			return nil
		}
		off = res.NextOffset
	}
}

// topicCreated opens the local replicas of a topic the cluster created.
// It runs at open and from the meta group's applier.
func (l *Log) topicCreated(tm *topicMeta) error {
	var mine []int32
	for p, r := range tm.replicas {
		for _, id := range r {
			if id == l.self {
				mine = append(mine, int32(p))
			}
		}
	}
	if len(mine) == 0 {
		return nil
	}
	if err := l.wal.CreateTopic(tm.name, tm.cfg); err != nil && !errors.Is(err, wal.ErrTopicExists) {
		return fmt.Errorf("create local topic %s: %w", tm.name, err)
	}
	for _, p := range mine {
		key := groupKey{tm.name, p}
		if l.group(key) != nil {
			continue
		}
		g, err := l.openGroup(key, tm.replicas[p])
		if err != nil {
			return err
		}
		l.start(g)
	}
	return nil
}

// openGroup opens the replica log of a local partition and its group.
func (l *Log) openGroup(key groupKey, voters []uint64) (*group, error) {
	rl, err := l.wal.OpenReplica(key.topic, key.part)
	if err != nil {
		return nil, err
	}
	g, err := newGroup(key, l.self, voters, &l.cfg, rl, l.tr, l.logger)
	if err != nil {
		return nil, err
	}
	g.now = l.now
	g.fence = l.prods.fenced
	l.mu.Lock()
	l.groups[key] = g
	l.mu.Unlock()
	return g, nil
}

// start runs a group's loop if Run is running; Run starts the others.
func (l *Log) start(g *group) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runCtx == nil {
		return
	}
	l.goLocked(g.runLogged)
}

// goLocked runs f under Run's wait group. Caller holds mu and Run runs.
func (l *Log) goLocked(f func(ctx context.Context) error) {
	l.runWG.Add(1)
	ctx, report := l.runCtx, l.runErr
	go func() {
		defer l.runWG.Done()
		if err := f(ctx); err != nil && ctx.Err() == nil {
			report(err)
		}
	}()
}

func (l *Log) group(key groupKey) *group {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.groups[key]
}

// Run drives the node until ctx ends: the transport (listener and
// connections), every Raft group, the clock and the log's retention and
// compaction. It returns once everything it started has stopped; an error
// only if the node could not run (its address taken). A replica that
// fails stops alone (see ErrGroupFailed) and is logged.
func (l *Log) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	l.mu.Lock()
	if l.runCtx != nil {
		l.mu.Unlock()
		return errors.New("replicated log: Run called twice")
	}
	l.runCtx, l.runWG = ctx, &wg
	l.runErr = func(err error) { l.logger.Error("replica stopped", "err", err) }
	l.goLocked(func(ctx context.Context) error {
		if err := l.tr.run(ctx); err != nil {
			errMu.Lock()
			firstErr = err
			errMu.Unlock()
			cancel()
		}
		return nil
	})
	l.goLocked(func(ctx context.Context) error { return l.wal.Run(ctx) })
	l.goLocked(l.ticker)
	for _, g := range l.groups {
		l.goLocked(g.runLogged)
	}
	l.mu.Unlock()
	<-ctx.Done()
	wg.Wait()
	errMu.Lock()
	defer errMu.Unlock()
	return firstErr
}

func (l *Log) ticker(ctx context.Context) error {
	t := time.NewTicker(l.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		l.mu.RLock()
		for _, g := range l.groups {
			select {
			case g.tickc <- struct{}{}:
			default:
			}
		}
		l.mu.RUnlock()
	}
}

// Close closes the node's log. Cancel Run's context and wait for Run to
// return first.
func (l *Log) Close() error { return l.wal.Close() }

// NodeID returns this node's id.
func (l *Log) NodeID() uint64 { return l.self }

// WAL returns the node's local log, for reading what this replica holds.
// Writing to a replicated partition through it fails with
// wal.ErrReplicated.
func (l *Log) WAL() *wal.Log { return l.wal }

// withTimeout bounds ctx by the request timeout if it has no deadline.
func (l *Log) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, l.cfg.RequestTimeout)
}

// topic returns the cluster's knowledge of a topic.
func (l *Log) topic(name string) (*topicMeta, error) {
	if isInternal(name) {
		r := make([][]uint64, 1)
		r[0] = l.nodes
		return &topicMeta{name: name, cfg: internalConfig(), rf: len(l.nodes), replicas: r}, nil
	}
	tm, _ := l.meta.get(name)
	if tm == nil {
		return nil, fmt.Errorf("%s: %w", name, wal.ErrUnknownTopic)
	}
	return tm, nil
}

// topicCtx is topic, asking the leader of the cluster's meta partition
// when this node does not know the topic (yet): every node learns a new
// topic when it applies its record, which may trail its creation.
func (l *Log) topicCtx(ctx context.Context, name string) (*topicMeta, error) {
	tm, err := l.topic(name)
	if err == nil {
		return tm, nil
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	err = l.route(ctx, groupKey{MetaTopic, 0}, l.nodes, func(ctx context.Context, g *group) error {
		tm, err = l.topic(name)
		return err
	}, func(ctx context.Context, node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(name)
		body, err := l.query(ctx, node, opTopicMeta, e.b)
		if err != nil {
			return err
		}
		d := dec{b: body}
		key, value := d.bytes(), d.bytes()
		if d.err != nil {
			return d.err
		}
		tm, err = decodeTopicMeta(wal.Record{Key: key, Value: value})
		return err
	})
	if err != nil {
		return nil, err
	}
	return tm, nil
}

func (l *Log) partition(ctx context.Context, name string, part int32) (*topicMeta, error) {
	tm, err := l.topicCtx(ctx, name)
	if err != nil {
		return nil, err
	}
	if part < 0 || int(part) >= len(tm.replicas) {
		return nil, fmt.Errorf("%s-%d (topic has %d): %w", name, part, len(tm.replicas), wal.ErrUnknownPartition)
	}
	return tm, nil
}

// query is a call that only reads: its answer, lost with its connection,
// is asked for again (route retries an unreachable node's call).
func (l *Log) query(ctx context.Context, node uint64, op uint8, body []byte) ([]byte, error) {
	b, err := l.tr.call(ctx, node, op, body)
	if errors.Is(err, errConnLost) && ctx.Err() == nil {
		return nil, fmt.Errorf("%w: %w", err, errUnreachable)
	}
	return b, err
}

// route runs a call at the partition's leader: here (local) if this node
// leads it, else at the node believed to lead it (remote), following
// NotLeaderError hints and trying the replicas in turn while no leader is
// known, until ctx ends. Errors other than "not here" end it.
func (l *Log) route(ctx context.Context, key groupKey, replicas []uint64, local func(ctx context.Context, g *group) error, remote func(ctx context.Context, node uint64) error) error {
	var hint uint64
	var lastErr error
	backoff := 5 * time.Millisecond
	next := rand.IntN(len(replicas))
	selfFailed := false // this node's replica stopped: ask the others
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if lastErr == nil {
				lastErr = &NotLeaderError{Topic: key.topic, Partition: key.part}
			}
			return fmt.Errorf("%s: %v: %w", key, err, lastErr)
		}
		target := hint
		if target == 0 {
			if g := l.group(key); g != nil && !selfFailed {
				g.mu.Lock()
				target = g.status.Leader
				g.mu.Unlock()
				if target == 0 {
					target = l.self
				}
			} else {
				target = replicas[next%len(replicas)]
				next++
				if target == l.self && selfFailed && len(replicas) > 1 {
					target = replicas[next%len(replicas)]
					next++
				}
			}
		}
		var err error
		if target == l.self {
			if g := l.group(key); g != nil {
				// Wait a little for an election here, then look again.
				sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				err = g.serving(sctx)
				cancel()
				if err == nil {
					err = local(ctx, g)
				}
			} else {
				err = fmt.Errorf("%s: %w", key, ErrNotReplica)
			}
		} else {
			err = remote(ctx, target)
		}
		if err == nil {
			return nil
		}
		lastErr = err
		var nl *NotLeaderError
		switch {
		case errors.Is(err, ErrOutcomeUnknown):
			return err // a retry could write it twice: the caller decides
		case errors.As(err, &nl):
			if nl.Leader != 0 && nl.Leader != hint {
				hint = nl.Leader
				continue // a fresh hint: follow it at once
			}
			hint = 0
		case errors.Is(err, errUnreachable), errors.Is(err, ErrNotReplica), errors.Is(err, ErrLost),
			errors.Is(err, wal.ErrClosed) && target != l.self:
			hint = 0
		case errors.Is(err, ErrGroupFailed) && target == l.self && len(replicas) > 1:
			hint, selfFailed = 0, true
		default:
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// AppendInfo says which leader accepted an append.
type AppendInfo struct {
	Node uint64 // the leader
	Term uint64 // its term
}

// Append stores recs as one batch in a partition, at its leader, and
// returns once the batch is committed: written and fsynced on a majority
// of the partition's replicas. A producer's retried batch (same id, epoch
// and sequence) returns its original offsets, across leader changes: the
// producer state is part of the replicated log. With a producer id, an
// append whose outcome became unknown (the leader failed over meanwhile)
// is retried with the same sequence until ctx ends; without one, it
// returns ErrOutcomeUnknown, since a retry could duplicate it.
func (l *Log) Append(ctx context.Context, topic string, part int32, recs []wal.Record, opts wal.AppendOptions) (wal.AppendResult, error) {
	res, _, err := l.AppendInfo(ctx, topic, part, recs, opts)
	return res, err
}

// AppendInfo is Append that also says which leader, in which term,
// accepted the batch.
func (l *Log) AppendInfo(ctx context.Context, topic string, part int32, recs []wal.Record, opts wal.AppendOptions) (wal.AppendResult, AppendInfo, error) {
	tm, err := l.partition(ctx, topic, part)
	if err != nil {
		return wal.AppendResult{}, AppendInfo{}, fmt.Errorf("append: %w", err)
	}
	if tm.cfg.Compact {
		for i := range recs {
			if recs[i].Key == nil {
				return wal.AppendResult{}, AppendInfo{}, fmt.Errorf("append to %s-%d: record %d has a null key on a compacted topic: %w", topic, part, i, wal.ErrInvalidRecord)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return wal.AppendResult{}, AppendInfo{}, fmt.Errorf("append to %s-%d: %w", topic, part, err)
	}
	b, err := wal.PrepareCompressedBatch(recs, opts, tm.cfg.Compression, l.now())
	if err != nil {
		return wal.AppendResult{}, AppendInfo{}, fmt.Errorf("append to %s-%d: %w", topic, part, err)
	}
	if b.Size() > int(tm.cfg.MaxMessageBytes) {
		return wal.AppendResult{}, AppendInfo{}, fmt.Errorf("append to %s-%d: %d bytes > %d: %w", topic, part, b.Size(), tm.cfg.MaxMessageBytes, wal.ErrRecordTooLarge)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	key := groupKey{topic, part}
	// Placement is reported for an idempotent producer's batch only: its
	// sequence keeps a later batch from landing before it when it is lost
	// and retried, which nothing does for other appends.
	var written func()
	if opts.Written != nil && opts.ProducerID > 0 {
		written = sync.OnceFunc(opts.Written)
	}
	for {
		res, info, err := l.appendBatch(ctx, key, tm.replicas[part], b, written)
		if err != nil && opts.ProducerID > 0 && errors.Is(err, ErrOutcomeUnknown) && ctx.Err() == nil {
			// Idempotent: the retry finds the batch if it is in the log.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		return res, info, err
	}
}

func (l *Log) appendBatch(ctx context.Context, key groupKey, replicas []uint64, b *wal.PreparedBatch, written func()) (wal.AppendResult, AppendInfo, error) {
	var res wal.AppendResult
	var info AppendInfo
	err := l.route(ctx, key, replicas, func(ctx context.Context, g *group) error {
		r, err := g.submit(ctx, &proposal{ctx: ctx, batch: b, at: l.now(), res: make(chan proposalResult, 1), written: written})
		if err == nil {
			res, info = r.res, AppendInfo{Node: l.self, Term: r.term}
		}
		return err
	}, func(ctx context.Context, node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(key.topic)
		e.u32(uint32(key.part))
		e.bytes(b.Bytes())
		body, err := l.tr.call(ctx, node, opAppend, e.b)
		if errors.Is(err, errConnLost) {
			return fmt.Errorf("append to %s at node %d: %w: %w", key, node, err, ErrOutcomeUnknown)
		}
		if err != nil {
			return err
		}
		d := dec{b: body}
		info = AppendInfo{Term: d.u64(), Node: d.u64()}
		res = wal.AppendResult{BaseOffset: d.i64(), LastOffset: d.i64(), Duplicate: d.bool(), LogAppendTime: time.UnixMilli(d.i64())}
		return d.err
	})
	return res, info, err
}

// Fetch returns committed records of a partition from offset on, read at
// its leader; see wal.Log.Fetch.
func (l *Log) Fetch(ctx context.Context, topic string, part int32, offset int64, opts wal.FetchOptions) (wal.FetchResult, error) {
	tm, err := l.partition(ctx, topic, part)
	if err != nil {
		return wal.FetchResult{}, fmt.Errorf("fetch: %w", err)
	}
	var res wal.FetchResult
	ctx, cancel := context.WithTimeout(ctx, max(l.cfg.RequestTimeout, opts.MaxWait+l.cfg.RequestTimeout))
	defer cancel()
	key := groupKey{topic, part}
	err = l.route(ctx, key, tm.replicas[part], func(ctx context.Context, g *group) error {
		var err error
		res, err = l.wal.Fetch(ctx, topic, part, offset, opts)
		return err
	}, func(ctx context.Context, node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(topic)
		e.u32(uint32(part))
		e.i64(offset)
		e.u32(uint32(opts.MaxBytes))
		e.u32(uint32(opts.MaxWait.Milliseconds()))
		body, err := l.query(ctx, node, opFetch, e.b)
		if err != nil {
			return err
		}
		res, err = decodeFetch(body)
		return err
	})
	return res, err
}

func encodeFetch(e *enc, res *wal.FetchResult) {
	e.i64(res.NextOffset)
	e.i64(res.HighWatermark)
	e.i64(res.LogStartOffset)
	encodeRecords(e, res.Records)
}

func decodeFetch(body []byte) (wal.FetchResult, error) {
	d := dec{b: body}
	res := wal.FetchResult{NextOffset: d.i64(), HighWatermark: d.i64(), LogStartOffset: d.i64()}
	res.Records = decodeRecords(&d)
	return res, d.err
}

// offsets returns a partition's log start and high watermark at its
// leader, which has committed an entry of its term: its high watermark is
// the whole committed log.
func (l *Log) offsets(ctx context.Context, topic string, part int32) (int64, int64, error) {
	tm, err := l.partition(ctx, topic, part)
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	var start, hw int64
	err = l.route(ctx, groupKey{topic, part}, tm.replicas[part], func(ctx context.Context, g *group) error {
		var err error
		if start, err = l.wal.EarliestOffset(topic, part); err != nil {
			return err
		}
		hw, err = l.wal.LatestOffset(topic, part)
		return err
	}, func(ctx context.Context, node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(topic)
		e.u32(uint32(part))
		body, err := l.query(ctx, node, opOffsets, e.b)
		if err != nil {
			return err
		}
		d := dec{b: body}
		start, hw = d.i64(), d.i64()
		return d.err
	})
	return start, hw, err
}

// EarliestOffset returns a partition's log start offset at its leader.
func (l *Log) EarliestOffset(topic string, part int32) (int64, error) {
	start, _, err := l.offsets(context.Background(), topic, part)
	if err != nil {
		return 0, fmt.Errorf("earliest offset: %w", err)
	}
	return start, nil
}

// OffsetsContext returns a partition's log start and high watermark at
// its leader, as EarliestOffset and LatestOffset do, waiting for a leader
// until ctx ends (at most Config.RequestTimeout).
func (l *Log) OffsetsContext(ctx context.Context, topic string, part int32) (start, hw int64, err error) {
	start, hw, err = l.offsets(ctx, topic, part)
	if err != nil {
		return 0, 0, fmt.Errorf("offsets: %w", err)
	}
	return start, hw, nil
}

// LatestOffset returns a partition's high watermark at its leader, once
// that leader committed an entry of its own term.
func (l *Log) LatestOffset(topic string, part int32) (int64, error) {
	_, hw, err := l.offsets(context.Background(), topic, part)
	if err != nil {
		return 0, fmt.Errorf("latest offset: %w", err)
	}
	return hw, nil
}

// ProducerState returns what a partition's leader knows of a producer,
// once every entry in the leader's log when the call arrived is
// committed, so that the state (and its source position) is committed.
// Without a context of its own it waits up to Config.RequestTimeout; if no
// leader answers by then, it logs an error and returns ok false: use
// ProducerStateContext to tell that apart from "never appended".
func (l *Log) ProducerState(topic string, part int32, producerID int64) (wal.ProducerState, bool) {
	st, ok, err := l.ProducerStateContext(context.Background(), topic, part, producerID)
	if err != nil {
		l.logger.Error("producer state unavailable", "topic", topic, "partition", part, "err", err)
		return wal.ProducerState{}, false
	}
	return st, ok
}

// ProducerStateContext is ProducerState with a context and an error.
func (l *Log) ProducerStateContext(ctx context.Context, topic string, part int32, producerID int64) (wal.ProducerState, bool, error) {
	tm, err := l.partition(ctx, topic, part)
	if err != nil {
		return wal.ProducerState{}, false, fmt.Errorf("producer state: %w", err)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	var st wal.ProducerState
	var ok bool
	err = l.route(ctx, groupKey{topic, part}, tm.replicas[part], func(ctx context.Context, g *group) error {
		var err error
		st, ok, err = l.committedProducerState(ctx, g, producerID)
		return err
	}, func(ctx context.Context, node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(topic)
		e.u32(uint32(part))
		e.i64(producerID)
		body, err := l.query(ctx, node, opProducerState, e.b)
		if err != nil {
			return err
		}
		d := dec{b: body}
		ok = d.bool()
		st = wal.ProducerState{Epoch: int16(d.u16()), LastSequence: int32(d.u32()), LastOffset: d.i64(),
			LastTimestamp: time.UnixMilli(d.i64()), SourcePosition: d.bytes()}
		return d.err
	})
	return st, ok, err
}

// committedProducerState waits until the leader's log as it is now is
// committed, then reads the producer's state.
func (l *Log) committedProducerState(ctx context.Context, g *group, producerID int64) (wal.ProducerState, bool, error) {
	g.mu.Lock()
	last := g.status.LastIndex
	g.mu.Unlock()
	for g.rl.CommitIndex() < last {
		if err := g.serving(ctx); err != nil {
			return wal.ProducerState{}, false, err
		}
		select {
		case <-ctx.Done():
			return wal.ProducerState{}, false, &NotLeaderError{Topic: g.key.topic, Partition: g.key.part}
		case <-time.After(2 * time.Millisecond):
		}
	}
	st, ok := l.wal.ProducerState(g.key.topic, g.key.part, producerID)
	return st, ok, nil
}

// InitProducer allocates a producer id and epoch at the leader of the
// producers topic, durably (committed on a majority); see
// wal.Log.InitProducer.
func (l *Log) InitProducer(ctx context.Context, transactionalID string) (int64, int16, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	var id int64
	var epoch int16
	key := groupKey{wal.ProducersTopic, 0}
	err := l.route(ctx, key, l.nodes, func(ctx context.Context, g *group) error {
		var err error
		id, epoch, err = l.initProducerLocal(ctx, g, transactionalID)
		return err
	}, func(ctx context.Context, node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(transactionalID)
		body, err := l.tr.call(ctx, node, opInitProducer, e.b)
		if err != nil {
			return err
		}
		d := dec{b: body}
		id, epoch = d.i64(), int16(d.u16())
		return d.err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("init producer: %w", err)
	}
	return id, epoch, nil
}

func (l *Log) initProducerLocal(ctx context.Context, g *group, txn string) (int64, int16, error) {
	l.initMu.Lock()
	defer l.initMu.Unlock()
	id, epoch, err := l.prods.allocate(txn)
	if err != nil {
		return 0, 0, err
	}
	b, err := wal.PrepareBatch([]wal.Record{wal.ProducerIDRecord(txn, id, epoch)}, wal.AppendOptions{}, l.now())
	if err != nil {
		return 0, 0, err
	}
	if _, err := g.submit(ctx, &proposal{ctx: ctx, batch: b, at: l.now(), res: make(chan proposalResult, 1)}); err != nil {
		return 0, 0, err
	}
	return id, epoch, nil
}

// CommitOffsets durably stores a consumer group's offsets, in one append
// at the leader of the offsets topic.
func (l *Log) CommitOffsets(ctx context.Context, group string, offsets map[wal.TopicPartition]int64) error {
	if group == "" || len(group) > 65535 {
		return errors.New("commit offsets: group must be 1..65535 bytes")
	}
	if len(offsets) == 0 {
		return nil
	}
	tps := make([]wal.TopicPartition, 0, len(offsets))
	for tp := range offsets {
		if len(tp.Topic) > 65535 {
			return errors.New("commit offsets: topic name too long")
		}
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
	now := l.now()
	recs := make([]wal.Record, len(tps))
	for i, tp := range tps {
		recs[i] = wal.OffsetCommitRecord(group, tp, offsets[tp], now)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	b, err := wal.PrepareBatch(recs, wal.AppendOptions{}, now)
	if err != nil {
		return fmt.Errorf("commit offsets of group %s: %w", group, err)
	}
	if _, _, err := l.appendBatch(ctx, groupKey{wal.OffsetsTopic, 0}, l.nodes, b, nil); err != nil {
		return fmt.Errorf("commit offsets of group %s: %w", group, err)
	}
	return nil
}

// FetchOffsets returns a consumer group's committed offsets, as the
// leader of the offsets topic has applied them.
func (l *Log) FetchOffsets(grp string) (map[wal.TopicPartition]int64, error) {
	ctx, cancel := l.withTimeout(context.Background())
	defer cancel()
	var out map[wal.TopicPartition]int64
	err := l.route(ctx, groupKey{wal.OffsetsTopic, 0}, l.nodes, func(ctx context.Context, g *group) error {
		out = l.offs.get(grp)
		return nil
	}, func(ctx context.Context, node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(grp)
		body, err := l.query(ctx, node, opFetchOffsets, e.b)
		if err != nil {
			return err
		}
		d := dec{b: body}
		n := d.u32()
		out = make(map[wal.TopicPartition]int64, min(n, 1<<16))
		for i := uint32(0); i < n && d.err == nil; i++ {
			tp := wal.TopicPartition{Topic: d.str(), Partition: int32(d.u32())}
			out[tp] = d.i64()
		}
		return d.err
	})
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", grp, err)
	}
	return out, nil
}

// CreateTopic creates a topic with the cluster's default replication
// factor; see CreateTopicReplicas.
func (l *Log) CreateTopic(name string, cfg wal.TopicConfig) error {
	ctx, cancel := l.withTimeout(context.Background())
	defer cancel()
	return l.CreateTopicReplicas(ctx, name, cfg, l.cfg.ReplicationFactor)
}

// CreateTopicReplicas creates a topic whose partitions each have rf
// replicas (1 or 3), through the cluster's meta partition, and returns
// once this node knows the topic. wal.ErrTopicExists if the name is taken.
func (l *Log) CreateTopicReplicas(ctx context.Context, name string, cfg wal.TopicConfig, rf int) error {
	if err := wal.ValidTopicName(name); err != nil {
		return err
	}
	if isInternal(name) {
		return fmt.Errorf("create topic %s: %w", name, wal.ErrTopicExists)
	}
	if cfg == (wal.TopicConfig{}) {
		cfg = l.cfg.WAL.TopicDefaults
		if cfg == (wal.TopicConfig{}) {
			cfg = wal.DefaultTopicConfig()
		}
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	if rf != 1 && rf != 3 || rf > len(l.nodes) {
		return fmt.Errorf("create topic %s: replication factor must be 1 or 3 and at most the %d nodes (got %d)", name, len(l.nodes), rf)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	err := l.route(ctx, groupKey{MetaTopic, 0}, l.nodes, func(ctx context.Context, g *group) error {
		return l.createTopicLocal(ctx, g, name, cfg, rf)
	}, func(ctx context.Context, node uint64) error {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(name)
		e.u8(uint8(rf))
		m := cfg.Map()
		e.u16(uint16(len(m)))
		for k, v := range m {
			e.str(k)
			e.str(v)
		}
		_, err := l.tr.call(ctx, node, opCreateTopic, e.b)
		return err
	})
	if err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	// Wait until this node applied it, so that the caller can use it here.
	for {
		tm, ch := l.meta.get(name)
		if tm != nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("create topic %s: created, but not yet known here: %w", name, ctx.Err())
		}
	}
}

func (l *Log) createTopicLocal(ctx context.Context, g *group, name string, cfg wal.TopicConfig, rf int) error {
	l.createMu.Lock()
	defer l.createMu.Unlock()
	if tm, _ := l.meta.get(name); tm != nil {
		return fmt.Errorf("create topic %s: %w", name, wal.ErrTopicExists)
	}
	tm := &topicMeta{name: name, cfg: cfg, rf: rf, replicas: assign(name, cfg.Partitions, rf, l.nodes)}
	b, err := wal.PrepareBatch([]wal.Record{encodeTopicMeta(tm)}, wal.AppendOptions{}, l.now())
	if err != nil {
		return err
	}
	_, err = g.submit(ctx, &proposal{ctx: ctx, batch: b, at: l.now(), res: make(chan proposalResult, 1)})
	return err
}

// Topics returns the topic names, sorted, internal ones included.
func (l *Log) Topics() []string {
	out := append(l.meta.names(), internalTopics...)
	sort.Strings(out)
	return out
}

// Describe returns a topic's configuration and partitions. The offsets
// and sizes of a partition are this node's if it replicates it (a
// follower's high watermark may trail the leader's), else a replica's.
func (l *Log) Describe(name string) (wal.TopicInfo, error) {
	tm, err := l.topicCtx(context.Background(), name)
	if err != nil {
		return wal.TopicInfo{}, fmt.Errorf("describe topic %s: %w", name, err)
	}
	info, err := l.wal.Describe(name)
	if err == nil {
		return info, nil
	}
	ctx, cancel := l.withTimeout(context.Background())
	defer cancel()
	var lastErr error
	for _, node := range tm.replicas[0] {
		e := enc{}
		putTimeout(&e, ctx)
		e.str(name)
		body, err := l.tr.call(ctx, node, opDescribe, e.b)
		if err != nil {
			lastErr = err
			continue
		}
		info = wal.TopicInfo{Name: name, Config: tm.cfg}
		d := dec{b: body}
		n := d.u32()
		for i := uint32(0); i < n && d.err == nil; i++ {
			info.Partitions = append(info.Partitions, wal.PartitionInfo{Partition: int32(i), LogStartOffset: d.i64(),
				HighWatermark: d.i64(), SizeBytes: d.i64(), Segments: int(d.u32())})
		}
		if d.err == nil {
			return info, nil
		}
		lastErr = d.err
	}
	// No replica answered: the partitions without their offsets.
	info = wal.TopicInfo{Name: name, Config: tm.cfg}
	for p := range tm.replicas {
		info.Partitions = append(info.Partitions, wal.PartitionInfo{Partition: int32(p)})
	}
	l.logger.Warn("describe: no replica answered", "topic", name, "err", lastErr)
	return info, nil
}

// raftMessage implements handler.
func (l *Log) raftMessage(from uint64, key groupKey, m *pb.Message) {
	g := l.group(key)
	if g == nil {
		return // not created here yet: Raft resends
	}
	if m.GetType() == pb.MsgSnap {
		l.receiveSnapshot(g, m)
		return
	}
	select {
	case g.inbox <- m:
	default:
		l.tr.dropped.Add(1)
	}
}
