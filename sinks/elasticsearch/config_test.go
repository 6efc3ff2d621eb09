package elasticsearch

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

func TestPlugin(t *testing.T) {
	p := Plugin()
	if p.Name != "elasticsearch" || p.Kind != connect.KindSink || p.Class() != "io.confluent.connect.elasticsearch.ElasticsearchSinkConnector" {
		t.Fatalf("plugin %s %s %s", p.Name, p.Kind, p.Class())
	}
	reg, err := connect.NewRegistry(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Lookup("ElasticsearchSinkConnector", connect.KindSink); !ok {
		t.Fatal("the Confluent simple class name does not find the plugin")
	}
	for _, k := range p.Config {
		if k.Doc == "" {
			t.Errorf("key %s has no doc", k.Name)
		}
		if runtimeKey(k.Name) {
			t.Errorf("key %s is a runtime-level key: the runtime declares it", k.Name)
		}
		if strings.Contains(k.Name, "password") || strings.Contains(k.Name, "api.key") {
			if !k.IsSecret() && !k.Ignored {
				t.Errorf("key %s is not secret", k.Name)
			}
		}
	}
}

func TestConfig(t *testing.T) {
	p := Plugin()
	for _, tc := range []struct {
		name string
		raw  map[string]string
		errs []string
	}{
		{name: "minimal", raw: map[string]string{KeyURL: "http://127.0.0.1:9200"}},
		{name: "Confluent config", raw: map[string]string{KeyURL: "http://a:9200,https://b:9200", KeyKeyIgnore: "false",
			"schema.ignore": "true", KeyWriteMethod: "INSERT", KeyNullValues: "DELETE", KeyMalformed: "WARN", "linger.ms": "1",
			"max.buffered.records": "20000", "flush.timeout.ms": "180000", KeyBatchSize: "2000", KeyMaxInFlight: "5"}},
		{name: "missing url", raw: map[string]string{}, errs: []string{"connection.url: is required (elasticsearch HTTP URLs, comma-separated (http://host:9200 or https://host:9200))"}},
		{name: "bad url", raw: map[string]string{KeyURL: "localhost:9200"}, errs: []string{`connection.url: must be http:// or https:// URLs (got "localhost:9200")`}},
		{name: "bad template", raw: map[string]string{KeyURL: "http://a:9200", KeyIndex: "${tbl}"},
			errs: []string{"index: unknown placeholder ${tbl}; use ${topic}, ${db}, ${schema}, ${table}"}},
		{name: "bad static index", raw: map[string]string{KeyURL: "http://a:9200", KeyIndex: "_x"},
			errs: []string{`index: index name "_x" must not start with -, _ or +`}},
		{name: "data streams", raw: map[string]string{KeyURL: "http://a:9200", KeyDataStreamType: "logs"},
			errs: []string{`data.stream.type: must be one of none (got "logs")`}},
		{name: "bad mappings", raw: map[string]string{KeyURL: "http://a:9200", KeyIndexMappings: "{"},
			errs: []string{"index.mappings: must be a JSON object: unexpected end of JSON input"}},
		{name: "unknown key", raw: map[string]string{KeyURL: "http://a:9200", "batch.sise": "1"},
			errs: []string{`batch.sise: unknown key; did you mean "batch.size"?`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, errs := p.ParseConfig(tc.raw)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if d := cmp.Diff(tc.errs, got); d != "" {
				t.Fatalf("errors (-want +got):\n%s", d)
			}
			if len(errs) == 0 {
				if _, err := New(cfg, connect.Env{}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	cfg, _ := p.ParseConfig(map[string]string{KeyURL: "http://a:9200", KeyWriteMethod: "upsert", KeyIndex: "View-${table}"})
	o, err := parseOptions(cfg, connect.Env{})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink(o, nil)
	name, err := s.index(nil, "Srv.Inventory.Customers")
	if err != nil || string(name) != "view-customers" || !o.upsert || o.batchSize != 2000 || o.inFlight != 5 || o.malformed != MalformedDLQ || o.nullValues != NullDelete {
		t.Fatalf("options %+v, index %q %v", o, name, err)
	}
	if _, err := s.index(nil, "a.b.with space"); err == nil || !strings.Contains(err.Error(), "invalid index name") {
		t.Fatalf("index of a topic with a space: %v", err)
	}
}

// runtimeKey reports whether a key belongs to the runtime (connect/runtime declares and handles
// it for every sink).
func runtimeKey(name string) bool {
	for _, k := range []string{"name", "connector.class", "tasks.max", "topics", "topics.regex", "transforms", "predicates"} {
		if name == k {
			return true
		}
	}
	for _, p := range []string{"transforms.", "predicates.", "errors.", "consumer.override.", "key.converter", "value.converter", "header.converter"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
