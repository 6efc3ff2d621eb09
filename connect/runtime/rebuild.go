package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// Rebuilds of a sink's view (connect.Rebuilder): while the live task keeps writing, every
// record of the connector's topics is replayed from the log start into a sink that writes a
// fresh view, up to the live task's committed offsets; then the live task is held between two
// batches, the replay drains to exactly its offsets, and FinishRebuild switches readers and the
// live sink to the fresh view before the task goes on. Any failure, a stop of the connector or
// of the runtime, or a restart of the live task aborts the rebuild: the live view is untouched.

// Rebuild states.
const (
	RebuildRunning  = "RUNNING"
	RebuildDone     = "DONE"
	RebuildFailed   = "FAILED"
	RebuildAborting = "ABORTING"
)

// RebuildStatus is the progress of a sink connector's newest rebuild.
type RebuildStatus struct {
	State string
	// Phase: "replay" (catching up with the live task), "switch" (holding it), "done".
	Phase    string
	Started  time.Time
	Finished time.Time // zero while running
	// Replayed counts the log records replayed; Target the records up to the live task's
	// offsets when the replay started.
	Replayed, Target int64
	Error            string
}

// ErrRebuildRunning is returned by Rebuild while a rebuild of the connector runs.
var ErrRebuildRunning = errors.New("a rebuild of the connector is running")

// ErrNoRebuild is returned by Rebuild for a sink that cannot rebuild its view.
var ErrNoRebuild = errors.New("the sink cannot rebuild its view")

// ErrNotRunning is returned by Rebuild when the connector's task is not running.
var ErrNotRunning = errors.New("the connector's task is not running")

// Rebuild starts rebuilding a sink connector's view in the background and returns its status;
// see RebuildState for its progress. The rebuild ends with Run.
func (rt *Runtime) Rebuild(name string) (RebuildStatus, error) {
	c, err := rt.get(name)
	if err != nil {
		return RebuildStatus{}, err
	}
	chk := c.checked()
	if chk.Plugin.Kind != connect.KindSink {
		return RebuildStatus{}, fmt.Errorf("connector %s is a %s: %w", name, chk.Plugin.Kind, ErrNoRebuild)
	}
	rt.mu.Lock()
	rs := rt.run
	rt.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rebuild != nil && c.rebuild.Finished.IsZero() {
		return *c.rebuild, fmt.Errorf("connector %s: %w", name, ErrRebuildRunning)
	}
	live, _ := c.instance.(connect.Sink)
	if rs == nil || c.task != StateRunning && c.task != StatePaused {
		return RebuildStatus{}, fmt.Errorf("connector %s is %s: %w", name, c.task, ErrNotRunning)
	}
	if live == nil {
		return RebuildStatus{}, fmt.Errorf("connector %s is starting (retry in a moment): %w", name, ErrNotRunning)
	}
	rb, ok := live.(connect.Rebuilder)
	if !ok {
		return RebuildStatus{}, fmt.Errorf("connector %s (%s): %w", name, chk.Plugin.Name, ErrNoRebuild)
	}
	st := &RebuildStatus{State: RebuildRunning, Phase: "replay", Started: time.Now()}
	c.rebuild = st
	ctx, cancel := context.WithCancel(rs.stop)
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		defer cancel()
		r := &rebuild{c: c, chk: chk, live: live, rb: rb, st: st}
		r.run(ctx, rs.force)
	}()
	return *st, nil
}

// RebuildState returns the status of a connector's newest rebuild; ok is false if it never had one.
func (rt *Runtime) RebuildState(name string) (RebuildStatus, bool, error) {
	c, err := rt.get(name)
	if err != nil {
		return RebuildStatus{}, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rebuild == nil {
		return RebuildStatus{}, false, nil
	}
	return *c.rebuild, true, nil
}

type rebuild struct {
	c    *connector
	chk  Checked // the configuration the rebuild began with
	live connect.Sink
	rb   connect.Rebuilder
	st   *RebuildStatus // guarded by c.mu
}

func (r *rebuild) update(f func(st *RebuildStatus)) {
	r.c.mu.Lock()
	f(r.st)
	r.c.mu.Unlock()
}

func (r *rebuild) run(ctx, force context.Context) {
	c := r.c
	c.logger.Info("rebuild started")
	err := r.replayAll(ctx, force)
	r.update(func(st *RebuildStatus) {
		st.Finished = time.Now()
		if err != nil {
			st.State, st.Error = RebuildFailed, err.Error()
		} else {
			st.State, st.Phase = RebuildDone, "done"
		}
	})
	if err != nil {
		c.logger.Error("rebuild failed; the live view is untouched", "err", err)
		return
	}
	c.logger.Info("rebuild finished")
}

func (r *rebuild) replayAll(ctx, force context.Context) (err error) {
	c := r.c
	fresh, err := r.rb.BeginRebuild(ctx)
	if err != nil {
		return fmt.Errorf("begin rebuild: %w", err)
	}
	finished := false
	defer func() {
		cctx := context.WithoutCancel(force)
		if !finished {
			r.update(func(st *RebuildStatus) { st.State = RebuildAborting })
			if aerr := r.rb.AbortRebuild(cctx, fresh); aerr != nil {
				c.logger.Warn("abort rebuild", "err", aerr)
			}
		}
		if cerr := fresh.Close(cctx); cerr != nil && err == nil && !finished {
			err = fmt.Errorf("close rebuilt sink: %w", cerr)
		}
	}()
	if err := fresh.Open(ctx); err != nil {
		return fmt.Errorf("open rebuilt sink: %w", err)
	}
	// The replay decodes and transforms with the configuration the rebuild began with (a task
	// built for it, never run).
	rc := &connector{rt: c.rt, Checked: r.chk, logger: c.logger}
	t := &sinkTask{
		c: rc, log: c.rt.opts.Log, sink: fresh, group: SinkGroup(r.chk.Name),
		// The live task counted (and dead-lettered) the records it rejected already.
		policy: newErrorPolicy(r.chk.Name, r.chk.Config, c.logger, new(atomic.Int64)),
		max:    int(r.chk.Config.Int(KeyMaxPollRecords)),
		commit: map[TopicPartition]int64{},
	}
	// Phase 1: replay up to the live task's offsets, while it keeps writing.
	from, err := r.starts()
	if err != nil {
		return err
	}
	upTo, err := r.committed(from)
	if err != nil {
		return err
	}
	var target int64
	for tp, end := range upTo {
		target += end - from[tp]
	}
	r.update(func(st *RebuildStatus) { st.Target = target })
	if err := r.replay(ctx, t, from, upTo); err != nil {
		return err
	}
	// Phase 2: hold the live task between batches, drain to its offsets, switch.
	r.update(func(st *RebuildStatus) { st.Phase = "switch" })
	c.hold.set(true)
	defer c.hold.set(false)
	if err := r.parked(ctx); err != nil {
		return err
	}
	final, err := r.committed(from)
	if err != nil {
		return err
	}
	if err := r.replay(ctx, t, upTo, final); err != nil {
		return err
	}
	if err := r.sameLive(); err != nil {
		return err
	}
	if err := r.rb.FinishRebuild(ctx, fresh); err != nil {
		return fmt.Errorf("finish rebuild: %w", err)
	}
	finished = true
	return nil
}

// starts returns the log start of every partition of the connector's topics.
func (r *rebuild) starts() (map[TopicPartition]int64, error) {
	log := r.c.rt.opts.Log
	match := topicMatcher(r.chk.Config)
	out := map[TopicPartition]int64{}
	for _, topic := range log.Topics() {
		if !match(topic) {
			continue
		}
		n, err := partitionCount(log, topic)
		if errors.Is(err, wal.ErrUnknownTopic) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for p := range n {
			start, err := log.EarliestOffset(topic, p)
			if err != nil {
				return nil, err
			}
			out[TopicPartition{Topic: topic, Partition: p}] = start
		}
	}
	return out, nil
}

// committed returns the live task's committed offsets of the partitions in from (at least
// from's offsets).
func (r *rebuild) committed(from map[TopicPartition]int64) (map[TopicPartition]int64, error) {
	got, err := r.c.rt.opts.Log.FetchOffsets(SinkGroup(r.c.Name))
	if err != nil {
		return nil, err
	}
	out := make(map[TopicPartition]int64, len(from))
	for tp, start := range from {
		out[tp] = max(got[tp], start)
	}
	return out, nil
}

// parked waits until the live task waits at a gate (held by the rebuild, or paused by the user).
func (r *rebuild) parked(ctx context.Context) error {
	held, _ := r.c.hold.parkedAt()
	for {
		paused, isPaused := r.c.gate.parkedAt()
		if !isPaused {
			paused = nil
		}
		if err := r.sameLive(); err != nil {
			return err
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-held:
			t.Stop()
			return nil
		case <-paused:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// sameLive fails when the live task is no longer the one the rebuild began with.
func (r *rebuild) sameLive() error {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	if r.c.instance != r.live {
		return fmt.Errorf("the connector's task stopped or restarted during the rebuild; start the rebuild again")
	}
	return nil
}

// replay writes the records of each partition in [from, upTo) into t's sink.
func (r *rebuild) replay(ctx context.Context, t *sinkTask, from, upTo map[TopicPartition]int64) error {
	log := r.c.rt.opts.Log
	for tp, end := range upTo {
		off := from[tp]
		for off < end {
			res, err := log.Fetch(ctx, tp.Topic, tp.Partition, off, FetchOptions{MaxBytes: r.c.rt.opts.FetchBytes})
			if err != nil {
				return fmt.Errorf("rebuild: fetch %s-%d at %d: %w", tp.Topic, tp.Partition, off, err)
			}
			recs := res.Records
			for len(recs) > 0 && recs[len(recs)-1].Offset >= end {
				recs = recs[:len(recs)-1]
			}
			for len(recs) > 0 {
				n := min(len(recs), t.max)
				ch := &chunk{tp: tp, recs: recs[:n:n], ready: make(chan struct{})}
				t.prepare(ch)
				close(ch.ready)
				_, err := r.write(ctx, t, ch)
				ch.release()
				if err != nil {
					return err
				}
				recs = recs[n:]
				r.update(func(st *RebuildStatus) { st.Replayed += int64(n) })
			}
			if res.NextOffset <= off {
				break
			}
			off = min(res.NextOffset, end)
		}
	}
	return nil
}

// write writes one prepared chunk into the rebuilt sink. Records rejected by decoding, the
// transforms or the sink fail the rebuild under errors.tolerance=none and are skipped under
// all (the live task sent them to the dead-letter topic already).
func (r *rebuild) write(ctx context.Context, t *sinkTask, ch *chunk) (int, error) {
	out := t.out[:0]
	for i := range ch.recs {
		d := &ch.out[i]
		if d.err != nil {
			if !t.policy.tolerateAll {
				return 0, fmt.Errorf("rebuild: %s-%d offset %d: %w", ch.tp.Topic, ch.tp.Partition, ch.recs[i].Offset, d.err)
			}
			continue
		}
		if d.keep {
			out = append(out, d.rec)
		}
	}
	t.out = out
	if len(out) == 0 {
		return 0, nil
	}
	err := r.writeRetrying(ctx, t.sink, out)
	clear(t.out)
	var we *connect.WriteError
	switch {
	case err == nil:
	case errors.As(err, &we) && t.policy.tolerateAll:
	case errors.As(err, &we):
		return 0, fmt.Errorf("rebuild: the sink rejected records: %w", err)
	default:
		return 0, fmt.Errorf("rebuild: write: %w", err)
	}
	return len(out), nil
}

// writeRetrying writes a batch, retrying retriable failures with backoff (as the live task's
// restarts would) until ctx ends.
func (r *rebuild) writeRetrying(ctx context.Context, sink connect.Sink, batch []connect.Record) error {
	backoff := r.c.rt.opts.InitialBackoff
	maxDelay := max(r.chk.Config.Millis(KeyRetryDelayMax), backoff)
	for {
		err := sink.Write(ctx, batch)
		var we *connect.WriteError
		if err == nil || errors.As(err, &we) || !connect.IsRetriable(err) || ctx.Err() != nil {
			return err
		}
		r.c.logger.Warn("rebuild write failed; retrying", "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, maxDelay)
	}
}
