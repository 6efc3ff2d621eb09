package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// Incremental snapshots: the runtime's part is to reach the running source (the API) and to
// read the signal topic; the source does the rest (sources/snapshot).

// Snapshotter is an optional capability of a connect.Source, discovered by type assertion on
// the running instance: incremental and blocking snapshots controlled through the API and
// Debezium's signals. Its methods may be called from any goroutine, concurrently with Read.
type Snapshotter interface {
	// SnapshotSignal applies a signal: typ is execute-snapshot, stop-snapshot,
	// pause-snapshot or resume-snapshot, data Debezium's data object (JSON), origin where it
	// came from ("api", "topic") and id its id ("" to have one made). It returns once the
	// signal is durable, with the status document. A request that cannot be applied as given
	// is a connect.Permanent error saying why.
	SnapshotSignal(ctx context.Context, origin, id, typ string, data []byte) ([]byte, error)
	// SnapshotStatus returns the status document (JSON): queue, progress, rates.
	SnapshotStatus() []byte
}

// PromptCommitter is an optional capability of a connect.Source: while CommitNow returns true
// the source task commits each appended batch's position at once, instead of waiting for
// offset.flush.interval.ms (a snapshot emits its next chunk only once the last one is
// acknowledged, so that a crash reads at most that one again). Called from the task's
// appender goroutine, concurrently with Read.
type PromptCommitter interface {
	CommitNow() bool
}

// ErrNoSnapshots is returned for a connector whose source has no incremental snapshots.
var ErrNoSnapshots = errors.New("the connector's source does not support incremental snapshots")

// SnapshotRequestError is a snapshot request the source refused as given.
type SnapshotRequestError struct{ Err error }

func (e *SnapshotRequestError) Error() string { return e.Err.Error() }
func (e *SnapshotRequestError) Unwrap() error { return e.Err }

// snapshotter returns the running source of a connector as a Snapshotter.
func (rt *Runtime) snapshotter(name string) (Snapshotter, error) {
	c, err := rt.get(name)
	if err != nil {
		return nil, err
	}
	chk := c.checked()
	if chk.Plugin.Kind != connect.KindSource {
		return nil, fmt.Errorf("connector %s is a %s: %w", name, chk.Plugin.Kind, ErrNoSnapshots)
	}
	c.mu.Lock()
	inst, task := c.instance, c.task
	c.mu.Unlock()
	if inst == nil {
		if task == StateRunning || task == StatePaused {
			return nil, fmt.Errorf("connector %s is starting (retry in a moment): %w", name, ErrNotRunning)
		}
		return nil, fmt.Errorf("connector %s is %s: %w", name, task, ErrNotRunning)
	}
	sn, ok := inst.(Snapshotter)
	if !ok {
		return nil, fmt.Errorf("connector %s (%s): %w", name, chk.Plugin.Name, ErrNoSnapshots)
	}
	return sn, nil
}

// SnapshotSignal applies a snapshot signal to a connector's running source (see
// Snapshotter). A request the source refuses is a *SnapshotRequestError.
func (rt *Runtime) SnapshotSignal(ctx context.Context, name, typ string, data []byte) ([]byte, error) {
	sn, err := rt.snapshotter(name)
	if err != nil {
		return nil, err
	}
	out, err := sn.SnapshotSignal(ctx, "api", "", typ, data)
	if err != nil {
		if connect.IsPermanent(err) {
			return nil, &SnapshotRequestError{Err: err}
		}
		return nil, fmt.Errorf("connector %s: %w", name, err)
	}
	return out, nil
}

// SnapshotStatus returns the snapshot status document of a connector's running source.
func (rt *Runtime) SnapshotStatus(name string) ([]byte, error) {
	sn, err := rt.snapshotter(name)
	if err != nil {
		return nil, err
	}
	return sn.SnapshotStatus(), nil
}

// Keys of the signal topic (Debezium's names; the topic is one of sluice's log).
const (
	KeySignalChannels   = "signal.enabled.channels"
	KeySignalTopic      = "signal.kafka.topic"
	KeySignalGroup      = "signal.kafka.groupId"
	KeySignalPollMillis = "signal.kafka.poll.timeout.ms"
)

// signalTopic returns the signal topic of a source connector and its consumer group, or ""
// when the kafka signal channel is off.
func signalTopic(c *connector) (topic, group string) {
	raw := c.Config.Raw()
	on := false
	for _, ch := range connect.SplitList(raw[KeySignalChannels]) {
		if strings.EqualFold(ch, "kafka") {
			on = true
		}
	}
	if !on {
		return "", ""
	}
	topic = c.Config.String(KeySignalTopic)
	if topic == "" {
		topic = raw["topic.prefix"] + "-signal"
	}
	group = c.Config.String(KeySignalGroup)
	if group == "" {
		group = "sluice-signal-" + c.Name
	}
	return topic, group
}

// readSignals reads the signal topic and applies each signal to the source: records whose
// key is the connector's topic.prefix (Debezium's rule) and whose value is
// {"type": "...", "data": {...}} (with an optional "id"). The group's offset is committed
// after each fetched batch was applied, so that a crash applies a signal at most once more;
// the source keeps applied commands in its position, and a replayed execute-snapshot of a
// table already queued is ignored. It returns when ctx ends.
func (t *sourceTask) readSignals(ctx context.Context, sn Snapshotter, topic, group string) error {
	c := t.c
	if _, err := c.rt.topics.partitions(topic, TopicSpec{Partitions: 1}); err != nil {
		return fmt.Errorf("signal topic %s: %w", topic, err)
	}
	prefix := c.Config.Raw()["topic.prefix"]
	wait := c.Config.Millis(KeySignalPollMillis)
	if wait <= 0 {
		wait = time.Second
	}
	log := c.rt.opts.Log
	info, err := log.Describe(topic)
	if err != nil {
		return fmt.Errorf("signal topic %s: %w", topic, err)
	}
	committed, err := log.FetchOffsets(group)
	if err != nil {
		return fmt.Errorf("signal topic %s: offsets of %s: %w", topic, group, err)
	}
	next := map[int32]int64{}
	for _, p := range info.Partitions {
		off, ok := committed[TopicPartition{Topic: topic, Partition: p.Partition}]
		if !ok || off < p.LogStartOffset {
			off = p.LogStartOffset
		}
		next[p.Partition] = off
	}
	c.logger.Info("reading signals", "topic", topic, "group", group)
	for {
		if ctx.Err() != nil {
			return nil
		}
		for part, off := range next {
			res, err := log.Fetch(ctx, topic, part, off, FetchOptions{MaxBytes: 1 << 20, MaxWait: wait / time.Duration(len(next))})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				var oor *wal.OffsetOutOfRangeError
				if errors.As(err, &oor) {
					start, _ := log.EarliestOffset(topic, part)
					next[part] = start
					continue
				}
				return fmt.Errorf("read signal topic %s: %w", topic, err)
			}
			if len(res.Records) == 0 {
				continue
			}
			for _, r := range res.Records {
				if r.Offset < off {
					continue
				}
				if err := applySignal(ctx, c, sn, prefix, part, r); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
			}
			next[part] = res.NextOffset
			if err := log.CommitOffsets(ctx, group, map[TopicPartition]int64{{Topic: topic, Partition: part}: res.NextOffset}); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("commit signal offsets of %s: %w", group, err)
			}
		}
	}
}

// applySignal applies one record of the signal topic.
func applySignal(ctx context.Context, c *connector, sn Snapshotter, prefix string, part int32, r wal.Record) error {
	if string(r.Key) != prefix {
		c.logger.Debug("signal for another connector ignored", "key", string(r.Key), "offset", r.Offset)
		return nil
	}
	var v struct {
		ID   string          `json:"id"`
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.Value, &v); err != nil || v.Type == "" {
		c.logger.Warn("signal ignored: its value is not {\"type\": ..., \"data\": {...}}", "offset", r.Offset, "err", err)
		return nil
	}
	if v.ID == "" {
		v.ID = fmt.Sprintf("topic-%d-%d", part, r.Offset)
	}
	_, err := sn.SnapshotSignal(ctx, "topic", v.ID, v.Type, v.Data)
	switch {
	case err == nil:
		c.logger.Info("signal applied", "id", v.ID, "type", v.Type, "origin", "topic")
	case connect.IsPermanent(err):
		c.logger.Warn("signal ignored", "id", v.ID, "type", v.Type, "err", err)
	default:
		return fmt.Errorf("apply signal %s: %w", v.ID, err)
	}
	return nil
}
