package rest

import (
	"net/http"
	"sort"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
)

type pluginInfo struct {
	Class   string `json:"class"`
	Type    string `json:"type"`
	Version string `json:"version,omitempty"`
}

// configKeyInfo is Kafka Connect's description of a configuration key.
type configKeyInfo struct {
	Name          string   `json:"name"`
	Type          string   `json:"type"`
	Required      bool     `json:"required"`
	DefaultValue  *string  `json:"default_value"`
	Importance    string   `json:"importance"`
	Documentation string   `json:"documentation"`
	Group         *string  `json:"group"`
	Width         string   `json:"width"`
	DisplayName   string   `json:"display_name"`
	Dependents    []string `json:"dependents"`
	Order         int      `json:"order"`
}

type configValueInfo struct {
	Name              string   `json:"name"`
	Value             *string  `json:"value"`
	RecommendedValues []string `json:"recommended_values"`
	Errors            []string `json:"errors"`
	Visible           bool     `json:"visible"`
}

type configInfo struct {
	Definition configKeyInfo   `json:"definition"`
	Value      configValueInfo `json:"value"`
}

type validateResult struct {
	Name       string       `json:"name"`
	ErrorCount int          `json:"error_count"`
	Groups     []string     `json:"groups"`
	Configs    []configInfo `json:"configs"`
}

func keyInfo(k connect.ConfigKey, order int) configKeyInfo {
	ki := configKeyInfo{
		Name: k.Name, Type: k.Type.String(), Required: k.Required, Importance: string(k.Importance),
		Documentation: k.Doc, Width: "NONE", DisplayName: k.Name, Dependents: []string{}, Order: order,
	}
	if k.Prefix {
		ki.Name = k.Name + "*"
		ki.DisplayName = ki.Name
	}
	if ki.Importance == "" {
		ki.Importance = string(connect.Medium)
	}
	if k.HasDefault || k.Default != "" {
		d := k.Default
		if k.IsSecret() && d != "" {
			d = connect.Redacted
		}
		ki.DefaultValue = &d
	}
	if k.Group != "" {
		g := k.Group
		ki.Group = &g
	}
	if k.Ignored {
		ki.Documentation = "Accepted for compatibility; no effect in sluice: " + k.Doc
	}
	return ki
}

// plugin finds a plugin by the name a path gives: its class, an alias or its short name.
func (s *Server) plugin(name string, kinds ...connect.Kind) (connect.Plugin, error) {
	p, ok := s.rt.Registry().Lookup(name, kinds...)
	if !ok {
		return p, notFound("no connector plugin %q; known: %s", name, strings.Join(s.rt.Registry().Names(kinds...), ", "))
	}
	return p, nil
}

func (s *Server) listPlugins(w http.ResponseWriter, r *http.Request, _ params) error {
	q, aerr := query(r, "connectorsOnly")
	if aerr != nil {
		return aerr
	}
	only := true
	if len(q["connectorsOnly"]) > 0 {
		v, aerr := boolParam(q, "connectorsOnly")
		if aerr != nil {
			return aerr
		}
		only = v
	}
	kinds := []connect.Kind{connect.KindSource, connect.KindSink}
	if !only {
		kinds = append(kinds, connect.KindTransform, connect.KindPredicate)
	}
	out := []pluginInfo{}
	for _, p := range s.rt.Registry().Plugins(kinds...) {
		out = append(out, pluginInfo{Class: p.Class(), Type: string(p.Kind), Version: p.Version})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Class < out[j].Class })
	return writeJSON(w, r, http.StatusOK, out)
}

// definition is the full definition of a plugin's configuration: a connector's includes the
// runtime-level keys.
func definition(p connect.Plugin) connect.ConfigDef {
	if p.Kind == connect.KindSource || p.Kind == connect.KindSink {
		return runtime.DefFor(p)
	}
	return p.Config
}

func (s *Server) pluginConfig(w http.ResponseWriter, r *http.Request, pp params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	p, err := s.plugin(pp["p"])
	if err != nil {
		return err
	}
	out := []configKeyInfo{}
	for i, k := range definition(p) {
		out = append(out, keyInfo(k, i))
	}
	return writeJSON(w, r, http.StatusOK, out)
}

func (s *Server) validate(w http.ResponseWriter, r *http.Request, pp params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	p, err := s.plugin(pp["p"], connect.KindSource, connect.KindSink)
	if err != nil {
		return err
	}
	body, aerr := readBody(r)
	if aerr != nil {
		return aerr
	}
	written, _, aerr := configMap(body, "", false)
	if aerr != nil {
		return aerr
	}
	s.noteSecrets(r, p.Name, written)
	def := definition(p)
	var errs []connect.FieldError
	resolved := written
	if s.opts.Resolve != nil {
		resolved, errs = s.opts.Resolve(written)
	}
	name := strings.TrimSpace(written[runtime.KeyName])
	if name == "" {
		name = "connector"
	}
	_, cerrs := s.rt.Check(name, p.Name, resolved)
	errs = append(errs, cerrs...)
	byKey := map[string][]string{}
	for _, fe := range errs {
		byKey[fe.Key] = append(byKey[fe.Key], fe.Message)
	}
	res := validateResult{Name: p.Class(), Groups: []string{}, Configs: []configInfo{}}
	groups := map[string]bool{}
	seen := map[string]bool{}
	add := func(k connect.ConfigKey, name string, order int) {
		ki := keyInfo(k, order)
		ki.Name, ki.DisplayName = name, name
		if k.Group != "" && !groups[k.Group] {
			groups[k.Group] = true
			res.Groups = append(res.Groups, k.Group)
		}
		vi := configValueInfo{Name: name, RecommendedValues: append([]string{}, k.Enum...), Errors: byKey[name], Visible: true}
		if vi.Errors == nil {
			vi.Errors = []string{}
		}
		if v, ok := written[name]; ok {
			if k.IsSecret() && !runtime.IsPlaceholder(v) {
				v = connect.Redacted
			}
			vi.Value = &v
		} else if ki.DefaultValue != nil {
			v := *ki.DefaultValue
			vi.Value = &v
		}
		res.ErrorCount += len(vi.Errors)
		res.Configs = append(res.Configs, configInfo{Definition: ki, Value: vi})
		seen[name] = true
	}
	for i, k := range def {
		if !k.Prefix {
			add(k, k.Name, i)
		}
	}
	// Keys given that a prefix declaration governs, then unknown keys and other problems.
	keys := make([]string, 0, len(written)+len(byKey))
	for k := range written {
		keys = append(keys, k)
	}
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if seen[k] {
			continue
		}
		decl, ok := def.Lookup(k)
		if !ok {
			decl = connect.ConfigKey{Name: k, Type: connect.TypeString, Doc: "Not a key of this connector.", Secret: looksSecret(k)}
		}
		add(decl, k, len(res.Configs))
	}
	return writeJSON(w, r, http.StatusOK, res)
}
