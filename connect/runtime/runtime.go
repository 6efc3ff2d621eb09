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
	// defaults). Zero apart from Partitions means wal.DefaultTopicConfig() with that count;
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
			opts.TopicDefaults = wal.DefaultTopicConfig()
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
		opts:   opts,
		logger: opts.Logger,
		topics: newTopics(opts.Log, opts.TopicDefaults),
		conns:  map[string]*connector{},
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
// *ConfigError lists every problem.
func (rt *Runtime) Add(spec ConnectorSpec) error {
	chk, errs := rt.Check(spec.Name, spec.Class, spec.Config)
	if len(errs) > 0 {
		return &ConfigError{Connector: spec.Name, Errors: errs}
	}
	// What status and API output show: the configuration as written, placeholders kept and
	// secrets written inline redacted.
	display := map[string]string{}
	shown := spec.Display
	if shown == nil {
		shown = spec.Config
	}
	for k, v := range shown {
		if chk.Config.Def().IsSecret(k) && !strings.Contains(v, "${") {
			v = connect.Redacted
		}
		display[k] = v
	}
	c := &connector{
		rt:      rt,
		Checked: chk,
		display: display,
		logger:  rt.logger.With("connector", spec.Name, "task", 0),
		target:  StateRunning,
		task:    StateUnassigned,
		gate:    newGate(),
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.conns[spec.Name]; ok {
		return fmt.Errorf("add connector %s: %w", spec.Name, ErrConnectorExists)
	}
	rt.conns[spec.Name] = c
	if rt.run != nil {
		c.start(rt.run)
	}
	return nil
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
	defer c.mu.Unlock()
	if c.target == StateStopped {
		return nil
	}
	c.target = StatePaused
	c.gate.set(true)
	if c.task == StateRunning {
		c.task = StatePaused
	}
	c.logger.Info("connector paused")
	return nil
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
	defer c.mu.Unlock()
	prev := c.target
	c.target = StateRunning
	c.gate.set(false)
	if c.task == StatePaused {
		c.task = StateRunning
	}
	if prev == StateStopped && rs != nil && c.done == nil {
		c.startLocked(rs)
	}
	c.logger.Info("connector resumed")
	return nil
}

// Stop shuts a connector's task down gracefully and keeps it STOPPED until Resume or
// Restart. It returns when the task has stopped or ctx is done.
func (rt *Runtime) Stop(ctx context.Context, name string) error {
	c, err := rt.get(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.target = StateStopped
	c.mu.Unlock()
	if err := c.halt(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	c.task = StateStopped
	c.trace = ""
	c.mu.Unlock()
	c.logger.Info("connector stopped")
	return nil
}

// Restart stops the connector's task and starts it again (the connector keeps a PAUSED
// target). With onlyFailed it restarts only a FAILED task. A stopped connector stays stopped
// unless it was FAILED.
func (rt *Runtime) Restart(ctx context.Context, name string, onlyFailed bool) error {
	c, err := rt.get(name)
	if err != nil {
		return err
	}
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
	defer c.mu.Unlock()
	if c.target == StateStopped {
		c.target = StateRunning
	}
	c.trace = ""
	if rs != nil && c.done == nil {
		c.startLocked(rs)
	} else {
		c.task = StateUnassigned
	}
	c.logger.Info("connector restarted")
	return nil
}

// Delete stops a connector and removes it.
func (rt *Runtime) Delete(ctx context.Context, name string) error {
	c, err := rt.get(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.target = StateStopped
	c.mu.Unlock()
	if err := c.halt(ctx); err != nil {
		return err
	}
	rt.mu.Lock()
	delete(rt.conns, name)
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
	return c.Plugin.Class(), maps.Clone(c.display), nil
}

// SourceOffset returns the position a source connector last committed to the log (the zero
// Position if none).
func (rt *Runtime) SourceOffset(ctx context.Context, name string) (connect.Position, error) {
	c, err := rt.get(name)
	if err != nil {
		return connect.Position{}, err
	}
	if c.Plugin.Kind != connect.KindSource {
		return connect.Position{}, fmt.Errorf("connector %s is a sink", name)
	}
	return committedPosition(ctx, rt.opts.Log, name, nil)
}

// connector is one configured connector and its supervisor.
type connector struct {
	rt *Runtime
	Checked
	display map[string]string
	logger  *slog.Logger
	gate    *gate

	mu     sync.Mutex
	target State // what the user asked: RUNNING, PAUSED or STOPPED
	task   State
	trace  string
	cancel context.CancelFunc // stops the supervisor; nil when none runs
	done   chan struct{}      // closed when the supervisor has exited

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
	mu     sync.Mutex
	paused bool
	open   chan struct{} // closed while not paused
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
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
	} else {
		close(g.open)
	}
}

// wait returns once the gate is open, or ctx's error.
func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
