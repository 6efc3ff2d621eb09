package transforms

import (
	"fmt"
	"regexp"

	"github.com/sluice-cdc/sluice/connect"
)

func topicNameMatchesPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "topic_name_matches",
		Aliases: []string{"org.apache.kafka.connect.transforms.predicates.TopicNameMatches"},
		Kind:    connect.KindPredicate,
		Doc:     "True for records whose topic matches the pattern as a whole.",
		Config: connect.ConfigDef{
			{Name: "pattern", Type: connect.TypeString, Required: true, Check: checkRegex,
				Doc: "A regular expression matched against the whole topic name."},
		},
		NewPredicate: func(cfg connect.Config) (connect.Predicate, error) {
			re, err := fullMatch(cfg.String("pattern"))
			if err != nil {
				return nil, err
			}
			return topicMatches{re}, nil
		},
	}
}

type topicMatches struct{ re *regexp.Regexp }

func (p topicMatches) Test(r connect.Record) (bool, error) { return p.re.MatchString(r.Topic), nil }

func hasHeaderKeyPlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "has_header_key",
		Aliases: []string{"org.apache.kafka.connect.transforms.predicates.HasHeaderKey"},
		Kind:    connect.KindPredicate,
		Doc:     "True for records with at least one header of the given name.",
		Config: connect.ConfigDef{
			{Name: "name", Type: connect.TypeString, Required: true, Doc: "The header name."},
		},
		NewPredicate: func(cfg connect.Config) (connect.Predicate, error) {
			return hasHeader{cfg.String("name")}, nil
		},
	}
}

type hasHeader struct{ name string }

func (p hasHeader) Test(r connect.Record) (bool, error) {
	_, ok := r.Headers.Get(p.name)
	return ok, nil
}

func recordIsTombstonePlugin() connect.Plugin {
	return connect.Plugin{
		Name:    "record_is_tombstone",
		Aliases: []string{"org.apache.kafka.connect.transforms.predicates.RecordIsTombstone"},
		Kind:    connect.KindPredicate,
		Doc:     "True for tombstones (records with a null value).",
		Config:  connect.ConfigDef{},
		NewPredicate: func(cfg connect.Config) (connect.Predicate, error) {
			return isTombstone{}, nil
		},
	}
}

type isTombstone struct{}

func (isTombstone) Test(r connect.Record) (bool, error) { return r.Value == nil, nil }

func expressionPredicatePlugin() connect.Plugin {
	return connect.Plugin{
		Name: "expression",
		Kind: connect.KindPredicate,
		Doc:  "True for records for which the condition is true.",
		Config: connect.ConfigDef{
			{Name: "condition", Type: connect.TypeString, Required: true, Check: checkExpr(true),
				Doc: "A boolean expression." + exprDoc},
			languageKey(),
		},
		NewPredicate: func(cfg connect.Config) (connect.Predicate, error) {
			p, err := compileExpr(cfg.String("condition"), true)
			if err != nil {
				return nil, err
			}
			return exprPredicate{p}, nil
		},
	}
}

type exprPredicate struct{ p *program }

func (e exprPredicate) Test(r connect.Record) (bool, error) {
	ok, err := e.p.test(r)
	if err != nil {
		return false, fmt.Errorf("expression: %w", err)
	}
	return ok, nil
}
