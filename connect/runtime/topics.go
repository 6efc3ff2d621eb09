package runtime

import (
	"errors"
	"fmt"
	"sync"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
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
	defaults wal.TopicConfig // Partitions is the default count

	mu      sync.Mutex
	parts   map[string]int32
	changed chan struct{} // closed and replaced when this runtime creates a topic
}

func newTopics(log Log, defaults wal.TopicConfig) *topics {
	return &topics{log: log, defaults: defaults, parts: map[string]int32{}, changed: make(chan struct{})}
}

// partitions returns the partition count of name, creating the topic from spec over the
// defaults if it does not exist.
func (t *topics) partitions(name string, spec TopicSpec) (int32, error) {
	t.mu.Lock()
	n, ok := t.parts[name]
	t.mu.Unlock()
	if ok {
		return n, nil
	}
	info, err := t.log.Describe(name)
	if errors.Is(err, wal.ErrUnknownTopic) {
		cfg, perr := wal.ParseTopicConfig(t.defaults, spec.Config)
		if perr != nil {
			return 0, connect.Permanent(fmt.Errorf("topic settings of %s: %w", name, perr))
		}
		if spec.Partitions > 0 {
			cfg.Partitions = spec.Partitions
		}
		if cfg.Partitions <= 0 {
			cfg.Partitions = 1
		}
		switch err = t.log.CreateTopic(name, cfg); {
		case err == nil:
			t.mu.Lock()
			close(t.changed)
			t.changed = make(chan struct{})
			t.mu.Unlock()
		case !errors.Is(err, wal.ErrTopicExists):
			return 0, fmt.Errorf("create topic %s: %w", name, err)
		}
		info, err = t.log.Describe(name)
	}
	if err != nil {
		return 0, fmt.Errorf("topic %s: %w", name, err)
	}
	n = int32(len(info.Partitions))
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
