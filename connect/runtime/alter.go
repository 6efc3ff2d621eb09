package runtime

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// Offsets of stopped connectors can be altered and reset (Kafka Connect's KIP-875).
//
// A source's offset is its committed position. Altering or resetting it moves the connector to
// a new offsets generation: the position is committed by a new producer (see producerName), so
// the records the source reads again after a rewind are appended instead of being dropped as
// replays of what the log already holds. A sink's offsets are its consumer group's; a reset
// commits -1 for every partition, which the sink reads as "none" (it starts at the log start).

// ErrNotStopped is returned when offsets are altered or reset while the connector is not STOPPED.
var ErrNotStopped = errors.New("the connector is not STOPPED")

// stoppedForOffsets returns c locked for a management operation if it is STOPPED with no task.
func (rt *Runtime) stoppedForOffsets(name string) (*connector, error) {
	c, err := rt.get(name)
	if err != nil {
		return nil, err
	}
	c.ops.Lock()
	c.mu.Lock()
	stopped := c.target == StateStopped && c.done == nil
	state := c.target
	c.mu.Unlock()
	if !stopped {
		c.ops.Unlock()
		return nil, fmt.Errorf("connector %s is %s: %w; stop it first (PUT /connectors/%s/stop)", name, state, ErrNotStopped, name)
	}
	return c, nil
}

// AlterSourceOffset sets a stopped source connector's position: it resumes after pos.
// Options.Resolve must not be needed: the source is built from the running configuration. A
// source implementing PositionChecker checks pos first.
func (rt *Runtime) AlterSourceOffset(ctx context.Context, name string, pos connect.Position) error {
	c, err := rt.stoppedForOffsets(name)
	if err != nil {
		return err
	}
	defer c.ops.Unlock()
	if c.Plugin.Kind != connect.KindSource {
		return fmt.Errorf("connector %s is a %s, not a source", name, c.Plugin.Kind)
	}
	if c.broken == nil && c.Plugin.NewSource != nil {
		src, err := c.Plugin.NewSource(c.Config, connect.Env{Connector: name, Logger: c.logger})
		if err != nil {
			return fmt.Errorf("build source %s: %w", c.Plugin.Name, err)
		}
		if pc, ok := src.(PositionChecker); ok {
			if err := pc.CheckPosition(ctx, pos); err != nil {
				return &OffsetError{Connector: name, Err: err}
			}
		}
	}
	return rt.commitGeneration(ctx, c, pos)
}

// OffsetError is an offset the source refused (PositionChecker).
type OffsetError struct {
	Connector string
	Err       error
}

func (e *OffsetError) Error() string {
	return fmt.Sprintf("connector %s: offset refused: %v", e.Connector, e.Err)
}
func (e *OffsetError) Unwrap() error { return e.Err }

// ResetSourceOffset forgets a stopped source connector's position: it starts over as if it
// never ran (a new snapshot, per its snapshot.mode).
func (rt *Runtime) ResetSourceOffset(ctx context.Context, name string) error {
	c, err := rt.stoppedForOffsets(name)
	if err != nil {
		return err
	}
	defer c.ops.Unlock()
	if c.Plugin.Kind != connect.KindSource {
		return fmt.Errorf("connector %s is a %s, not a source", name, c.Plugin.Kind)
	}
	return rt.commitGeneration(ctx, c, connect.Position{})
}

// commitGeneration commits pos as c's position under the next offsets generation, then stores
// the generation. A crash in between leaves the old generation, whose producer still reads its
// own last commit: the alteration did not happen.
func (rt *Runtime) commitGeneration(ctx context.Context, c *connector, pos connect.Position) error {
	c.mu.Lock()
	next := c.generation + 1
	c.mu.Unlock()
	prod, err := newGenProducer(ctx, rt.opts.Log, c.Name, next)
	if err != nil {
		return err
	}
	if err := commitPosition(ctx, rt.topics, prod, c.Name, pos); err != nil {
		return err
	}
	c.mu.Lock()
	c.generation = next
	c.mu.Unlock()
	if err := rt.persist(ctx, c); err != nil {
		return err
	}
	c.logger.Info("source offset set", "position", pos.String(), "generation", next)
	return nil
}

// SinkOffsets returns a sink connector's committed consumer offsets (the next offset to read per
// partition); partitions reset or never committed are absent.
func (rt *Runtime) SinkOffsets(name string) (map[TopicPartition]int64, error) {
	c, err := rt.get(name)
	if err != nil {
		return nil, err
	}
	if k := c.checked().Plugin.Kind; k != connect.KindSink {
		return nil, fmt.Errorf("connector %s is a %s, not a sink", name, k)
	}
	all, err := rt.opts.Log.FetchOffsets(SinkGroup(name))
	if err != nil {
		return nil, fmt.Errorf("offsets of %s: %w", name, err)
	}
	for tp, off := range all {
		if off < 0 {
			delete(all, tp)
		}
	}
	return all, nil
}

// SinkOffsetError is an offset that does not fit its partition.
type SinkOffsetError struct {
	Index int // in the request's list
	TP    TopicPartition
	Msg   string
}

func (e *SinkOffsetError) Error() string {
	return fmt.Sprintf("%s-%d: %s", e.TP.Topic, e.TP.Partition, e.Msg)
}

// AlterSinkOffsets sets a stopped sink connector's committed offsets; an offset of -1 resets
// the partition (the sink starts it at the log start). Each offset must lie between the
// partition's log start and its end.
func (rt *Runtime) AlterSinkOffsets(ctx context.Context, name string, offsets map[TopicPartition]int64) error {
	c, err := rt.stoppedForOffsets(name)
	if err != nil {
		return err
	}
	defer c.ops.Unlock()
	if c.Plugin.Kind != connect.KindSink {
		return fmt.Errorf("connector %s is a %s, not a sink", name, c.Plugin.Kind)
	}
	tps := make([]TopicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		return tps[i].Topic < tps[j].Topic || tps[i].Topic == tps[j].Topic && tps[i].Partition < tps[j].Partition
	})
	for _, tp := range tps {
		off := offsets[tp]
		n, err := partitionCount(rt.opts.Log, tp.Topic)
		if errors.Is(err, wal.ErrUnknownTopic) {
			return &SinkOffsetError{TP: tp, Msg: fmt.Sprintf("topic %s does not exist", tp.Topic)}
		}
		if err != nil {
			return err
		}
		if tp.Partition < 0 || tp.Partition >= n {
			return &SinkOffsetError{TP: tp, Msg: fmt.Sprintf("topic %s has partitions 0..%d", tp.Topic, n-1)}
		}
		if off == -1 {
			continue
		}
		start, end, err := bounds(ctx, rt.opts.Log, tp.Topic, tp.Partition)
		if err != nil {
			return err
		}
		if off < start || off > end {
			return &SinkOffsetError{TP: tp, Msg: fmt.Sprintf("offset %d is outside the partition: it holds offsets %d..%d (the end, %d, means \"only new records\")", off, start, end, end)}
		}
	}
	if err := rt.opts.Log.CommitOffsets(ctx, SinkGroup(name), offsets); err != nil {
		return err
	}
	c.logger.Info("sink offsets set", "partitions", len(offsets))
	return nil
}

// ResetSinkOffsets resets every partition a stopped sink connector has offsets for.
func (rt *Runtime) ResetSinkOffsets(ctx context.Context, name string) error {
	cur, err := rt.SinkOffsets(name)
	if err != nil {
		return err
	}
	reset := make(map[TopicPartition]int64, len(cur))
	for tp := range cur {
		reset[tp] = -1
	}
	return rt.AlterSinkOffsets(ctx, name, reset)
}
