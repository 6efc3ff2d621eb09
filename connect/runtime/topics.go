package runtime

import (
	"errors"
	"fmt"
	"maps"
	"sync"
)

// Internal topics. Users' topics must not start with "__sluice".
const (
	// SourceOffsetsTopic holds each source connector's committed position: key the connector
	// name, value the encoded connect.Position (compacted).
	SourceOffsetsTopic = "__sluice_source_offsets"
	// StoreTopicPrefix + connector name is the topic of a connector's connect.Store.
	StoreTopicPrefix = "__sluice_store."
)

// topics creates topics on first use and caches partition counts (fixed at creation).
type topics struct {
	log      Log
	defaults TopicSpec

	mu      sync.Mutex
	parts   map[string]int32
	changed chan struct{} // closed and replaced when this runtime creates a topic
}

func newTopics(log Log, defaults TopicSpec) *topics {
	return &topics{log: log, defaults: defaults, parts: map[string]int32{}, changed: make(chan struct{})}
}

// partitions returns the partition count of name, creating the topic with spec (over the
// defaults; Partitions <= 0 takes the default count) if it does not exist.
func (t *topics) partitions(name string, spec TopicSpec) (int32, error) {
	t.mu.Lock()
	n, ok := t.parts[name]
	t.mu.Unlock()
	if ok {
		return n, nil
	}
	n, err := t.log.Partitions(name)
	if errors.Is(err, ErrUnknownTopic) {
		full := TopicSpec{Partitions: t.defaults.Partitions, Config: maps.Clone(t.defaults.Config)}
		if spec.Partitions > 0 {
			full.Partitions = spec.Partitions
		}
		if full.Partitions <= 0 {
			full.Partitions = 1
		}
		if len(spec.Config) > 0 && full.Config == nil {
			full.Config = map[string]string{}
		}
		maps.Copy(full.Config, spec.Config)
		switch err = t.log.CreateTopic(name, full); {
		case err == nil:
			t.mu.Lock()
			close(t.changed)
			t.changed = make(chan struct{})
			t.mu.Unlock()
		case !errors.Is(err, ErrTopicExists):
			return 0, fmt.Errorf("create topic %s: %w", name, err)
		}
		n, err = t.log.Partitions(name)
	}
	if err != nil {
		return 0, fmt.Errorf("topic %s: %w", name, err)
	}
	t.mu.Lock()
	t.parts[name] = n
	t.mu.Unlock()
	return n, nil
}

// changes returns a channel closed when this runtime next creates a topic.
func (t *topics) changes() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}
