package transforms

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sluice-cdc/sluice/connect"
)

func TestBuildChainErrors(t *testing.T) {
	known := strings.Join(registry(t).Names(connect.KindTransform), ", ")
	knownPreds := "expression, has_header_key, record_is_tombstone, topic_name_matches"
	for _, tc := range []struct {
		name string
		cfg  map[string]string
		want []string
	}{
		{"missing type", map[string]string{"transforms": "unwrap"},
			[]string{"transforms.unwrap.type: is required: the transform's type, one of " + known + " (or its Java class name)"}},
		{"unknown type with suggestion", map[string]string{"transforms": "r", "transforms.r.type": "org.apache.kafka.connect.transforms.RegexRoutr"},
			[]string{`transforms.r.type: unknown transform type "org.apache.kafka.connect.transforms.RegexRoutr"; did you mean "org.apache.kafka.connect.transforms.RegexRouter"? (known: ` + known + ")"}},
		{"unknown type", map[string]string{"transforms": "r", "transforms.r.type": "com.example.Custom"},
			[]string{`transforms.r.type: unknown transform type "com.example.Custom" (known: ` + known + ")"}},
		{"unknown option with suggestion", map[string]string{"transforms": "r", "transforms.r.type": "route", "transforms.r.regex": "a", "transforms.r.replacement": "b", "transforms.r.regx": "x"},
			[]string{`transforms.r.regx: unknown option of transform route; did you mean "regex"?`}},
		{"unknown option lists options", map[string]string{"transforms": "r", "transforms.r.type": "route", "transforms.r.regex": "a", "transforms.r.replacement": "b", "transforms.r.target.topic": "x"},
			[]string{`transforms.r.target.topic: unknown option of transform route (options: regex, replacement)`}},
		{"required options and bad enum at once", map[string]string{"transforms": "r,u", "transforms.r.type": "route", "transforms.u.type": "unwrap", "transforms.u.delete.tombstone.handling.mode": "keep"},
			[]string{
				"transforms.r.regex: is required (regular expression matched against the whole topic name)",
				"transforms.r.replacement: is required (the new topic; $1 or ${name} insert captured groups, \\$ a dollar sign (Java's syntax))",
				`transforms.u.delete.tombstone.handling.mode: must be one of drop, tombstone, rewrite, rewrite-with-tombstone, delete-to-tombstone (got "keep")`,
			}},
		{"bad regex and replacement", map[string]string{"transforms": "r,s", "transforms.r.type": "route", "transforms.r.regex": "(a", "transforms.r.replacement": "x",
			"transforms.s.type": "route", "transforms.s.regex": "(a)", "transforms.s.replacement": "$2"},
			[]string{
				"transforms.r.regex: must be a valid regular expression: missing closing ): `^(?:(a)$`",
				`transforms.s.replacement: invalid replacement "$2": no group 2`,
			}},
		{"undefined predicate", map[string]string{"transforms": "d", "transforms.d.type": "drop", "transforms.d.predicate": "isTomb"},
			[]string{`transforms.d.predicate: predicate "isTomb" is not defined; list it in predicates and set predicates.isTomb.type (defined: none)`}},
		{"predicate errors", map[string]string{"predicates": "p,q", "predicates.p.type": "TopicNameMatches", "predicates.q.type": "nope"},
			[]string{
				"predicates.p.pattern: is required (a regular expression matched against the whole topic name)",
				`predicates.q.type: unknown predicate type "nope" (known: ` + knownPreds + ")",
			}},
		{"negate without predicate, bad negate", map[string]string{"transforms": "d", "transforms.d.type": "drop", "transforms.d.negate": "yes"},
			[]string{
				"transforms.d.negate: has no effect without transforms.d.predicate",
				`transforms.d.negate: must be true or false (got "yes")`,
			}},
		{"not listed and duplicates", map[string]string{"transforms": "a,a", "transforms.a.type": "drop", "transforms.b.type": "drop", "predicates.x.type": "record_is_tombstone"},
			[]string{
				`predicates.x.type: predicate "x" is not listed in predicates (listed: none)`,
				`transforms: alias "a" is listed twice`,
				`transforms.b.type: transform "b" is not listed in transforms (listed: a, a)`,
			}},
		{"expression errors", map[string]string{"transforms": "f,g", "transforms.f.type": "filter", "transforms.f.condition": "value.x ==",
			"transforms.g.type": "filter", "transforms.g.condition": "all(value.a, {all(value.b, {# > 1})})"},
			[]string{
				"transforms.f.condition: invalid expression: unexpected token EOF (1:10)",
				"transforms.g.condition: invalid expression: loops (all, any, filter, map, ...) must not nest",
			}},
		{"expression not boolean, topic expression empty", map[string]string{"transforms": "f,c", "transforms.f.type": "filter", "transforms.f.condition": `1 + 2`,
			"transforms.c.type": "content_router", "transforms.c.topic.expression": " "},
			[]string{
				"transforms.c.topic.expression: is required (an expression giving the new topic as a string; null keeps the topic)",
				"transforms.f.condition: invalid expression: expected bool, but got int",
			}},
		{"sluice headers reserved", map[string]string{"transforms": "h,d", "transforms.h.type": "insert_header", "transforms.h.header": "__sluice.version", "transforms.h.value.literal": "1",
			"transforms.d.type": "drop_headers", "transforms.d.headers": "a,__sluice.unchanged"},
			[]string{
				`transforms.d.headers: header names starting with "__sluice." are reserved for sluice (got "__sluice.unchanged")`,
				`transforms.h.header: header names starting with "__sluice." are reserved for sluice (got "__sluice.version")`,
			}},
		{"cross-key rules", map[string]string{"transforms": "r,c,h,ts", "transforms.r.type": "ReplaceField$Value", "transforms.r.exclude": "a", "transforms.r.blacklist": "b",
			"transforms.c.type": "Cast$Value", "transforms.c.spec": "int64,a:string",
			"transforms.h.type": "HeaderFrom$Value", "transforms.h.fields": "a,b", "transforms.h.headers": "x", "transforms.h.operation": "copy",
			"transforms.ts.type": "TimestampConverter$Value", "transforms.ts.target.type": "string"},
			[]string{
				"transforms.c.spec: a whole-value cast must be the only item",
				"transforms.h.headers: must name as many headers as fields (2 fields, 1 headers)",
				"transforms.r.blacklist: is the old name of exclude; set only one of them",
				"transforms.ts.format: is required when target.type is string",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, errs := BuildChain(registry(t), tc.cfg)
			if diff := cmp.Diff(tc.want, fmtErrs(errs)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if c != nil {
				t.Errorf("got a chain despite errors")
			}
		})
	}
}

func TestChainPredicatesAndOrder(t *testing.T) {
	c := chainOf(t, map[string]string{
		"connector.class":               "io.debezium.connector.mysql.MySqlConnector", // ignored
		"transforms":                    "dropTomb,tag,route",
		"transforms.dropTomb.type":      "org.apache.kafka.connect.transforms.Filter",
		"transforms.dropTomb.predicate": "isTomb",
		"transforms.tag.type":           "InsertHeader",
		"transforms.tag.header":         "src",
		"transforms.tag.value.literal":  "mysql",
		"transforms.tag.predicate":      "isOrders",
		"transforms.tag.negate":         "true",
		"transforms.route.type":         "route",
		"transforms.route.regex":        `dbserver1\.inventory\.(.*)`,
		"transforms.route.replacement":  "inv.$1",
		"predicates":                    "isTomb,isOrders",
		"predicates.isTomb.type":        "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
		"predicates.isOrders.type":      "TopicNameMatches",
		"predicates.isOrders.pattern":   `.*\.orders`,
	})
	if diff := cmp.Diff([]string{"dropTomb", "tag", "route"}, c.Names()); diff != "" {
		t.Fatalf("names: %s", diff)
	}
	k := row("id", int64(1))
	customers := rec(k, row("id", int64(1)))
	orders := with(customers, func(r *connect.Record) { r.Topic = "dbserver1.inventory.orders" })
	checkApply(t, c, customers, kept(with(customers, func(r *connect.Record) {
		r.Topic = "inv.customers"
		r.Headers = connect.Headers{hdr("src", "mysql")}
	})))
	checkApply(t, c, orders, kept(with(orders, func(r *connect.Record) { r.Topic = "inv.orders" })))
	checkApply(t, c, rec(k, nil), dropped)
}

func TestChainEmptyAndErrors(t *testing.T) {
	c := chainOf(t, map[string]string{"name": "x"})
	in := rec(row("id", int64(1)), row("id", int64(1)))
	checkApply(t, c, in, kept(in))

	c = chainOf(t, map[string]string{"transforms": "x", "transforms.x.type": "extract_field", "transforms.x.field": "id"})
	checkApply(t, c, rec(nil, "text"), failed("transform x: extract_field needs an object, got string"))
}

// A transform that drops sluice's headers or changes the version cannot: the chain restores
// them.
func TestChainKeepsSluiceHeadersAndVersion(t *testing.T) {
	c := &Chain{steps: []step{{name: "rogue", t: rogue{}}}}
	in := rec(row("id", int64(1)), row("id", int64(1)), hdr(connect.HeaderVersion, "5"), hdr("a", "1"), hdr(connect.HeaderUnchanged, "x"))
	in.Version = 5
	want := with(in, func(r *connect.Record) {
		r.Headers = connect.Headers{hdr(connect.HeaderVersion, "5"), hdr(connect.HeaderUnchanged, "x")}
	})
	checkApply(t, c, in, kept(want))
}

type rogue struct{}

func (rogue) Apply(r connect.Record) (connect.Record, bool, error) {
	r.Headers = nil
	r.Version = 0
	return r, true, nil
}

// Every plugin is described for the REST listing: a doc, documented options, and aliases for
// the Java class names; ConfigKeys lets connectors accept the chain's keys.
func TestPluginMetadata(t *testing.T) {
	reg := registry(t)
	for _, p := range reg.Plugins(connect.KindTransform, connect.KindPredicate) {
		if p.Doc == "" {
			t.Errorf("%s: no doc", p.Name)
		}
		for _, k := range p.Config {
			if k.Doc == "" {
				t.Errorf("%s.%s: no doc", p.Name, k.Name)
			}
		}
	}
	for alias, name := range map[string]string{
		"io.debezium.transforms.ExtractNewRecordState":                 "unwrap",
		"ExtractNewRecordState":                                        "unwrap",
		"io.debezium.transforms.outbox.EventRouter":                    "outbox",
		"io.debezium.transforms.ByLogicalTableRouter":                  "logical_table_router",
		"io.debezium.transforms.ContentBasedRouter":                    "content_router",
		"io.debezium.transforms.Filter":                                "filter",
		"org.apache.kafka.connect.transforms.Filter":                   "drop",
		"org.apache.kafka.connect.transforms.RegexRouter":              "route",
		"org.apache.kafka.connect.transforms.ReplaceField$Value":       "replace_field",
		"org.apache.kafka.connect.transforms.ReplaceField$Key":         "replace_field_key",
		"org.apache.kafka.connect.transforms.MaskField$Value":          "mask_field",
		"org.apache.kafka.connect.transforms.InsertField$Value":        "insert_field",
		"org.apache.kafka.connect.transforms.ValueToKey":               "value_to_key",
		"org.apache.kafka.connect.transforms.ExtractField$Key":         "extract_field_key",
		"org.apache.kafka.connect.transforms.HoistField$Value":         "hoist_field",
		"org.apache.kafka.connect.transforms.Cast$Value":               "cast",
		"org.apache.kafka.connect.transforms.TimestampConverter$Value": "timestamp_converter",
		"org.apache.kafka.connect.transforms.Flatten$Value":            "flatten",
		"org.apache.kafka.connect.transforms.InsertHeader":             "insert_header",
		"org.apache.kafka.connect.transforms.DropHeaders":              "drop_headers",
		"org.apache.kafka.connect.transforms.HeaderFrom$Value":         "header_from",
	} {
		p, ok := reg.Lookup(alias, connect.KindTransform)
		if !ok || p.Name != name {
			t.Errorf("Lookup(%q) = %q, %v; want %q", alias, p.Name, ok, name)
		}
	}
	for alias, name := range map[string]string{
		"org.apache.kafka.connect.transforms.predicates.TopicNameMatches":  "topic_name_matches",
		"org.apache.kafka.connect.transforms.predicates.HasHeaderKey":      "has_header_key",
		"org.apache.kafka.connect.transforms.predicates.RecordIsTombstone": "record_is_tombstone",
		"expression": "expression",
	} {
		p, ok := reg.Lookup(alias, connect.KindPredicate)
		if !ok || p.Name != name {
			t.Errorf("Lookup(%q) = %q, %v; want %q", alias, p.Name, ok, name)
		}
	}
	def := ConfigKeys()
	for _, k := range []string{"transforms", "predicates", "transforms.unwrap.type", "predicates.p.pattern"} {
		if _, ok := def.Lookup(k); !ok {
			t.Errorf("ConfigKeys does not declare %q", k)
		}
	}
}

// The README's Transforms section documents every transform, predicate and option.
func TestReadmeSectionCoversPlugins(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Transforms\n")
	if start < 0 {
		t.Fatal("README.md has no ## Transforms section")
	}
	doc = doc[start+1:]
	if end := strings.Index(doc, "\n## "); end >= 0 {
		doc = doc[:end]
	}
	for _, p := range registry(t).Plugins(connect.KindTransform, connect.KindPredicate) {
		if !strings.Contains(doc, "`"+p.Name+"`") {
			t.Errorf("README.md's Transforms section does not document %s", p.Name)
		}
		for _, a := range p.Aliases {
			if !strings.Contains(doc, "`"+a+"`") {
				t.Errorf("README.md's Transforms section does not name the class %s", a)
			}
		}
		for _, k := range p.Config {
			if !strings.Contains(doc, "`"+k.Name+"`") {
				t.Errorf("README.md's Transforms section does not document %s.%s", p.Name, k.Name)
			}
		}
	}
}
