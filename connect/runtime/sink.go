package runtime

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// The sink task: a consumer group per connector ("connect-<name>", as in Kafka Connect).
//
//	fetchers:  one per assigned partition, long-polling the log from the committed offset and
//	           handing chunks of records to the writer, in order, through a bounded channel
//	decoders:  a few workers that decode and transform the chunks meanwhile; the writer waits
//	           for each chunk's decoding, so order is kept while decoding runs in parallel
//	refresher: assigns the partitions of topics (or topics.regex matches) as they appear
//	writer:    up to consumer.override.max.poll.records records → decode → transforms →
//	           Write → rejected records to the dead-letter topic → offsets to commit
//
// Offsets are committed only after Write returned, at most every offset.flush.interval.ms
// under a steady stream (as Kafka Connect does: each commit is an fsync), after sinkIdleCommit
// without new records, and before the task parks (pause, rebuild) or stops gracefully. Delivery
// is at least once, in order per partition; a crash replays what was written since the last
// commit.

// SinkGroup returns the consumer group of a sink connector.
func SinkGroup(connector string) string { return "connect-" + connector }

// chunk is part of what one fetch returned, decoded and transformed by a decoder (so that
// this work runs in parallel, beside the writer's writes and commits).
type chunk struct {
	tp    TopicPartition
	recs  []LogRecord
	out   []decoded     // one per rec, valid once ready is closed
	ready chan struct{} // closed when out is set
	buf   *[]decoded    // out's array, returned to decodedPool once the chunk is written
}

// decodedPool recycles the arrays chunks decode into: a chunk's records are copied into the
// batch handed to the sink, so its array is free again once the chunk is written.
var decodedPool sync.Pool

func (c *chunk) alloc(n int) {
	if p, ok := decodedPool.Get().(*[]decoded); ok && cap(*p) >= n {
		c.buf = p
	} else {
		b := make([]decoded, 0, max(n, chunkRecords))
		c.buf = &b
	}
	c.out = (*c.buf)[:n]
}

// release returns the chunk's array for reuse; the chunk must not be read afterwards.
func (c *chunk) release() {
	if c.buf == nil {
		return
	}
	b := (*c.buf)[:cap(*c.buf)]
	clear(b) // no references to records the sink may still hold
	*c.buf = b[:0]
	decodedPool.Put(c.buf)
	c.buf, c.out = nil, nil
}

// chunkRecords is the most records of one chunk: a fetch is split so that decoders share it.
const chunkRecords = 128

// decoded is one fetched record after decoding and the transforms.
type decoded struct {
	rec   connect.Record
	keep  bool   // false: dropped by a transform, or rejected (stage set)
	stage string // set when rejected
	class string
	err   error
}

type sinkTask struct {
	c      *connector
	log    Log
	sink   connect.Sink
	policy *errorPolicy
	group  string
	max    int

	// writer state, reused across batches
	out     []connect.Record
	origin  []*LogRecord
	originT []TopicPartition
	commit  map[TopicPartition]int64 // offsets written and not committed yet
	batch   map[TopicPartition]int64 // offsets of the batch being written
	dlq     []LogRecord

	interval   time.Duration // offset.flush.interval.ms
	lastCommit time.Time
}

// sinkIdleCommit is how long a sink with uncommitted offsets waits for more records before it
// commits them anyway: offsets trail the view by at most this much while nothing arrives (a
// read-your-writes wait sees its write committed this soon), and by at most the flush interval
// under a steady stream.
const sinkIdleCommit = 20 * time.Millisecond

func (c *connector) runSink(ctx, force context.Context) error {
	log := c.rt.opts.Log
	sink, err := c.Plugin.NewSink(c.Config, connect.Env{Connector: c.Name, Task: 0, Logger: c.logger})
	if err != nil {
		return fmt.Errorf("build sink %s: %w", c.Plugin.Name, err)
	}
	defer func() {
		if cerr := sink.Close(context.WithoutCancel(force)); cerr != nil {
			c.logger.Warn("close sink", "err", cerr)
		}
	}()
	c.setLive(sink, 0, connect.Position{})
	defer c.setLive(nil, 0, connect.Position{})
	if err := sink.Open(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("open sink: %w", err)
	}
	t := &sinkTask{
		c: c, log: log, sink: sink, group: SinkGroup(c.Name),
		policy: newErrorPolicy(c.Name, c.Config, c.logger, &c.rejected),
		max:    int(c.Config.Int(KeyMaxPollRecords)),
		commit: map[TopicPartition]int64{}, batch: map[TopicPartition]int64{},
		interval: c.Config.Millis(KeyFlushInterval), lastCommit: time.Now(),
	}
	return t.run(ctx, force)
}

func (t *sinkTask) run(ctx, force context.Context) error {
	committed, err := t.log.FetchOffsets(t.group)
	if err != nil {
		return fmt.Errorf("fetch offsets of group %s: %w", t.group, err)
	}
	g, gctx := errgroup.WithContext(force)
	fetchCtx, cancelFetch := context.WithCancel(gctx)
	defer cancelFetch()
	stopFetch := context.AfterFunc(ctx, cancelFetch)
	defer stopFetch()

	chunks := make(chan *chunk, 16)
	work := make(chan *chunk, 16)
	for range max(1, goruntime.GOMAXPROCS(0)) {
		g.Go(func() error {
			for c := range work {
				t.prepare(c)
				close(c.ready)
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(work)
		fg, fctx := errgroup.WithContext(fetchCtx)
		fg.Go(func() error { return t.assign(fctx, fg, committed, chunks, work) })
		return fg.Wait()
	})
	g.Go(func() error {
		err := t.write(fetchCtx, gctx, chunks)
		cancelFetch()
		return err
	})
	return g.Wait()
}

// matcher returns which topics the connector consumes.
func (t *sinkTask) matcher() func(string) bool { return topicMatcher(t.c.Config) }

// topicMatcher returns which topics a sink connector with configuration cfg consumes.
func topicMatcher(cfg connect.Config) func(string) bool {
	if re := cfg.String(KeyTopicsRegex); re != "" {
		rx := regexp.MustCompile("^(?:" + re + ")$")
		internalOK := strings.HasPrefix(re, "__")
		return func(name string) bool {
			return (internalOK || !strings.HasPrefix(name, "__")) && rx.MatchString(name)
		}
	}
	want := map[string]bool{}
	for _, name := range cfg.List(KeyTopics) {
		want[name] = true
	}
	return func(name string) bool { return want[name] }
}

// assign starts a fetcher for every partition of every matching topic, now and whenever a
// topic appears.
func (t *sinkTask) assign(ctx context.Context, g *errgroup.Group, committed map[TopicPartition]int64, out, work chan<- *chunk) error {
	match := t.matcher()
	assigned := map[string]bool{}
	ticker := time.NewTicker(t.c.rt.opts.TopicRefresh)
	defer ticker.Stop()
	for {
		changed := t.c.rt.topics.changes()
		for _, name := range t.log.Topics() {
			if assigned[name] || !match(name) {
				continue
			}
			n, err := partitionCount(t.log, name)
			if errors.Is(err, wal.ErrUnknownTopic) {
				continue
			}
			if err != nil {
				return fmt.Errorf("assign topic %s: %w", name, err)
			}
			assigned[name] = true
			t.c.useTopic(name)
			for p := range n {
				tp := TopicPartition{Topic: name, Partition: p}
				off, ok := committed[tp]
				if !ok || off < 0 { // none, or reset (see ResetOffsets)
					start, err := t.log.EarliestOffset(name, p)
					if err != nil {
						return fmt.Errorf("assign %s-%d: %w", name, p, err)
					}
					off = start
				}
				t.c.logger.Debug("partition assigned", "topic", name, "partition", p, "offset", off)
				g.Go(func() error { return t.fetch(ctx, tp, off, out, work) })
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-changed:
		}
	}
}

// fetch long-polls one partition and hands its records to the writer in order.
func (t *sinkTask) fetch(ctx context.Context, tp TopicPartition, next int64, out, work chan<- *chunk) error {
	opts := FetchOptions{MaxBytes: t.c.rt.opts.FetchBytes, MaxWait: t.c.rt.opts.FetchWait}
	for {
		res, err := t.log.Fetch(ctx, tp.Topic, tp.Partition, next, opts)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, wal.ErrOffsetOutOfRange) {
				start, berr := t.log.EarliestOffset(tp.Topic, tp.Partition)
				if berr != nil {
					return fmt.Errorf("fetch %s-%d: %w", tp.Topic, tp.Partition, berr)
				}
				t.c.logger.Warn("committed offset is outside the partition; continuing at the log start",
					"topic", tp.Topic, "partition", tp.Partition, "offset", next, "log_start", start, "err", err)
				next = start
				continue
			}
			return fmt.Errorf("fetch %s-%d at %d: %w", tp.Topic, tp.Partition, next, err)
		}
		for recs := res.Records; len(recs) > 0; {
			n := min(len(recs), chunkRecords)
			c := &chunk{tp: tp, recs: recs[:n:n], ready: make(chan struct{})}
			recs = recs[n:]
			select {
			case out <- c:
			case <-ctx.Done():
				return nil
			}
			work <- c // never blocks for long: decoders drain work until it is closed
		}
		if res.NextOffset > next {
			next = res.NextOffset
		}
	}
}

// prepare decodes and transforms a chunk's records.
func (t *sinkTask) prepare(c *chunk) {
	tp, recs := c.tp, c.recs
	c.alloc(len(recs))
	// one decoder per chunk: its records share allocation slabs and are released together
	var dec connect.JSONDecoder
	for i := range recs {
		d := &c.out[i]
		rec, err := decodeRecord(&dec, tp.Topic, tp.Partition, &recs[i])
		if err != nil {
			var de *DecodeError
			d.stage, d.class, d.err = stageValueConverter, "json", err
			if errors.As(err, &de) {
				d.stage = de.Stage
			}
			continue
		}
		if ch := t.c.Chain; ch != nil {
			out, keep, err := ch.Apply(rec)
			if err != nil {
				d.stage, d.class, d.err = stageTransformation, transformsClass(t.c.Config), err
				continue
			}
			if !keep {
				continue
			}
			rec = out
		}
		d.rec, d.keep = rec, true
	}
}

// write is the writer loop. It returns once fetchCtx is cancelled between batches, after
// committing the offsets of what it wrote.
func (t *sinkTask) write(fetchCtx, ctx context.Context, in <-chan *chunk) error {
	var pending []*chunk
	for {
		// Paused or held by a rebuild: commit what was written before the task counts as
		// parked, so that the committed offsets are where it stopped.
		var flushErr error
		beforePark := func() {
			if flushErr == nil {
				flushErr = t.flush(ctx)
			}
		}
		if err := t.c.gate.waitParking(fetchCtx, beforePark); err != nil {
			return errors.Join(flushErr, t.flushOnExit(ctx))
		}
		if err := t.c.hold.waitParking(fetchCtx, beforePark); err != nil {
			return errors.Join(flushErr, t.flushOnExit(ctx))
		}
		if flushErr != nil {
			return flushErr
		}
		if len(pending) == 0 {
			var idle <-chan time.Time
			var timer *time.Timer
			if len(t.commit) > 0 {
				timer = time.NewTimer(sinkIdleCommit)
				idle = timer.C
			}
			select {
			case c := <-in:
				pending = append(pending, c)
			case <-fetchCtx.Done():
			case <-t.c.gate.closed(): // paused while idle: wait at the gate, write nothing
			case <-t.c.hold.closed(): // a rebuild holds the sink while it is idle
			case <-idle:
				if err := t.flush(ctx); err != nil {
					return err
				}
			}
			if timer != nil {
				timer.Stop()
			}
			if len(pending) == 0 {
				if fetchCtx.Err() != nil {
					return t.flushOnExit(ctx)
				}
				continue
			}
		}
		// Collect up to max records, waiting up to the linger for more: bigger writes mean
		// fewer calls to the sink.
		var linger *time.Timer
	drain:
		for n := countRecords(pending); n < t.max; n = countRecords(pending) {
			select {
			case c := <-in:
				pending = append(pending, c)
				continue
			default:
			}
			if t.c.rt.opts.SinkLinger <= 0 {
				break
			}
			if linger == nil {
				linger = time.NewTimer(t.c.rt.opts.SinkLinger)
			}
			select {
			case c := <-in:
				pending = append(pending, c)
			case <-linger.C:
				break drain
			case <-fetchCtx.Done():
				break drain
			}
		}
		if linger != nil {
			linger.Stop()
		}
		var err error
		if pending, err = t.writeBatch(ctx, pending); err != nil {
			// Commit what the writes before this one stored, so that the restarted task
			// resumes at the failed batch (a failure that recurs cannot hold progress back).
			if ctx.Err() == nil {
				if ferr := t.flush(ctx); ferr != nil {
					err = errors.Join(err, ferr)
				}
			}
			return err
		}
		if t.interval <= 0 || time.Since(t.lastCommit) >= t.interval {
			if err := t.flush(ctx); err != nil {
				return err
			}
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// flush commits the offsets of what was written since the last commit.
func (t *sinkTask) flush(ctx context.Context) error {
	if len(t.commit) == 0 {
		return nil
	}
	if err := t.log.CommitOffsets(ctx, t.group, t.commit); err != nil {
		return fmt.Errorf("commit offsets of group %s: %w", t.group, err)
	}
	clear(t.commit)
	t.lastCommit = time.Now()
	t.c.rt.progress.signal() // read-your-writes waits look at the committed offsets
	return nil
}

// flushOnExit commits on a graceful stop; when the stop was forced (ctx is done) what was not
// committed is written again by the next run.
func (t *sinkTask) flushOnExit(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	return t.flush(ctx)
}

func countRecords(cs []*chunk) int {
	n := 0
	for _, c := range cs {
		n += len(c.recs)
	}
	return n
}

// writeBatch writes up to max records from the front of pending and returns what is left.
func (t *sinkTask) writeBatch(ctx context.Context, pending []*chunk) ([]*chunk, error) {
	t.out, t.origin, t.originT, t.dlq = t.out[:0], t.origin[:0], t.originT[:0], t.dlq[:0]
	clear(t.batch)
	taken := 0
	for len(pending) > 0 && taken < t.max {
		c := pending[0]
		select {
		case <-c.ready:
		case <-ctx.Done():
			return pending, ctx.Err()
		}
		k := min(len(c.recs), t.max-taken)
		if k > 0 {
			t.c.useTopic(c.tp.Topic)
		}
		for i := range k {
			lr, d := &c.recs[i], &c.out[i]
			taken++
			t.batch[c.tp] = lr.Offset + 1
			if d.err != nil {
				if err := t.reject(c.tp, lr, d.stage, d.class, d.err); err != nil {
					return pending, err
				}
				continue
			}
			if !d.keep {
				continue
			}
			t.out = append(t.out, d.rec)
			t.origin = append(t.origin, lr)
			t.originT = append(t.originT, c.tp)
		}
		if k == len(c.recs) {
			pending = pending[1:]
			c.release() // its records are in t.out now
		} else {
			c.recs, c.out = c.recs[k:], c.out[k:]
		}
	}
	if len(t.out) > 0 {
		began := time.Now()
		err := t.sink.Write(ctx, t.out)
		if obs := t.c.rt.opts.Observer; obs != nil {
			obs.SinkBatch(t.c.Name, len(t.out), time.Since(began), err)
		}
		var we *connect.WriteError
		switch {
		case err == nil:
		case errors.As(err, &we):
			for _, f := range we.Failed {
				if f.Index < 0 || f.Index >= len(t.origin) {
					return pending, connect.Permanentf("sink %s reported a rejected record index %d outside the batch of %d", t.c.Plugin.Name, f.Index, len(t.origin))
				}
				if err := t.reject(t.originT[f.Index], t.origin[f.Index], stageTaskPut, t.c.Plugin.Class(), f.Err); err != nil {
					return pending, err
				}
			}
		default:
			if ctx.Err() != nil {
				return pending, ctx.Err()
			}
			return pending, fmt.Errorf("write to sink %s: %w", t.c.Plugin.Name, err)
		}
	}
	if len(t.dlq) > 0 {
		if err := t.appendDLQ(ctx); err != nil {
			return pending, err
		}
	}
	for tp, off := range t.batch { // written (and its rejections stored): to be committed
		t.commit[tp] = off
	}
	t.c.records.Add(int64(len(t.out)))
	t.c.progress.Add(1)
	t.c.rt.progress.signal()
	// Drop references to written records so their values can be collected.
	clear(t.out)
	clear(t.origin)
	return pending, nil
}

func (t *sinkTask) reject(tp TopicPartition, lr *LogRecord, stage, class string, cause error) error {
	rj := &rejection{
		stage: stage, class: class, err: cause,
		topic: tp.Topic, partition: tp.Partition, offset: lr.Offset,
		key: lr.Key, value: lr.Value, headers: lr.Headers, timestamp: lr.Timestamp,
	}
	dl, ok, err := t.policy.handle(rj)
	if err != nil || !ok {
		return err
	}
	t.dlq = append(t.dlq, dl)
	return nil
}

func (t *sinkTask) appendDLQ(ctx context.Context) error {
	topic := t.policy.dlqTopic
	if _, err := t.c.rt.topics.partitions(topic, TopicSpec{Partitions: 1}); err != nil {
		return err
	}
	if _, err := t.log.Append(ctx, topic, 0, t.dlq, AppendOptions{}); err != nil {
		return fmt.Errorf("append to dead-letter topic %s: %w", topic, err)
	}
	return nil
}
