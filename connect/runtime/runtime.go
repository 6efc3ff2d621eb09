package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// State is a connector's or a task's state, with Kafka Connect's names.
type State string

const (
	StateUnassigned State = "UNASSIGNED" // added, not started (the runtime is not running)
	StateRunning    State = "RUNNING"
	StatePaused     State = "PAUSED"     // running, but neither reading nor writing
	StateStopped    State = "STOPPED"    // shut down on request; its configuration is kept
	StateFailed     State = "FAILED"     // failed permanently (or out of retries); see Trace
	StateRestarting State = "RESTARTING" // failed retriably, waiting to be restarted
)

// DefaultTopicConfig is the configuration of the topics sluice creates unless told
// otherwise: Kafka's topic defaults, with batches compressed by snappy (change events
// are verbose JSON whose field names repeat in every record: snappy stores them in a
// fifth to a tenth of the bytes for little CPU, and the log's fsyncs shrink with them).
func DefaultTopicConfig() wal.TopicConfig {
	c := wal.DefaultTopicConfig()
	c.Compression = wal.Snappy
	return c
}

// Options configure a Runtime.
type Options struct {
	// Log is where records, positions and consumer offsets are kept. Required.
	Log Log
	// Registry resolves connector classes. Required.
	Registry *connect.Registry
	// Chain builds transform chains; nil rejects connectors that configure transforms.
	Chain ChainBuilder
	// Logger receives lifecycle logs; nil discards them.
	Logger *slog.Logger
	// WorkerID is shown in statuses (Kafka Connect's worker_id); default "sluice".
	WorkerID string
	// TopicDefaults is the configuration of topics created on first use (the log's
	// defaults). Zero apart from Partitions means DefaultTopicConfig() with that count;
	// Partitions <= 0 means 1.
	TopicDefaults wal.TopicConfig
	// InitialBackoff is the first wait before restarting a failed task (default 1s); it
	// doubles up to the connector's errors.retry.delay.max.ms.
	InitialBackoff time.Duration
	// ShutdownTimeout bounds the graceful stop of Run before in-flight work is abandoned
	// (default 30s).
	ShutdownTimeout time.Duration
	// TopicRefresh is how often sinks look for new topics to consume (default 5s); topics
	// this runtime creates are picked up at once.
	TopicRefresh time.Duration
	// FetchWait is how long a sink's fetch waits at the end of a partition (default 1s).
	FetchWait time.Duration
	// FetchBytes bounds one fetch of one partition (default 256 KiB).
	FetchBytes int
	// SinkLinger is how long a sink waits for more records when it has fewer than
	// consumer.override.max.poll.records (default 5ms; negative: not at all).
	SinkLinger time.Duration
	// Resolve substitutes the placeholders (${env:...}, ${file:...}) of a configuration that
	// Restore reads back from the log or that the API submits; nil leaves values as they are.
	// Its errors name the key and the placeholder, never a value.
	Resolve func(config map[string]string) (map[string]string, []connect.FieldError)
	// Observer receives per-batch measurements (for metrics); nil: none.
	Observer Observer
}

// Runtime runs connectors as supervised tasks. Build it with New, add connectors, then Run.
// Its methods may be called concurrently, also while Run runs.
type Runtime struct {
	opts   Options
	logger *slog.Logger
	topics *topics

	mu    sync.Mutex
	conns map[string]*connector
	run   *runState // nil while Run is not running
	// store is where connector states are kept once Restore ran; nil before (nothing is stored).
	store *configStore
	// generations of connectors deleted (or not restored), so that a connector created again
	// under the name continues them.
	generations map[string]int64

	progress broadcast // signalled when a source appends or a sink commits
}

type runState struct {
	stop  context.Context // cancelled when the graceful stop begins
	force context.Context // cancelled when in-flight work must be abandoned; parent of stop
	abort context.CancelFunc
	wg    sync.WaitGroup
}

// New checks opts and returns a runtime with no connectors. It starts nothing.
func New(opts Options) (*Runtime, error) {
	if opts.Log == nil {
		return nil, errors.New("runtime: Options.Log is required")
	}
	if opts.Registry == nil {
		return nil, errors.New("runtime: Options.Registry is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.WorkerID == "" {
		opts.WorkerID = "sluice"
	}
	if rest := opts.TopicDefaults; true {
		rest.Partitions = 0
		if rest == (wal.TopicConfig{}) {
			parts := opts.TopicDefaults.Partitions
			opts.TopicDefaults = DefaultTopicConfig()
			opts.TopicDefaults.Partitions = parts
		}
	}
	if opts.TopicDefaults.Partitions <= 0 {
		opts.TopicDefaults.Partitions = 1
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = time.Second
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.TopicRefresh <= 0 {
		opts.TopicRefresh = 5 * time.Second
	}
	if opts.FetchWait <= 0 {
		opts.FetchWait = time.Second
	}
	if opts.FetchBytes <= 0 {
		opts.FetchBytes = 256 << 10
	}
	if opts.SinkLinger == 0 {
		opts.SinkLinger = 5 * time.Millisecond
	}
	return &Runtime{
		opts:        opts,
		logger:      opts.Logger,
		topics:      newTopics(opts.Log, opts.TopicDefaults),
		conns:       map[string]*connector{},
		generations: map[string]int64{},
	}, nil
}

// Check validates a connector configuration against this runtime's registry and transforms;
// see the package function Check.
func (rt *Runtime) Check(name, class string, config map[string]string) (Checked, []connect.FieldError) {
	return Check(rt.opts.Registry, rt.opts.Chain, name, class, config)
}

// ConnectorSpec is a connector to run.
type ConnectorSpec struct {
	Name  string
	Class string
	// Config holds the resolved values (placeholders substituted).
	Config map[string]string
	// Display is the configuration as written, placeholders unresolved, for status and API
	// output; nil shows Config with secret values redacted.
	Display map[string]string
	// Origin is OriginFile (the default) for a connector of a pipeline file, or OriginAPI.
	Origin string
	// Source names where a file connector is defined (the file), for messages.
	Source string
	// State is the initial target state: RUNNING (the default), PAUSED or STOPPED.
	State State
}

// ConfigError is a connector configuration that failed validation.
type ConfigError struct {
	Connector string
	Errors    []connect.FieldError
}

func (e *ConfigError) Error() string {
	s := fmt.Sprintf("connector %s: invalid configuration", e.Connector)
	for _, fe := range e.Errors {
		s += "\n  " + fe.Error()
	}
	return s
}

// ErrUnknownConnector is returned for a connector name the runtime does not have.
var ErrUnknownConnector = errors.New("unknown connector")

// ErrConnectorExists is returned by Add for a name already in use.
var ErrConnectorExists = errors.New("connector already exists")

// Add validates spec and adds the connector; it starts at once if Run is running. A
// *ConfigError lists every problem. Nothing is stored in the log (see Create).
func (rt *Runtime) Add(spec ConnectorSpec) error {
	c, err := rt.newConnector(spec)
	if err != nil {
		return err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.conns[spec.Name]; ok {
		return fmt.Errorf("add connector %s: %w", spec.Name, ErrConnectorExists)
	}
	c.generation = rt.generations[spec.Name]
	rt.conns[spec.Name] = c
	if rt.run != nil && c.target != StateStopped {
		c.start(rt.run)
	}
	return nil
}

// newConnector validates spec and builds its connector, not yet added.
func (rt *Runtime) newConnector(spec ConnectorSpec) (*connector, error) {
	chk, errs := rt.Check(spec.Name, spec.Class, spec.Config)
	if len(errs) > 0 {
		return nil, &ConfigError{Connector: spec.Name, Errors: errs}
	}
	switch spec.State {
	case "":
		spec.State = StateRunning
	case StateRunning, StatePaused, StateStopped:
	default:
		return nil, &ConfigError{Connector: spec.Name, Errors: []connect.FieldError{{Key: "initial_state", Message: fmt.Sprintf("must be RUNNING, PAUSED or STOPPED (got %q)", spec.State)}}}
	}
	if spec.Origin == "" {
		spec.Origin = OriginFile
	}
	shown := spec.Display
	if shown == nil {
		shown = spec.Config
	}
	c := &connector{
		rt:      rt,
		Checked: chk,
		class:   spec.Class,
		display: displayConfig(chk.Config.Def(), shown),
		written: maps.Clone(shown),
		origin:  spec.Origin,
		source:  spec.Source,
		logger:  rt.logger.With("connector", spec.Name, "task", 0),
		target:  spec.State,
		task:    StateUnassigned,
		gate:    newGate(),
		hold:    newGate(),
	}
	c.gate.set(spec.State == StatePaused)
	if spec.State == StateStopped {
		c.task = StateStopped
	}
	return c, nil
}

// IsPlaceholder reports whether a configuration value holds an ${env:...} or ${file:...}
// placeholder: such a value is shown as written, since it reveals nothing.
func IsPlaceholder(v string) bool {
	return strings.Contains(v, "${env:") || strings.Contains(v, "${file:")
}

// displayConfig is what status and API output show of a configuration as written:
// placeholders kept, secret values written inline redacted.
func displayConfig(def connect.ConfigDef, written map[string]string) map[string]string {
	display := make(map[string]string, len(written))
	for k, v := range written {
		if def.IsSecret(k) && !IsPlaceholder(v) {
			v = connect.Redacted
		}
		display[k] = v
	}
	return display
}

// Run starts every connector and supervises them until ctx is cancelled, then stops them
// gracefully: sources stop reading, in-flight batches are appended and their positions
// committed and acknowledged, sinks finish their current write and commit its offsets. After
// Options.ShutdownTimeout, or at Abort, in-flight work is abandoned (which is safe: what was
// not committed is redone). Run returns once every task has stopped.
func (rt *Runtime) Run(ctx context.Context) error {
	force, abort := context.WithCancel(context.WithoutCancel(ctx))
	stop, cancelStop := context.WithCancel(force)
	rs := &runState{stop: stop, force: force, abort: abort}
	rt.mu.Lock()
	if rt.run != nil {
		rt.mu.Unlock()
		cancelStop()
		abort()
		return errors.New("runtime: Run is already running")
	}
	rt.run = rs
	for _, name := range rt.namesLocked() {
		if c := rt.conns[name]; c.targetState() != StateStopped {
			c.start(rs)
		}
	}
	rt.mu.Unlock()
	rt.logger.Info("runtime started", "connectors", len(rt.Names()))

	<-ctx.Done()
	rt.logger.Info("runtime stopping", "timeout", rt.opts.ShutdownTimeout)
	cancelStop()
	timer := time.AfterFunc(rt.opts.ShutdownTimeout, func() {
		rt.logger.Warn("graceful stop timed out; abandoning in-flight work", "timeout", rt.opts.ShutdownTimeout)
		abort()
	})
	rs.wg.Wait()
	timer.Stop()
	abort()
	rt.mu.Lock()
	rt.run = nil
	for _, c := range rt.conns {
		c.stopped()
	}
	rt.mu.Unlock()
	rt.logger.Info("runtime stopped")
	return nil
}

// Abort abandons in-flight work of a Run that is stopping (the second SIGTERM).
func (rt *Runtime) Abort() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.run != nil {
		rt.run.abort()
	}
}

// Names returns the connectors' names, sorted.
func (rt *Runtime) Names() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.namesLocked()
}

func (rt *Runtime) namesLocked() []string {
	out := make([]string, 0, len(rt.conns))
	for n := range rt.conns {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (rt *Runtime) get(name string) (*connector, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c, ok := rt.conns[name]
	if !ok {
		return nil, fmt.Errorf("connector %s: %w", name, ErrUnknownConnector)
	}
	return c, nil
}

// Pause stops a connector's task from reading and writing without shutting it down; the
// in-flight batch completes first.
func (rt *Runtime) Pause(name string) error {
	c, err := rt.get(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.target == StateStopped {
		c.mu.Unlock()
		return nil
	}
	c.target = StatePaused
	c.gate.set(true)
	if c.task == StateRunning {
		c.task = StatePaused
	}
	c.mu.Unlock()
	c.logger.Info("connector paused")
	return rt.persistSoon(c)
}

// Resume undoes Pause, and starts a stopped connector again.
func (rt *Runtime) Resume(name string) error {
	c, err := rt.get(name)
	if err != nil {
		return err
	}
	rt.mu.Lock()
	rs := rt.run
	rt.mu.Unlock()
	c.mu.Lock()
	prev := c.target
	c.target = StateRunning
	c.gate.set(false)
	if c.task == StatePaused {
		c.task = StateRunning
	}
	if prev == StateStopped {
		c.task = StateUnassigned
		if rs != nil && c.done == nil {
			c.startLocked(rs)
		}
	}
	c.mu.Unlock()
	c.logger.Info("connector resumed")
	if prev == StateRunning {
		return nil
	}
	return rt.persistSoon(c)
}

// Stop shuts a connector's task down gracefully and keeps it STOPPED until Resume or
// Restart. It returns when the task has stopped or ctx is done.
func (rt *Runtime) Stop(ctx context.Context, name string) error {
	c, err := rt.get(name)
	if err != nil {
		return err
	}
	c.ops.Lock()
	defer c.ops.Unlock()
	c.mu.Lock()
	c.target = StateStopped
	c.gate.set(false)
	c.mu.Unlock()
	if err := c.halt(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	c.task = StateStopped
	c.trace = ""
	c.mu.Unlock()
	c.logger.Info("connector stopped")
	return rt.persist(ctx, c)
}

// Restart stops the connector's task and starts it again (the connector keeps a PAUSED
// target). With onlyFailed it restarts only a FAILED task. A stopped connector stays stopped
// unless it was FAILED.
func (rt *Runtime) Restart(ctx context.Context, name string, onlyFailed bool) error {
	c, err := rt.get(name)
	if err != nil {
		return err
	}
	c.ops.Lock()
	defer c.ops.Unlock()
	c.mu.Lock()
	failed := c.task == StateFailed
	c.mu.Unlock()
	if onlyFailed && !failed {
		return nil
	}
	if err := c.halt(ctx); err != nil {
		return err
	}
	rt.mu.Lock()
	rs := rt.run
	rt.mu.Unlock()
	c.mu.Lock()
	wasStopped := c.target == StateStopped
	if wasStopped {
		c.target = StateRunning
	}
	c.trace = ""
	if rs != nil && c.done == nil {
		c.startLocked(rs)
	} else {
		c.task = StateUnassigned
	}
	c.mu.Unlock()
	c.logger.Info("connector restarted")
	if wasStopped {
		return rt.persist(ctx, c)
	}
	return nil
}

// Delete stops a connector and removes it.
func (rt *Runtime) Delete(ctx context.Context, name string) error {
	c, err := rt.get(name)
	if err != nil {
		return err
	}
	c.ops.Lock()
	defer c.ops.Unlock()
	c.mu.Lock()
	c.target = StateStopped
	c.gate.set(false)
	c.mu.Unlock()
	if err := c.halt(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	gen := c.generation
	c.mu.Unlock()
	if rt.store != nil {
		if err := rt.store.put(ctx, &storedConnector{Name: name, Deleted: true, Generation: gen}); err != nil {
			return err
		}
	}
	rt.mu.Lock()
	if rt.conns[name] == c {
		delete(rt.conns, name)
	}
	rt.generations[name] = gen
	rt.mu.Unlock()
	c.logger.Info("connector deleted")
	return nil
}

// InstanceStatus is the state of a connector or of one of its tasks.
type InstanceStatus struct {
	State    State
	WorkerID string
	// Trace explains a FAILED or RESTARTING state: the error, each wrapped error on its own
	// line, and what to do about it.
	Trace string
}

// Status is a connector's status, in the shape of Kafka Connect's GET /connectors/{name}/status.
type Status struct {
	Name      string
	Type      connect.Kind // source or sink
	Connector InstanceStatus
	Tasks     []TaskStatus
}

// TaskStatus is one task's status and counters.
type TaskStatus struct {
	ID int
	InstanceStatus
	// Restarts counts restarts after retriable failures.
	Restarts int64
	// Records counts the records appended (sources) or written (sinks).
	Records int64
	// Rejected counts records skipped under errors.tolerance=all.
	Rejected int64
	// Replayed counts records a restarted source re-emitted that the log already held.
	Replayed int64
}

// Status returns a connector's status.
func (rt *Runtime) Status(name string) (Status, error) {
	c, err := rt.get(name)
	if err != nil {
		return Status{}, err
	}
	return c.status(rt.opts.WorkerID), nil
}

// Config returns a connector's configuration as written (placeholders unresolved, secrets
// redacted) and its class.
func (rt *Runtime) Config(name string) (class string, config map[string]string, err error) {
	c, err := rt.get(name)
	if err != nil {
		return "", nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Plugin.Name == "" {
		return c.class, maps.Clone(c.display), nil
	}
	return c.Plugin.Class(), maps.Clone(c.display), nil
}

// SourceOffset returns the position a source connector last committed to the log (the zero
// Position if none).
func (rt *Runtime) SourceOffset(ctx context.Context, name string) (connect.Position, error) {
	c, err := rt.get(name)
	if err != nil {
		return connect.Position{}, err
	}
	if c.checked().Plugin.Kind != connect.KindSource {
		return connect.Position{}, fmt.Errorf("connector %s is a sink", name)
	}
	return committedPosition(ctx, rt.opts.Log, name, nil)
}

// connector is one configured connector and its supervisor.
type connector struct {
	rt *Runtime
	Checked
	class   string            // as given in the spec (it may be empty: connector.class then)
	display map[string]string // as written, secrets written inline redacted
	written map[string]string // as written (stored in the log for API connectors)
	origin  string            // OriginFile or OriginAPI
	source  string            // the file of a file connector
	broken  error             // a stored connector that cannot be restored: its task fails at once
	logger  *slog.Logger
	gate    *gate // closed while the user paused the connector
	hold    *gate // closed while a rebuild holds the sink between batches

	ops sync.Mutex // serializes management operations (restart, stop, update, offsets, rebuild)

	mu         sync.Mutex
	target     State // what the user asked: RUNNING, PAUSED or STOPPED
	task       State
	trace      string
	cancel     context.CancelFunc // stops the supervisor; nil when none runs
	done       chan struct{}      // closed when the supervisor has exited
	generation int64              // offsets generation of a source (see producerName)
	instance   any                // the running task's plugin instance; nil when none
	producerID int64              // of the running source task; 0 when none
	appended   connect.Position   // source: end position of the newest batch appended since the task started
	active     map[string]bool    // topics the connector used since it was added or reset
	rebuild    *RebuildStatus     // the newest rebuild of a sink; nil if none

	restarts, records, rejected, replayed, progress atomic.Int64
}

func (c *connector) targetState() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.target
}

func (c *connector) start(rs *runState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startLocked(rs)
}

func (c *connector) startLocked(rs *runState) {
	ctx, cancel := context.WithCancel(rs.stop)
	done := make(chan struct{})
	c.cancel, c.done = cancel, done
	if c.target == StatePaused {
		c.task = StatePaused
	} else {
		c.task = StateRunning
	}
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		defer close(done)
		c.supervise(ctx, rs.force)
	}()
}

// halt stops the supervisor, if one runs, and waits for it.
func (c *connector) halt(ctx context.Context) error {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("stop connector %s: %w", c.Name, ctx.Err())
	}
	c.mu.Lock()
	if c.done == done {
		c.cancel, c.done = nil, nil
	}
	c.mu.Unlock()
	return nil
}

// stopped records that Run ended.
func (c *connector) stopped() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancel, c.done = nil, nil
	if c.task != StateFailed && c.task != StateStopped {
		c.task = StateUnassigned
	}
}

func (c *connector) setTask(s State, trace string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == StateRunning && c.target == StatePaused {
		s = StatePaused
	}
	c.task, c.trace = s, trace
}

func (c *connector) status(worker string) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := InstanceStatus{State: StateRunning, WorkerID: worker}
	switch {
	case c.task == StateFailed:
		cs.State = StateRunning // the connector runs; its task failed (as Kafka Connect shows it)
	case c.target == StatePaused:
		cs.State = StatePaused
	case c.target == StateStopped:
		cs.State = StateStopped
	case c.task == StateUnassigned:
		cs.State = StateUnassigned
	}
	st := Status{Name: c.Name, Type: c.Plugin.Kind, Connector: cs}
	if cs.State != StateStopped {
		st.Tasks = []TaskStatus{{
			ID:             0,
			InstanceStatus: InstanceStatus{State: c.task, WorkerID: worker, Trace: c.trace},
			Restarts:       c.restarts.Load(),
			Records:        c.records.Load(),
			Rejected:       c.rejected.Load(),
			Replayed:       c.replayed.Load(),
		}}
	}
	return st
}

// supervise runs the task until ctx is cancelled or it fails permanently, restarting it after
// retriable errors with exponential backoff.
func (c *connector) supervise(ctx, force context.Context) {
	if c.broken != nil {
		c.fail(c.broken, "fix the configuration with PUT /connectors/"+c.Name+"/config, or delete the connector")
		return
	}
	initial := c.rt.opts.InitialBackoff
	maxDelay := c.Config.Millis(KeyRetryDelayMax)
	timeout := c.Config.Int(KeyRetryTimeout)
	backoff := initial
	var failingSince time.Time
	for {
		before := c.progress.Load()
		c.setTask(StateRunning, "")
		c.logger.Info("task starting", "class", c.Plugin.Name)
		err := c.runTask(ctx, force)
		if ctx.Err() != nil {
			if err != nil && !errors.Is(err, context.Canceled) {
				c.logger.Warn("task stopped with an error", "err", err)
			} else {
				c.logger.Info("task stopped")
			}
			return
		}
		if err == nil {
			err = errors.New("task returned without being stopped")
		}
		if c.progress.Load() != before {
			backoff, failingSince = initial, time.Time{}
		}
		now := time.Now()
		if failingSince.IsZero() {
			failingSince = now
		}
		if connect.IsPermanent(err) {
			c.fail(err, "fix the cause, then restart the connector (POST /connectors/"+c.Name+"/restart, or restart sluice)")
			return
		}
		if timeout >= 0 && now.Sub(failingSince) >= time.Duration(timeout)*time.Millisecond {
			c.fail(err, fmt.Sprintf("the task kept failing for %v without progress (errors.retry.timeout=%d); fix the cause, then restart the connector", now.Sub(failingSince).Round(time.Millisecond), timeout))
			return
		}
		n := c.restarts.Add(1)
		c.logger.Warn("task failed; restarting", "err", err, "backoff", backoff, "restarts", n)
		c.setTask(StateRestarting, errorChain(err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, max(maxDelay, initial))
	}
}

func (c *connector) fail(err error, fix string) {
	c.logger.Error("task failed", "err", err, "fix", fix)
	c.setTask(StateFailed, errorChain(err)+"\n"+fix)
}

func (c *connector) runTask(ctx, force context.Context) error {
	if c.broken != nil {
		return c.broken
	}
	switch c.Plugin.Kind {
	case connect.KindSource:
		return c.runSource(ctx, force)
	case connect.KindSink:
		return c.runSink(ctx, force)
	}
	return connect.Permanentf("connector class %s is a %s, not a source or sink", c.Plugin.Name, c.Plugin.Kind)
}

// gate holds a task between batches while its connector is paused.
type gate struct {
	mu      sync.Mutex
	paused  bool
	open    chan struct{} // closed while not paused
	closing chan struct{} // closed while paused
	parked  chan struct{} // closed once a task waits at the gate while paused
	isPark  bool          // parked is closed
}

func newGate() *gate {
	g := &gate{open: make(chan struct{}), closing: make(chan struct{}), parked: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) set(paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if paused == g.paused {
		return
	}
	g.paused = paused
	if paused {
		g.open = make(chan struct{})
		g.parked, g.isPark = make(chan struct{}), false
		close(g.closing)
	} else {
		close(g.open)
		g.closing = make(chan struct{})
	}
}

// closed returns a channel closed once the gate is closed (now, if it is): a task idle
// between batches selects on it to come back to the gate instead of taking more input.
func (g *gate) closed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closing
}

// wait returns once the gate is open, or ctx's error.
func (g *gate) wait(ctx context.Context) error { return g.waitParking(ctx, nil) }

// waitParking is wait that, when the gate is closed, first calls beforePark (if not nil) and
// only then counts the task as parked: what beforePark does happens before parkedAt's channel
// is closed.
func (g *gate) waitParking(ctx context.Context, beforePark func()) error {
	g.mu.Lock()
	if beforePark != nil && g.paused && !g.isPark {
		g.mu.Unlock()
		beforePark()
		g.mu.Lock()
	}
	open := g.open
	if g.paused && !g.isPark {
		close(g.parked)
		g.isPark = true
	}
	g.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// parkedAt returns a channel closed once a task waits at the closed gate, and whether the gate
// is closed at all.
func (g *gate) parkedAt() (<-chan struct{}, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.parked, g.paused
}
