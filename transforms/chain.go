package transforms

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// Chain is a connector's list of transforms, each optionally guarded by a predicate, built
// from Kafka Connect's keys by BuildChain. It implements connect.Transform: the transforms
// apply in order and the chain stops at the first one that drops the record. A Chain is
// immutable and safe for concurrent use.
//
// Whatever the transforms do, the chain keeps the record's Version and every "__sluice."
// header of its input, so sinks can refuse stale writes and keep undelivered columns.
type Chain struct {
	steps []step
}

type step struct {
	name   string
	t      connect.Transform
	pred   connect.Predicate
	negate bool
}

// Len returns the number of transforms.
func (c *Chain) Len() int { return len(c.steps) }

// Names returns the transform aliases in order.
func (c *Chain) Names() []string {
	out := make([]string, len(c.steps))
	for i, s := range c.steps {
		out[i] = s.name
	}
	return out
}

// Apply runs the record through the chain. An error names the transform (or predicate)
// that failed; the runtime handles it per errors.tolerance.
func (c *Chain) Apply(r connect.Record) (connect.Record, bool, error) {
	owned := false // r.Value is a row a step of this call built (see own.go)
	for i := range c.steps {
		s := &c.steps[i]
		if s.pred != nil {
			ok, err := s.pred.Test(r)
			if err != nil {
				return r, false, fmt.Errorf("transform %s: predicate: %w", s.name, err)
			}
			if ok == s.negate {
				continue
			}
		}
		var out connect.Record
		var keep bool
		var err error
		if ot, ok := s.t.(ownTransform); ok {
			out, keep, owned, err = ot.applyOwned(r, owned)
		} else {
			out, keep, err = s.t.Apply(r)
			// A transform that passes the value on keeps it owned, unless it also made it
			// the key (then two fields of the record share the row).
			owned = owned && sameBox(out.Value, r.Value) && !sameBox(out.Key, out.Value)
		}
		if err != nil {
			return r, false, fmt.Errorf("transform %s: %w", s.name, err)
		}
		if !keep {
			return out, false, nil
		}
		out.Version = r.Version
		out.Headers = keepSluiceHeaders(r.Headers, out.Headers)
		r = out
	}
	return r, true, nil
}

// keepSluiceHeaders puts back any "__sluice." header of in that out lost.
func keepSluiceHeaders(in, out connect.Headers) connect.Headers {
	for _, h := range in {
		if !strings.HasPrefix(h.Key, sluiceHeaderPrefix) {
			continue
		}
		if _, ok := out.Get(h.Key); !ok {
			out = append(out.Clone(), h)
		}
	}
	return out
}

// Keys of a connector configuration that BuildChain reads.
const (
	KeyTransforms = "transforms"
	KeyPredicates = "predicates"
)

// ConfigKeys declares the chain's keys, for connectors to merge into their ConfigDef so that
// strict validation accepts them. BuildChain validates what is under the prefixes.
func ConfigKeys() connect.ConfigDef {
	return connect.ConfigDef{
		{Name: KeyTransforms, Type: connect.TypeList, HasDefault: true, Group: "Transforms", Importance: connect.Low,
			Doc: "Aliases for the transformations to apply to records, in order."},
		{Name: KeyPredicates, Type: connect.TypeList, HasDefault: true, Group: "Predicates", Importance: connect.Low,
			Doc: "Aliases for the predicates used by transformations."},
		{Name: KeyTransforms + ".", Prefix: true, Type: connect.TypeString, Group: "Transforms",
			Doc: "transforms.<alias>.type, transforms.<alias>.<option>, transforms.<alias>.predicate and transforms.<alias>.negate."},
		{Name: KeyPredicates + ".", Prefix: true, Type: connect.TypeString, Group: "Predicates",
			Doc: "predicates.<alias>.type and predicates.<alias>.<option>."},
	}
}

// BuildChain reads Kafka Connect's transform keys from a connector configuration:
//
//	transforms=unwrap,route
//	transforms.<alias>.type=<short name or Java class name>
//	transforms.<alias>.<option>=...
//	transforms.<alias>.predicate=<predicate alias>
//	transforms.<alias>.negate=true|false
//	predicates=isTombstone
//	predicates.<alias>.type=...
//	predicates.<alias>.<option>=...
//
// Other keys are ignored (they belong to the connector). It reports every problem at once,
// each with its full key, sorted by key and message; the chain is nil when there is any.
func BuildChain(reg *connect.Registry, cfg map[string]string) (*Chain, []connect.FieldError) {
	var errs []connect.FieldError
	add := func(key, format string, args ...any) {
		errs = append(errs, connect.FieldError{Key: key, Message: fmt.Sprintf(format, args...)})
	}

	tnames, terrs := aliases(cfg, KeyTransforms)
	errs = append(errs, terrs...)
	pnames, perrs := aliases(cfg, KeyPredicates)
	errs = append(errs, perrs...)

	// Keys under transforms.<alias>. / predicates.<alias>. whose alias is not listed.
	for key := range cfg {
		for _, group := range []struct {
			prefix string
			names  []string
			what   string
		}{{KeyTransforms + ".", tnames, "transform"}, {KeyPredicates + ".", pnames, "predicate"}} {
			rest, ok := strings.CutPrefix(key, group.prefix)
			if !ok {
				continue
			}
			if !hasAlias(group.names, rest) {
				alias := rest
				if i := strings.IndexByte(rest, '.'); i >= 0 {
					alias = rest[:i]
				}
				add(key, "%s %q is not listed in %s (listed: %s)", group.what, alias, strings.TrimSuffix(group.prefix, "."), listOrNone(group.names))
			}
		}
	}

	preds := map[string]connect.Predicate{}
	for _, name := range pnames {
		prefix := KeyPredicates + "." + name + "."
		p, ok := lookupPlugin(reg, cfg, prefix, connect.KindPredicate, "predicate", add)
		if !ok {
			continue
		}
		raw := options(cfg, prefix, "type")
		pc, perrs := p.ParseConfig(raw)
		errs = append(errs, qualify(prefix, p, perrs)...)
		if len(perrs) > 0 {
			continue
		}
		pred, err := p.NewPredicate(pc)
		if err != nil {
			add(prefix+"type", "%v", err)
			continue
		}
		preds[name] = pred
	}

	chain := &Chain{}
	for _, name := range tnames {
		prefix := KeyTransforms + "." + name + "."
		st := step{name: name}
		if pv, ok := cfg[prefix+"predicate"]; ok {
			pv = strings.TrimSpace(pv)
			switch {
			case !hasName(pnames, pv):
				add(prefix+"predicate", "predicate %q is not defined; list it in predicates and set predicates.%s.type (defined: %s)", pv, pv, listOrNone(pnames))
			default:
				st.pred = preds[pv]
			}
		}
		if nv, ok := cfg[prefix+"negate"]; ok {
			switch strings.ToLower(strings.TrimSpace(nv)) {
			case "true":
				st.negate = true
			case "false":
			default:
				add(prefix+"negate", "must be true or false (got %q)", nv)
			}
			if _, hasPred := cfg[prefix+"predicate"]; !hasPred {
				add(prefix+"negate", "has no effect without %spredicate", prefix)
			}
		}
		p, ok := lookupPlugin(reg, cfg, prefix, connect.KindTransform, "transform", add)
		if !ok {
			continue
		}
		raw := options(cfg, prefix, "type", "predicate", "negate")
		tc, perrs := p.ParseConfig(raw)
		errs = append(errs, qualify(prefix, p, perrs)...)
		if len(perrs) > 0 {
			continue
		}
		t, err := p.NewTransform(tc)
		if err != nil {
			add(prefix+"type", "%v", err)
			continue
		}
		st.t = t
		chain.steps = append(chain.steps, st)
	}
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool {
			if errs[i].Key != errs[j].Key {
				return errs[i].Key < errs[j].Key
			}
			return errs[i].Message < errs[j].Message
		})
		return nil, errs
	}
	return chain, nil
}

// aliases reads a list of aliases and reports duplicates and malformed names.
func aliases(cfg map[string]string, key string) ([]string, []connect.FieldError) {
	var errs []connect.FieldError
	names := connect.SplitList(cfg[key])
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			errs = append(errs, connect.FieldError{Key: key, Message: fmt.Sprintf("alias %q is listed twice", n)})
		}
		seen[n] = true
		if strings.ContainsAny(n, ". \t") {
			errs = append(errs, connect.FieldError{Key: key, Message: fmt.Sprintf("alias %q must not contain dots or spaces", n)})
		}
	}
	return names, errs
}

// hasAlias reports whether rest ("<alias>.<option>") starts with a listed alias.
func hasAlias(names []string, rest string) bool {
	for _, n := range names {
		if strings.HasPrefix(rest, n+".") {
			return true
		}
	}
	return false
}

func hasName(names []string, n string) bool {
	for _, x := range names {
		if x == n {
			return true
		}
	}
	return false
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// lookupPlugin resolves <prefix>type.
func lookupPlugin(reg *connect.Registry, cfg map[string]string, prefix string, kind connect.Kind, what string, add func(key, format string, args ...any)) (connect.Plugin, bool) {
	key := prefix + "type"
	class, ok := cfg[key]
	class = strings.TrimSpace(class)
	known := strings.Join(reg.Names(kind), ", ")
	if !ok || class == "" {
		add(key, "is required: the %s's type, one of %s (or its Java class name)", what, known)
		return connect.Plugin{}, false
	}
	p, ok := reg.Lookup(class, kind)
	if !ok {
		var candidates []string
		for _, p := range reg.Plugins(kind) {
			candidates = append(candidates, p.Name)
			candidates = append(candidates, p.Aliases...)
		}
		if s, close := connect.SuggestKey(class, candidates); close {
			add(key, "unknown %s type %q; did you mean %q? (known: %s)", what, class, s, known)
		} else {
			add(key, "unknown %s type %q (known: %s)", what, class, known)
		}
		return connect.Plugin{}, false
	}
	return p, true
}

// options returns the keys under prefix, without it, except the chain's own.
func options(cfg map[string]string, prefix string, skip ...string) map[string]string {
	out := map[string]string{}
	for k, v := range cfg {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok || hasName(skip, rest) {
			continue
		}
		out[rest] = v
	}
	return out
}

// qualify turns a plugin's errors into errors on full connector keys, and lists the
// plugin's options when a key is unknown.
func qualify(prefix string, p connect.Plugin, errs []connect.FieldError) []connect.FieldError {
	out := make([]connect.FieldError, 0, len(errs))
	for _, e := range errs {
		msg := e.Message
		if strings.HasPrefix(msg, "unknown key") {
			what := "transform"
			if p.Kind == connect.KindPredicate {
				what = "predicate"
			}
			msg = fmt.Sprintf("unknown option of %s %s", what, p.Name)
			if s, ok := strings.CutPrefix(e.Message, "unknown key; did you mean "); ok {
				msg += "; did you mean " + s
			} else {
				msg += " (options: " + listOrNone(optionNames(p.Config)) + ")"
			}
		}
		out = append(out, connect.FieldError{Key: prefix + e.Key, Message: msg})
	}
	return out
}

func optionNames(def connect.ConfigDef) []string {
	var out []string
	for _, k := range def {
		if !k.Ignored {
			out = append(out, k.Name)
		}
	}
	return out
}
