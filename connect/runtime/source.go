package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// The source task (DESIGN.md §3.1: exactly once into the log).
//
//	reader:    Read, the next batch while the router works on the last one
//	router:    transforms → route (topic, partition) → drop replayed records → encode
//	appender:  one Append per partition of the batch, concurrently; each carries the encoded
//	           Position of its last record; batches strictly in order
//	committer: append the end Position of the newest fully appended batch to
//	           __sluice_source_offsets (key: connector), at most every
//	           offset.flush.interval.ms, then Ack it
//
// The four run as goroutines linked by bounded channels, so at most two batches as the source
// returned them (one being routed, one waiting to be) and three encoded ones are in memory. On
// start the task opens the source after the committed position. A record the source replays
// is dropped when its Order is not above the Order stored with this connector's last append to
// the record's partition (the log's producer state), so a crash anywhere, even between the
// appends of one batch, leaves every record in the log once.

// sourceBatch is one source batch routed into per-partition appends. Batches are recycled.
type sourceBatch struct {
	parts   []*partBatch
	index   map[TopicPartition]*partBatch
	pos     connect.Position
	records int
	arena   arena
	headers []LogHeader
	spare   []*partBatch
	last    *partBatch // the partition part returned last
	// release is the source batch's Release when it is kept for after the append: its RawJSON
	// keys and values (borrowed) are appended from its memory (arena.encodeKey)
	release  func()
	borrowed bool
}

type partBatch struct {
	tp   TopicPartition
	recs []LogRecord
	last connect.Position // of the last record with an Order
	spos []byte
}

func (b *sourceBatch) reset() {
	for _, p := range b.parts {
		p.recs = p.recs[:0]
		p.last = connect.Position{}
		p.spos = nil
		b.spare = append(b.spare, p)
	}
	b.parts = b.parts[:0]
	b.last = nil
	b.borrowed = false
	clear(b.index)
	b.pos = connect.Position{}
	b.records = 0
	b.arena.reset()
	b.headers = b.headers[:0]
}

func (b *sourceBatch) part(tp TopicPartition) *partBatch {
	if p := b.last; p != nil && p.tp == tp {
		return p // a run of records of one partition: no map lookup
	}
	if p := b.index[tp]; p != nil {
		b.last = p
		return p
	}
	var p *partBatch
	if n := len(b.spare); n > 0 {
		p = b.spare[n-1]
		b.spare = b.spare[:n-1]
	} else {
		p = &partBatch{}
	}
	p.tp = tp
	b.index[tp] = p
	b.parts = append(b.parts, p)
	b.last = p
	return p
}

// sourceTask is one run of a source connector's task.
type sourceTask struct {
	c      *connector
	log    Log
	prod   *producer
	src    connect.Source
	policy *errorPolicy
	spec   TopicSpec // of the topics this connector creates

	prompt PromptCommitter // the source, if it asks for prompt commits

	// Router-only state.
	floor map[TopicPartition]*floorOrder // Order of the last record stored per partition
	// the floor of the last partition replayed looked at (most records go where the one
	// before went)
	lastFloorTP TopicPartition
	lastFloor   *floorOrder
	skipped     int64             // replayed records dropped since the start
	resumed     bool              // a record above the floor was routed
	lastTopic   string            // of the last routed record (active topics), the task's copy
	topicNames  map[string]string // the task's copies of topic names, by name
	lastParts   int32             // lastTopic's partitions in the batch being routed; -1: not looked up
	memo        connect.JSONMemo  // renderings of Rows the routed batch's values share
}

func (c *connector) runSource(ctx, force context.Context) error {
	log := c.rt.opts.Log
	c.mu.Lock()
	gen := c.generation
	c.mu.Unlock()
	prod, err := newGenProducer(force, log, c.Name, gen)
	if err != nil {
		return err
	}
	committed, err := committedPosition(force, log, c.Name, prod)
	if err != nil {
		return err
	}
	spec := TopicSpec{Partitions: int32(c.Config.Int(KeyTopicPartitions)), Config: c.Config.WithPrefix(KeyTopicCreationPrefix)}
	delete(spec.Config, "partitions")
	if len(spec.Config) == 0 {
		spec.Config = nil
	}
	env := connect.Env{Connector: c.Name, Task: 0, Logger: c.logger, Store: &store{log: log, topics: c.rt.topics, prod: prod, topic: StoreTopicPrefix + c.Name},
		RawJSON: c.Chain == nil}
	src, err := c.Plugin.NewSource(c.Config, env)
	if err != nil {
		return fmt.Errorf("build source %s: %w", c.Plugin.Name, err)
	}
	t := &sourceTask{
		c: c, log: log, prod: prod, src: src, spec: spec,
		policy:     newErrorPolicy(c.Name, c.Config, c.logger, &c.rejected),
		floor:      map[TopicPartition]*floorOrder{},
		topicNames: map[string]string{},
	}
	t.prompt, _ = src.(PromptCommitter)
	c.setLive(src, prod.id, committed)
	defer func() {
		c.setLive(nil, 0, connect.Position{})
		if cerr := src.Close(context.WithoutCancel(force)); cerr != nil {
			c.logger.Warn("close source", "err", cerr)
		}
	}()
	c.logger.Info("source opening", "position", committed.String())
	if err := src.Open(ctx, committed); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("open source: %w", err)
	}
	return t.run(ctx, force, committed)
}

func (t *sourceTask) run(ctx, force context.Context, committed connect.Position) error {
	g, gctx := errgroup.WithContext(force)
	readCtx, cancelRead := context.WithCancel(gctx)
	defer cancelRead()
	stopRead := context.AfterFunc(ctx, cancelRead)
	defer stopRead()

	const depth = 4 // one being encoded, one queued, two being appended
	free := make(chan *sourceBatch, depth)
	for range depth {
		free <- &sourceBatch{index: map[TopicPartition]*partBatch{}}
	}
	toRoute := make(chan connect.Batch) // unbuffered: the reader holds the next batch until it is taken
	toAppend := make(chan *sourceBatch, 1)
	slot := newPositionSlot(committed)

	g.Go(func() error {
		defer close(toRoute)
		return t.read(readCtx, gctx, toRoute)
	})
	g.Go(func() error {
		defer close(toAppend)
		return t.routeLoop(gctx, free, toRoute, toAppend)
	})
	g.Go(func() error {
		defer slot.close()
		return t.appendLoop(gctx, free, toAppend, slot)
	})
	g.Go(func() error { return t.commitLoop(gctx, slot, t.c.Config.Millis(KeyFlushInterval)) })
	if sn, ok := t.src.(Snapshotter); ok {
		if topic, group := signalTopic(t.c); topic != "" {
			g.Go(func() error { return t.readSignals(readCtx, sn, topic, group) })
		}
	}
	err := g.Wait()
	if t.skipped > 0 && !t.resumed {
		t.c.logger.Info("replayed records skipped", "skipped", t.skipped)
	}
	return err
}

// read is the reader: it returns nil when readCtx is cancelled by a graceful stop.
func (t *sourceTask) read(readCtx, gctx context.Context, out chan<- connect.Batch) error {
	for {
		if err := t.c.gate.wait(readCtx); err != nil {
			return nil
		}
		batch, err := t.src.Read(readCtx)
		if err != nil {
			if readCtx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read source: %w", err)
		}
		select {
		case out <- batch:
		case <-gctx.Done():
			return nil
		}
	}
}

// maxTopicNames bounds the topic names a source task keeps copies of (a transform may route
// by a value); past it, a name is copied whenever the topic changes.
const maxTopicNames = 4096

// routeLoop is the router: it encodes each batch the reader hands over into a free
// sourceBatch, in order, until the reader is done.
func (t *sourceTask) routeLoop(ctx context.Context, free <-chan *sourceBatch, in <-chan connect.Batch, out chan<- *sourceBatch) error {
	for batch := range in {
		var b *sourceBatch
		select {
		case b = <-free:
		case <-ctx.Done():
			return nil
		}
		b.reset()
		if err := t.route(ctx, batch, b); err != nil {
			return err
		}
		switch {
		case batch.Release == nil:
		case b.borrowed:
			b.release = batch.Release // once appended: b holds RawJSON keys and values as they are
		default:
			batch.Release() // b holds copies of everything route read, batch.Position aside
		}
		select {
		case out <- b:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// route transforms the records of batch and sorts them into b's per-partition appends,
// dropping replayed ones.
func (t *sourceTask) route(ctx context.Context, batch connect.Batch, b *sourceBatch) error {
	b.pos = batch.Position
	// The batch's records stay alive and unmodified while it is routed (Source.Read, Transform),
	// so a Row they share, such as a source block, is rendered once per batch; the memo lets go
	// of them after.
	t.memo.Reset()
	defer t.memo.Reset()
	t.lastParts = -1 // looked up again for every batch: a topic's partitions may grow
	for i := range batch.Records {
		in := &batch.Records[i]
		out, keep := *in, true
		if ch := t.c.Chain; ch != nil {
			// transforms and predicates see the data model, never a source's rendering
			var err error
			if out.Key, err = connect.Materialize(out.Key); err == nil {
				out.Value, err = connect.Materialize(out.Value)
			}
			if err != nil {
				if err := t.reject(ctx, b, in, stageValueConverter, t.c.Plugin.Class(), err); err != nil {
					return err
				}
				continue
			}
			out, keep, err = ch.Apply(out)
			if err != nil {
				if err := t.reject(ctx, b, in, stageTransformation, transformsClass(t.c.Config), err); err != nil {
					return err
				}
				continue
			}
			out.Position = in.Position
		}
		if !keep {
			continue
		}
		if err := t.add(ctx, b, &out); err != nil {
			return err
		}
	}
	for _, p := range b.parts {
		if len(p.last.Order) > 0 {
			p.spos, _ = p.last.MarshalBinary()
		}
	}
	return nil
}

// add encodes one record into its partition's append, unless the log already holds it.
func (t *sourceTask) add(ctx context.Context, b *sourceBatch, r *connect.Record) error {
	if r.Topic == "" {
		return t.reject(ctx, b, r, stageProduce, t.c.Plugin.Class(), errors.New("record has no topic"))
	}
	if r.Topic != t.lastTopic {
		// the runtime keeps topic names (maps, floors) past the batch, whose memory the
		// source may reuse (a transform may take a topic from a value): its own copy
		name, ok := t.topicNames[r.Topic]
		if !ok {
			name = strings.Clone(r.Topic)
			if len(t.topicNames) < maxTopicNames {
				t.topicNames[name] = name
			}
		}
		t.lastTopic = name
		t.lastParts = -1
		t.c.useTopic(name)
	}
	topic := t.lastTopic
	if t.lastParts < 0 {
		n, err := t.c.rt.topics.partitions(topic, t.spec)
		if err != nil {
			return err
		}
		t.lastParts = n
	}
	n := t.lastParts
	key, err := b.arena.encodeKey(r.Key, &t.memo)
	if err != nil {
		return t.reject(ctx, b, r, stageKeyConverter, t.c.Plugin.Class(), err)
	}
	part := r.Partition
	switch {
	case part >= n:
		return t.reject(ctx, b, r, stageProduce, t.c.Plugin.Class(), fmt.Errorf("partition %d does not exist: topic %s has %d", part, r.Topic, n))
	case part >= 0:
	case key == nil || n == 1:
		part = 0
	default:
		part = wal.Partition(key, n)
	}
	tp := TopicPartition{Topic: topic, Partition: part}
	if drop, err := t.replayed(ctx, tp, r.Position.Order); err != nil || drop {
		return err
	}
	value, err := b.arena.encodeValue(r.Value, &t.memo)
	if err != nil {
		return t.reject(ctx, b, r, stageValueConverter, t.c.Plugin.Class(), err)
	}
	var hs []LogHeader
	b.headers, hs = b.arena.encodeHeaders(b.headers, r)
	p := b.part(tp)
	p.recs = append(p.recs, LogRecord{Timestamp: r.Timestamp, Key: key, Value: value, Headers: hs})
	if _, ok := r.Key.(connect.RawJSON); ok {
		b.borrowed = true
	} else if _, ok := r.Value.(connect.RawJSON); ok {
		b.borrowed = true
	}
	if len(r.Position.Order) > 0 {
		p.last = r.Position
	}
	b.records++
	return nil
}

// floorOrder is the Order of the last record a task stored in a partition.
type floorOrder struct{ order []byte }

// replayed reports whether a record with this Order bound for tp is already in the log, and
// otherwise raises tp's floor to it.
func (t *sourceTask) replayed(ctx context.Context, tp TopicPartition, order []byte) (bool, error) {
	if len(order) == 0 {
		return false, nil
	}
	f := t.lastFloor
	if f == nil || tp != t.lastFloorTP {
		if f = t.floor[tp]; f == nil {
			pos, err := t.prod.lastPosition(ctx, tp)
			if err != nil {
				return false, err
			}
			f = &floorOrder{pos.Order}
			t.floor[tp] = f
		}
		t.lastFloorTP, t.lastFloor = tp, f
	}
	if f.order != nil && bytes.Compare(order, f.order) <= 0 {
		t.skipped++
		t.c.replayed.Add(1)
		return true, nil
	}
	f.order = order
	if t.skipped > 0 && !t.resumed {
		t.c.logger.Info("replayed records skipped", "skipped", t.skipped)
	}
	t.resumed = true
	return false, nil
}

// reject applies errors.tolerance to a record; under "all" with a dead-letter topic the
// record goes there like any other record (so it, too, is appended exactly once).
func (t *sourceTask) reject(ctx context.Context, b *sourceBatch, r *connect.Record, stage, class string, cause error) error {
	rj := &rejection{stage: stage, class: class, err: cause, topic: r.Topic, partition: r.Partition, offset: -1, timestamp: r.Timestamp}
	rj.key, _ = connect.AppendJSON(nil, r.Key)
	if r.Key == nil {
		rj.key = nil
	}
	if r.Value != nil {
		rj.value, _ = connect.AppendJSON(nil, r.Value)
	}
	for _, h := range r.Headers {
		rj.headers = append(rj.headers, LogHeader{Key: strings.Clone(h.Key), Value: bytes.Clone(h.Value)})
	}
	dl, ok, err := t.policy.handle(rj)
	if err != nil || !ok {
		return err
	}
	if _, err := t.c.rt.topics.partitions(t.policy.dlqTopic, TopicSpec{Partitions: 1}); err != nil {
		return err
	}
	tp := TopicPartition{Topic: t.policy.dlqTopic, Partition: 0}
	if drop, err := t.replayed(ctx, tp, r.Position.Order); err != nil || drop {
		return err
	}
	p := b.part(tp)
	p.recs = append(p.recs, dl)
	if len(r.Position.Order) > 0 {
		p.last = r.Position
	}
	b.records++
	return nil
}

// appendLoop appends the batches in order and hands each batch's end position to the
// committer once the batch, and every batch before it, is durable. A batch bound for one
// partition is handed to the log, and as soon as the log has placed it (written, not yet
// fsynced: AppendOptions.Written) the next batch follows, so that the wait for one batch's
// fsync overlaps with writing the next and group commit covers both. A batch bound for several
// partitions appends them concurrently and waits for all. Up to three appends may be
// outstanding (one awaited by the completer, one queued, one being placed); the pool of
// batches bounds them.
func (t *sourceTask) appendLoop(ctx context.Context, free chan<- *sourceBatch, in <-chan *sourceBatch, slot *positionSlot) error {
	type inflight struct {
		b    *sourceBatch
		done chan error // the append's outcome, once it is durable or failed
	}
	pending := make(chan inflight, 1) // the batch awaiting durability while the next is appended
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(pending)
		for {
			var b *sourceBatch
			select {
			case b = <-in:
			case <-gctx.Done(): // the completer failed: the router may be stuck waiting for a free batch
				return nil
			}
			if b == nil {
				return nil // in is closed: the router is done
			}
			f := inflight{b: b, done: make(chan error, 1)}
			var failed bool
			if len(b.parts) == 1 {
				p := b.parts[0]
				placed := make(chan struct{})
				var once sync.Once
				var appendFailed atomic.Bool
				mark := func() { once.Do(func() { close(placed) }) }
				go func() {
					_, err := t.prod.append(gctx, p.tp, p.recs, p.spos, mark)
					appendFailed.Store(err != nil)
					mark() // a log that does not report placement: the append is done
					f.done <- err
				}()
				<-placed // the append returns promptly once gctx is done, so this cannot hang
				failed = appendFailed.Load()
			} else {
				err := t.appendParts(gctx, b.parts)
				f.done <- err
				failed = err != nil
			}
			select {
			case pending <- f:
			case <-gctx.Done():
				return nil // the completer returns the error that cancelled gctx
			}
			if failed {
				// Failed before it was placed: append nothing more (a later batch of another
				// partition could land before the restart); the completer returns the error.
				return nil
			}
		}
	})
	g.Go(func() error {
		for f := range pending {
			if err := <-f.done; err != nil {
				return err
			}
			b := f.b
			t.c.records.Add(int64(b.records))
			pos := b.pos
			if b.release != nil {
				b.release()
				b.release = nil
			}
			free <- b
			if !pos.IsZero() {
				slot.offer(pos, t.prompt != nil && t.prompt.CommitNow())
				t.c.setAppended(pos)
			} else if b.records > 0 {
				t.c.progress.Add(1)
			}
			t.c.rt.progress.signal()
		}
		return nil
	})
	return g.Wait()
}

// appendParts appends a batch's partitions (none, or several) concurrently and waits for all.
func (t *sourceTask) appendParts(ctx context.Context, parts []*partBatch) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := t.prod.append(ctx, p.tp, p.recs, p.spos, nil); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// commitLoop stores the newest appended batch position and acknowledges it to the source,
// at most once per interval (and once more when the appender is done).
func (t *sourceTask) commitLoop(ctx context.Context, slot *positionSlot, interval time.Duration) error {
	var last time.Time
	for {
		pos, ok := slot.take(ctx, last.Add(interval))
		if !ok {
			return nil
		}
		last = time.Now()
		if err := commitPosition(ctx, t.c.rt.topics, t.prod, t.c.Name, pos); err != nil {
			return err
		}
		if err := t.src.Ack(ctx, pos); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ack source at %s: %w", pos, err)
		}
		t.c.progress.Add(1)
	}
}

func transformsClass(cfg connect.Config) string {
	return "transforms[" + strings.Join(cfg.List(KeyTransforms), ",") + "]"
}

// positionSlot passes the newest appended position from the appender to the committer;
// positions offered while the committer waits or commits are coalesced into the newest.
type positionSlot struct {
	mu        sync.Mutex
	pos       connect.Position
	pending   bool
	urgent    bool // commit the pending position without waiting for the interval
	committed connect.Position
	closed    bool
	changed   chan struct{} // closed and replaced by offer and close
}

func newPositionSlot(committed connect.Position) *positionSlot {
	return &positionSlot{committed: committed, changed: make(chan struct{})}
}

func (s *positionSlot) offer(pos connect.Position, urgent bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wake := !s.pending || urgent && !s.urgent
	s.pos, s.pending = pos, true
	s.urgent = s.urgent || urgent
	if wake {
		// A taker that saw a pending position already waits for its due time; waking it for
		// every newer position (every appended batch) only costs the appender a reschedule.
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

func (s *positionSlot) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	close(s.changed)
	s.changed = make(chan struct{})
}

// take waits for a new position to commit, not before notBefore unless the slot is closed;
// ok is false once the slot is closed and drained, or ctx is done.
func (s *positionSlot) take(ctx context.Context, notBefore time.Time) (connect.Position, bool) {
	for {
		s.mu.Lock()
		if s.pending && (s.closed || s.urgent || !time.Now().Before(notBefore)) {
			pos := s.pos
			s.pending, s.urgent = false, false
			same := bytes.Equal(pos.Order, s.committed.Order) && bytes.Equal(pos.State, s.committed.State)
			s.committed = pos
			s.mu.Unlock()
			if same {
				continue
			}
			return pos, true
		}
		if s.closed {
			s.mu.Unlock()
			return connect.Position{}, false
		}
		pending, changed := s.pending, s.changed
		s.mu.Unlock()
		var timer *time.Timer
		var due <-chan time.Time
		if pending {
			timer = time.NewTimer(time.Until(notBefore))
			due = timer.C
		}
		select {
		case <-changed:
		case <-due:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return connect.Position{}, false
		}
	}
}
