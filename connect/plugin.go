package connect

import (
	"fmt"
	"sort"
	"strings"
)

// Kind is a plugin's kind, with Kafka Connect's names for the REST plugin listing.
type Kind string

const (
	KindSource    Kind = "source"
	KindSink      Kind = "sink"
	KindTransform Kind = "transformation"
	KindPredicate Kind = "predicate"
)

// Plugin describes a connector, transform or predicate class. Exactly one constructor matching
// Kind is set. Constructors validate nothing that Config and Validate already checked, do no
// I/O and start no goroutines (Open does the I/O).
type Plugin struct {
	// Name is the short name used in pipeline files ("mysql", "unwrap").
	Name string
	// Aliases are other accepted class names, e.g. Debezium's and Kafka Connect's Java
	// class names ("io.debezium.connector.mysql.MySqlConnector").
	Aliases []string
	Kind    Kind
	Version string
	Doc     string
	Config  ConfigDef
	// Validate checks rules that span keys, after every key passed its own checks. No I/O.
	Validate func(cfg Config) []FieldError

	NewSource    func(cfg Config, env Env) (Source, error)
	NewSink      func(cfg Config, env Env) (Sink, error)
	NewTransform func(cfg Config) (Transform, error)
	NewPredicate func(cfg Config) (Predicate, error)
}

// Class returns the name the REST API reports as the plugin's class: the first alias when
// there is one (the Java class name tools expect), else the short name.
func (p Plugin) Class() string {
	if len(p.Aliases) > 0 {
		return p.Aliases[0]
	}
	return p.Name
}

// ParseConfig validates raw against the plugin's definition and then its own cross-key rules.
func (p Plugin) ParseConfig(raw map[string]string) (Config, []FieldError) {
	cfg, errs := p.Config.Parse(raw)
	if len(errs) == 0 && p.Validate != nil {
		errs = p.Validate(cfg)
	}
	return cfg, errs
}

// Registry maps class names (short names and aliases) to plugins. It is built explicitly in
// cmd/sluice; nothing registers itself.
type Registry struct {
	plugins []Plugin
	byName  map[string]int
}

// NewRegistry returns a registry holding the given plugins; see Register.
func NewRegistry(plugins ...Plugin) (*Registry, error) {
	r := &Registry{byName: map[string]int{}}
	for _, p := range plugins {
		if err := r.Register(p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds a plugin. A name or alias that another plugin of the same kind already uses,
// or a plugin without the constructor for its kind, is an error.
func (r *Registry) Register(p Plugin) error {
	if p.Name == "" {
		return fmt.Errorf("register plugin: empty name")
	}
	ok := false
	switch p.Kind {
	case KindSource:
		ok = p.NewSource != nil
	case KindSink:
		ok = p.NewSink != nil
	case KindTransform:
		ok = p.NewTransform != nil
	case KindPredicate:
		ok = p.NewPredicate != nil
	default:
		return fmt.Errorf("register plugin %s: unknown kind %q", p.Name, p.Kind)
	}
	if !ok {
		return fmt.Errorf("register plugin %s: no constructor for kind %s", p.Name, p.Kind)
	}
	if r.byName == nil {
		r.byName = map[string]int{}
	}
	names := append([]string{p.Name}, p.Aliases...)
	for _, n := range names {
		if _, dup := r.byName[string(p.Kind)+"/"+n]; dup {
			return fmt.Errorf("register plugin %s: name %q is taken", p.Name, n)
		}
	}
	r.plugins = append(r.plugins, p)
	for _, n := range names {
		r.byName[string(p.Kind)+"/"+n] = len(r.plugins) - 1
	}
	return nil
}

// Lookup finds a plugin of one of the given kinds (all kinds when none is given) by short
// name or alias; exact first, then ignoring case, then by the Java simple class name
// ("MySqlConnector" for "io.debezium.connector.mysql.MySqlConnector").
func (r *Registry) Lookup(name string, kinds ...Kind) (Plugin, bool) {
	if len(kinds) == 0 {
		kinds = []Kind{KindSource, KindSink, KindTransform, KindPredicate}
	}
	for _, k := range kinds {
		if i, ok := r.byName[string(k)+"/"+name]; ok {
			return r.plugins[i], true
		}
	}
	for _, p := range r.plugins {
		if !hasKind(kinds, p.Kind) {
			continue
		}
		for _, n := range append([]string{p.Name}, p.Aliases...) {
			simple := n[strings.LastIndexByte(n, '.')+1:]
			if strings.EqualFold(n, name) || strings.EqualFold(simple, name) {
				return p, true
			}
		}
	}
	return Plugin{}, false
}

func hasKind(kinds []Kind, k Kind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

// Plugins returns every plugin of the given kinds (all when none), sorted by kind then name.
func (r *Registry) Plugins(kinds ...Kind) []Plugin {
	var out []Plugin
	for _, p := range r.plugins {
		if len(kinds) == 0 || hasKind(kinds, p.Kind) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Names returns the short names of the plugins of the given kinds, sorted, for error messages
// that list what exists.
func (r *Registry) Names(kinds ...Kind) []string {
	ps := r.Plugins(kinds...)
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	sort.Strings(out)
	return out
}
