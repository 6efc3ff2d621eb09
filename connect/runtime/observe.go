package runtime

import (
	"sort"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// Observer receives measurements from running tasks, for metrics. Its methods are called from
// the tasks' goroutines, concurrently, and must return quickly.
type Observer interface {
	// SinkBatch is called after each Write of a sink task with the records written, how long
	// the Write took and its error (nil, a *connect.WriteError or a failure).
	SinkBatch(connector string, records int, took time.Duration, err error)
}

// broadcast wakes everyone waiting for progress; signal is cheap when no one waits.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// changed returns a channel closed at the next signal.
func (b *broadcast) changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) signal() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// setLive records the running task's plugin instance (nil when the task ends), its producer
// and the position it starts from.
func (c *connector) setLive(instance any, producerID int64, from connect.Position) {
	c.mu.Lock()
	c.instance, c.producerID, c.appended = instance, producerID, from
	c.mu.Unlock()
}

// setAppended records the end position of the newest appended batch.
func (c *connector) setAppended(pos connect.Position) {
	c.mu.Lock()
	c.appended = pos
	c.mu.Unlock()
}

// useTopic records that the connector uses a topic (Kafka Connect's active topics).
func (c *connector) useTopic(topic string) {
	c.mu.Lock()
	if c.active == nil {
		c.active = map[string]bool{}
	}
	c.active[topic] = true
	c.mu.Unlock()
}

// Instance returns the plugin instance of a connector's running task (a connect.Source or
// connect.Sink), or nil when no task runs. Callers may discover optional capabilities on it
// by type assertion, e.g. a Stats method; they must not call the Source or Sink methods.
func (rt *Runtime) Instance(name string) (any, error) {
	c, err := rt.get(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.instance, nil
}

// ActiveTopics returns the topics a connector has used (a source appended to, a sink was
// assigned) since it was added or since ResetActiveTopics, sorted.
func (rt *Runtime) ActiveTopics(name string) ([]string, error) {
	c, err := rt.get(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.active))
	for t := range c.active {
		out = append(out, t)
	}
	sort.Strings(out)
	return out, nil
}

// ResetActiveTopics empties the set of a connector's active topics; a running task adds the
// topics it keeps using.
func (rt *Runtime) ResetActiveTopics(name string) error {
	c, err := rt.get(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.active = nil
	c.mu.Unlock()
	return nil
}

// Kind returns a connector's kind (KindSource or KindSink).
func (rt *Runtime) Kind(name string) (connect.Kind, error) {
	c, err := rt.get(name)
	if err != nil {
		return "", err
	}
	return c.checked().Plugin.Kind, nil
}

// Plugin returns a connector's plugin.
func (rt *Runtime) Plugin(name string) (connect.Plugin, error) {
	c, err := rt.get(name)
	if err != nil {
		return connect.Plugin{}, err
	}
	return c.checked().Plugin, nil
}

// checked returns the connector's validated configuration; Put replaces it, so callers outside
// the task read it through here.
func (c *connector) checked() Checked {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Checked
}

// Registry returns the runtime's plugin registry.
func (rt *Runtime) Registry() *connect.Registry { return rt.opts.Registry }

// Log returns the runtime's log.
func (rt *Runtime) Log() Log { return rt.opts.Log }
