package transforms

import (
	"fmt"
	"regexp"

	"github.com/sluice-cdc/sluice/connect"
)

// Null handling modes of the expression transforms (Debezium's null.handling.mode).
const (
	nullKeep     = "keep"
	nullDrop     = "drop"
	nullEvaluate = "evaluate"
)

func languageKey() connect.ConfigKey {
	return connect.ConfigKey{
		Name: "language", Type: connect.TypeString, Default: "expr", HasDefault: true,
		Enum: []string{"expr", "jsr223.groovy", "jsr223.graal.js"},
		Doc: "The expression language. sluice evaluates every expression with its own language (expr); " +
			"the jsr223.* values are accepted so that Debezium configs load, and simple conditions " +
			"(field access, comparisons, &&, ||, !, string literals in single or double quotes) mean the same.",
	}
}

func topicRegexKey(what string) connect.ConfigKey {
	return connect.ConfigKey{
		Name: "topic.regex", Type: connect.TypeString, HasDefault: true, Check: checkRegex,
		Doc: "Apply the " + what + " only to records whose topic matches this regular expression (whole name); others pass unchanged.",
	}
}

func nullHandlingKey(what string) connect.ConfigKey {
	return connect.ConfigKey{
		Name: "null.handling.mode", Type: connect.TypeString, Default: nullKeep, HasDefault: true,
		Enum: []string{nullKeep, nullDrop, nullEvaluate},
		Doc:  "Tombstones (null values): keep passes them, drop drops them, evaluate applies the " + what + " to them.",
	}
}

// exprDoc documents the expression environment once for every expression option.
const exprDoc = " Variables: key, value (objects read with dots, e.g. value.after.status; a missing " +
	"field or a field of null is null), headers (headers.name is the header as text, or null), " +
	"header (Debezium's form: header.name.value), topic, op (c, u, d, r, t, or \"\" when the " +
	"record has none), partition, timestamp (epoch milliseconds). Pure and sandboxed: no I/O, no " +
	"clock; at most 1000 nodes, no nested loops."

// guard holds what filter and content_router share: topic selection and tombstone handling.
type guard struct {
	topic *regexp.Regexp
	nulls string
}

func newGuard(cfg connect.Config) (guard, error) {
	g := guard{nulls: cfg.Enum("null.handling.mode")}
	if s := cfg.String("topic.regex"); s != "" {
		re, err := fullMatch(s)
		if err != nil {
			return g, err
		}
		g.topic = re
	}
	return g, nil
}

// applies reports whether the expression should run; when not, keep says what happens.
func (g guard) applies(r connect.Record) (run, keep bool) {
	if g.topic != nil && !g.topic.MatchString(r.Topic) {
		return false, true
	}
	if r.Value == nil {
		switch g.nulls {
		case nullKeep:
			return false, true
		case nullDrop:
			return false, false
		}
	}
	return true, true
}

func filterPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "filter",
		Aliases: []string{"io.debezium.transforms.Filter"},
		Kind:    connect.KindTransform,
		Doc:     "Keeps the records for which the condition is true and drops the others (Debezium's Filter).",
		Config: connect.ConfigDef{
			{Name: "condition", Type: connect.TypeString, Required: true, Check: checkExpr(true),
				Doc: "A boolean expression evaluated for every record; false drops the record." + exprDoc},
			languageKey(),
			topicRegexKey("filter"),
			nullHandlingKey("condition"),
		},
		NewTransform: func(cfg connect.Config) (connect.Transform, error) {
			p, err := compileExpr(cfg.String("condition"), true)
			if err != nil {
				return nil, err
			}
			g, err := newGuard(cfg)
			if err != nil {
				return nil, err
			}
			return &filter{guard: g, cond: p}, nil
		},
	}
}

type filter struct {
	guard
	cond *program
}

func (f *filter) Apply(r connect.Record) (connect.Record, bool, error) {
	run, keep := f.applies(r)
	if !run {
		return r, keep, nil
	}
	ok, err := f.cond.test(r)
	if err != nil {
		return r, false, fmt.Errorf("filter: %w", err)
	}
	return r, ok, nil
}

func contentRouterPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "content_router",
		Aliases: []string{"io.debezium.transforms.ContentBasedRouter"},
		Kind:    connect.KindTransform,
		Doc:     "Routes each record to the topic an expression computes (Debezium's content-based router).",
		Config: connect.ConfigDef{
			{Name: "topic.expression", Type: connect.TypeString, Required: true, Check: checkExpr(false),
				Doc: "An expression giving the new topic as a string; null keeps the topic." + exprDoc},
			languageKey(),
			topicRegexKey("router"),
			nullHandlingKey("expression"),
		},
		NewTransform: func(cfg connect.Config) (connect.Transform, error) {
			p, err := compileExpr(cfg.String("topic.expression"), false)
			if err != nil {
				return nil, err
			}
			g, err := newGuard(cfg)
			if err != nil {
				return nil, err
			}
			return &contentRouter{guard: g, expr: p}, nil
		},
	}
}

type contentRouter struct {
	guard
	expr *program
}

func (c *contentRouter) Apply(r connect.Record) (connect.Record, bool, error) {
	run, keep := c.applies(r)
	if !run {
		return r, keep, nil
	}
	v, err := c.expr.eval(r)
	if err != nil {
		return r, false, fmt.Errorf("content_router: %w", err)
	}
	switch t := v.(type) {
	case nil:
	case string:
		if t == "" {
			return r, false, fmt.Errorf("content_router: topic.expression gave an empty topic")
		}
		r.Topic = t
	default:
		return r, false, fmt.Errorf("content_router: topic.expression gave %s, want a string or null", typeName(v))
	}
	return r, true, nil
}

func dropPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "drop",
		Aliases: []string{"org.apache.kafka.connect.transforms.Filter"},
		Kind:    connect.KindTransform,
		Doc: "Drops every record it applies to (Kafka Connect's Filter); use it with a predicate, " +
			"e.g. transforms.x.predicate=isTombstone.",
		Config: connect.ConfigDef{},
		NewTransform: func(cfg connect.Config) (connect.Transform, error) {
			return dropAll{}, nil
		},
	}
}

type dropAll struct{}

func (dropAll) Apply(r connect.Record) (connect.Record, bool, error) { return r, false, nil }
