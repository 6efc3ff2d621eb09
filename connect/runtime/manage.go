package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// Durable connectors.
//
// Once Restore ran, every change of a connector's configuration, target state or offsets
// generation is stored in ConfigsTopic before the call that made it returns:
//
//   - Connectors created through the API (Create, Put) are stored whole and added again by
//     Restore at the next start, in the state they were left in.
//   - Connectors of pipeline files are declarative: the file is re-applied at every start, so
//     only their target state (paused, stopped) and offsets generation are stored. Their
//     configuration cannot be changed or deleted through the API (ErrDefinedInFile): edit
//     the file and restart. A file that newly defines a connector created through the API
//     takes it over: the file's configuration replaces the stored one.

// ErrDefinedInFile is returned when the API would change or delete a connector of a pipeline
// file.
var ErrDefinedInFile = errors.New("the connector is defined in a pipeline file")

// persistTimeout bounds the storing of a state change made by a call without a context.
const persistTimeout = 30 * time.Second

// stored returns the record that describes c now.
func (c *connector) stored() *storedConnector {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &storedConnector{Name: c.Name, Origin: c.origin, State: c.target, Generation: c.generation}
	if c.origin == OriginAPI {
		s.Class = c.class
		s.Config = maps.Clone(c.written)
	}
	return s
}

// persist stores c's state if the runtime stores states (after Restore).
func (rt *Runtime) persist(ctx context.Context, c *connector) error {
	if rt.store == nil {
		return nil
	}
	return rt.store.put(ctx, c.stored())
}

// persistSoon is persist for calls that take no context.
func (rt *Runtime) persistSoon(c *connector) error {
	ctx, cancel := context.WithTimeout(context.Background(), persistTimeout)
	defer cancel()
	return rt.persist(ctx, c)
}

// Restore applies the connector states stored in the log and from then on stores every change
// (see the comment at the top of manage.go): file connectors, which must be added before,
// take their stored target state and offsets generation; connectors created through the API
// are added again with their stored configuration, placeholders resolved by Options.Resolve.
// A stored connector that no longer validates is added in the FAILED state, its problems as
// the trace, so that it can be fixed (Put) or deleted. Call Restore once, before Run.
func (rt *Runtime) Restore(ctx context.Context) error {
	cs := &configStore{log: rt.opts.Log, topics: rt.topics}
	all, err := cs.load(ctx)
	if err != nil {
		return err
	}
	var takeover []*connector
	for _, s := range all {
		rt.mu.Lock()
		c, exists := rt.conns[s.Name]
		if s.Deleted && !exists {
			rt.generations[s.Name] = s.Generation
		}
		rt.mu.Unlock()
		switch {
		case exists:
			c.mu.Lock()
			c.generation = s.Generation
			if !s.Deleted && s.State != "" {
				c.target = s.State
				c.gate.set(s.State == StatePaused)
				if s.State == StateStopped {
					c.task = StateStopped
				}
			}
			c.mu.Unlock()
			if s.Origin == OriginAPI && c.origin == OriginFile {
				rt.logger.Warn("a pipeline file now defines a connector created through the API; the file's configuration replaces the stored one",
					"connector", s.Name, "file", c.source)
				takeover = append(takeover, c)
			}
		case s.Deleted || s.Origin == OriginFile:
			// A file connector no longer in the files: forgotten, but its generation is kept.
			rt.mu.Lock()
			rt.generations[s.Name] = s.Generation
			rt.mu.Unlock()
		default:
			c := rt.restoreAPI(s)
			rt.mu.Lock()
			rt.conns[s.Name] = c
			rt.mu.Unlock()
			if c.broken != nil {
				c.logger.Error("stored connector cannot be restored; it stays FAILED until its configuration is fixed (PUT /connectors/"+s.Name+"/config) or it is deleted", "err", c.broken)
			}
		}
	}
	rt.mu.Lock()
	rt.store = cs
	rt.mu.Unlock()
	for _, c := range takeover {
		if err := rt.persist(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// restoreAPI builds a stored API connector, or a broken one that fails at once.
func (rt *Runtime) restoreAPI(s storedConnector) *connector {
	spec := ConnectorSpec{Name: s.Name, Class: s.Class, Config: s.Config, Origin: OriginAPI, State: s.State}
	c, err := rt.build(spec)
	if err == nil {
		c.generation = s.Generation
		return c
	}
	p, _ := rt.opts.Registry.Lookup(classOf(s.Class, s.Config), connect.KindSource, connect.KindSink)
	def := DefFor(p)
	display := map[string]string{}
	for k, v := range s.Config {
		if p.Name == "" && k != KeyClass && k != KeyName && !IsPlaceholder(v) {
			v = connect.Redacted // without the plugin, any value may be a secret
		}
		display[k] = v
	}
	if p.Name != "" {
		display = displayConfig(def, s.Config)
	}
	target := s.State
	if target == "" {
		target = StateRunning
	}
	c = &connector{
		rt:         rt,
		Checked:    Checked{Name: s.Name, Plugin: p, Config: connect.NewConfig(def, map[string]string{})},
		class:      s.Class,
		display:    display,
		written:    maps.Clone(s.Config),
		origin:     OriginAPI,
		broken:     connect.Permanent(fmt.Errorf("stored configuration cannot be restored: %w", err)),
		logger:     rt.logger.With("connector", s.Name, "task", 0),
		target:     target,
		task:       StateUnassigned,
		gate:       newGate(),
		hold:       newGate(),
		generation: s.Generation,
	}
	if target == StateStopped {
		c.task = StateStopped
	}
	return c
}

func classOf(class string, config map[string]string) string {
	if class != "" {
		return class
	}
	return strings.TrimSpace(config[KeyClass])
}

// build resolves the placeholders of an API connector's configuration and validates it.
func (rt *Runtime) build(spec ConnectorSpec) (*connector, error) {
	written := spec.Config
	resolved := written
	if rt.opts.Resolve != nil {
		var errs []connect.FieldError
		resolved, errs = rt.opts.Resolve(written)
		if len(errs) > 0 {
			return nil, &ConfigError{Connector: spec.Name, Errors: errs}
		}
	}
	spec.Config, spec.Display = resolved, written
	c, err := rt.newConnector(spec)
	var ce *ConfigError
	if errors.As(err, &ce) {
		hidePlaceholders(ce.Errors, written, resolved)
	}
	return c, err
}

// hidePlaceholders keeps the resolved values of placeholders out of error messages (which are
// logged and returned by the API): "(got <value>)" shows the placeholder as written instead,
// and any other occurrence of a value of 4 bytes or more becomes "****".
func hidePlaceholders(errs []connect.FieldError, written, resolved map[string]string) {
	for k, w := range written {
		v := resolved[k]
		if !IsPlaceholder(w) || v == "" {
			continue
		}
		got := regexp.MustCompile(`\(got "?` + regexp.QuoteMeta(v) + `"?\)`)
		for i := range errs {
			msg := errs[i].Message
			if errs[i].Key == k {
				msg = got.ReplaceAllLiteralString(msg, "(got "+w+")")
			}
			if len(v) >= 4 {
				msg = strings.ReplaceAll(msg, v, connect.Redacted)
				if q := strconv.Quote(v); q[1:len(q)-1] != v {
					msg = strings.ReplaceAll(msg, q[1:len(q)-1], connect.Redacted)
				}
			}
			errs[i].Message = msg
		}
	}
}

// Create adds a connector defined through the API: spec.Config is the configuration as
// submitted (placeholders unresolved; Options.Resolve resolves them), spec.State its initial
// state. It is stored in the log (after Restore) before it starts. ErrConnectorExists if the
// name is taken; a *ConfigError lists every problem.
func (rt *Runtime) Create(ctx context.Context, spec ConnectorSpec) error {
	spec.Origin = OriginAPI
	c, err := rt.build(spec)
	if err != nil {
		return err
	}
	rt.mu.Lock()
	if _, ok := rt.conns[spec.Name]; ok {
		rt.mu.Unlock()
		return fmt.Errorf("create connector %s: %w", spec.Name, ErrConnectorExists)
	}
	c.generation = rt.generations[spec.Name]
	rt.conns[spec.Name] = c
	rt.mu.Unlock()
	if err := rt.persist(ctx, c); err != nil {
		rt.mu.Lock()
		delete(rt.conns, spec.Name)
		rt.mu.Unlock()
		return err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.run != nil && rt.conns[spec.Name] == c && c.targetState() != StateStopped {
		c.start(rt.run)
	}
	c.logger.Info("connector created", "class", c.Plugin.Name)
	return nil
}

// Put creates a connector through the API (created=true) or replaces the configuration of one
// created through the API: its task stops, the new configuration is stored, and the task starts
// again unless the connector is STOPPED; state, offsets and counters are kept. A connector of a
// pipeline file is refused with ErrDefinedInFile.
func (rt *Runtime) Put(ctx context.Context, spec ConnectorSpec) (created bool, err error) {
	c, err := rt.get(spec.Name)
	if errors.Is(err, ErrUnknownConnector) {
		if err := rt.Create(ctx, spec); !errors.Is(err, ErrConnectorExists) {
			return err == nil, err
		}
		c, err = rt.get(spec.Name)
	}
	if err != nil {
		return false, err
	}
	if c.origin == OriginFile {
		return false, fmt.Errorf("connector %s: %w (%s): change it there and restart sluice", spec.Name, ErrDefinedInFile, c.source)
	}
	spec.Origin = OriginAPI
	next, err := rt.build(spec)
	if err != nil {
		return false, err
	}
	c.ops.Lock()
	defer c.ops.Unlock()
	if err := c.halt(ctx); err != nil {
		return false, err
	}
	c.mu.Lock()
	// The name (and so the logger) stays; the rest is replaced.
	c.Plugin, c.Config, c.Chain = next.Plugin, next.Config, next.Chain
	c.class, c.display, c.written, c.broken = next.class, next.display, next.written, nil
	if c.task == StateFailed || c.task == StateRestarting {
		c.task, c.trace = StateUnassigned, ""
	}
	c.mu.Unlock()
	if err := rt.persist(ctx, c); err != nil {
		return false, err
	}
	rt.mu.Lock()
	rs := rt.run
	rt.mu.Unlock()
	c.mu.Lock()
	if rs != nil && c.done == nil && c.target != StateStopped {
		c.startLocked(rs)
	}
	c.mu.Unlock()
	c.logger.Info("connector reconfigured", "class", c.Plugin.Name)
	return false, nil
}

// Origin returns where a connector is defined: OriginAPI, or OriginFile and the file.
func (rt *Runtime) Origin(name string) (origin, file string, err error) {
	c, err := rt.get(name)
	if err != nil {
		return "", "", err
	}
	return c.origin, c.source, nil
}

// Written returns a connector's configuration as written, without redaction (secrets written
// inline included), for PATCH-style merges of API connectors. Never show it.
func (rt *Runtime) Written(name string) (class string, config map[string]string, err error) {
	c, err := rt.get(name)
	if err != nil {
		return "", nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.class, maps.Clone(c.written), nil
}
