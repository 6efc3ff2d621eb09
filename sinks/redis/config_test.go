package redis

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

func TestPlugin(t *testing.T) {
	p := Plugin()
	if p.Name != "redis" || p.Kind != connect.KindSink || p.Class() != "com.redis.kafka.connect.RedisSinkConnector" {
		t.Fatalf("plugin %s %s %s", p.Name, p.Kind, p.Class())
	}
	for _, k := range p.Config {
		if k.Doc == "" {
			t.Errorf("key %s has no doc", k.Name)
		}
		if runtimeKey(k.Name) {
			t.Errorf("key %s is a runtime-level key: the runtime declares it", k.Name)
		}
	}
	if k, _ := p.Config.Lookup(KeyPassword); !k.IsSecret() {
		t.Error("redis.password is not secret")
	}
}

func TestConfig(t *testing.T) {
	p := Plugin()
	for _, tc := range []struct {
		name string
		raw  map[string]string
		errs []string
	}{
		{name: "defaults", raw: map[string]string{}},
		{name: "Redis Kafka Connect config", raw: map[string]string{KeyURI: "redis://u:p@h:6380/2", KeyType: "HASH", KeyKeyspace: "users", "redis.multiexec": "true"}},
		{name: "cluster", raw: map[string]string{KeyCluster: "true"}, errs: []string{"redis.cluster: Redis Cluster is not supported (got true)"}},
		{name: "bad uri", raw: map[string]string{KeyURI: "http://x"}, errs: []string{`redis.uri: must be a redis:// or rediss:// URI: redis: invalid URL scheme: http`}},
		{name: "bad type", raw: map[string]string{KeyType: "list"}, errs: []string{`redis.type: must be one of hash, json, stream, string (got "list")`}},
		{name: "bad key", raw: map[string]string{KeyKey: "${tables}:${key}"},
			errs: []string{"redis.key: unknown placeholder ${tables}; use ${topic}, ${db}, ${schema}, ${table}, ${key}, ${key.<column>}"}},
		{name: "bad meta prefix", raw: map[string]string{KeyMetaPrefix: "${conector}"}, errs: []string{"redis.meta.prefix: unknown placeholder ${conector}; use ${connector}"}},
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
}

func TestKeys(t *testing.T) {
	p := Plugin()
	rec := connect.Record{Topic: "srv.shop.order_lines", Version: 5,
		Key:   connect.Row{{Name: "order", Value: "o:1"}, {Name: "line", Value: int64(2)}},
		Value: connect.Row{{Name: "qty", Value: int64(1)}}}
	for _, tc := range []struct {
		raw       map[string]string
		key, vkey string
	}{
		{map[string]string{}, `order_lines:o\:1:2`, `__sluice:c1:v:0:order_lines:o\:1:2`},
		{map[string]string{KeyKeyspace: "${topic}", KeySeparator: "|"}, `srv.shop.order_lines|o\:1:2`, `__sluice:c1:v:0:srv.shop.order_lines|o\:1:2`},
		{map[string]string{KeyKey: "${db}/${key.line}/${key.order}", KeyMetaPrefix: "m:"}, `shop/2/o:1`, `m:v:0:shop/2/o:1`},
		{map[string]string{KeyType: "stream"}, `order_lines`, `__sluice:c1:s:0:11:order_lines:o\:1:2`},
		{map[string]string{KeyMetaPrefix: " "}, `order_lines:o\:1:2`, `__sluice:c1:v:0:order_lines:o\:1:2`},
	} {
		cfg, errs := p.ParseConfig(tc.raw)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		s, err := New(cfg, connect.Env{Connector: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		o, ok, err := s.toOp(&rec, 0)
		if err != nil || !ok || o.key != tc.key || o.vkey != tc.vkey {
			t.Errorf("%v: key %q, marker %q (%v), want %q, %q", tc.raw, o.key, o.vkey, err, tc.key, tc.vkey)
		}
	}
	cfg, _ := p.ParseConfig(map[string]string{KeyKey: "${key.nope}"})
	s, _ := New(cfg, connect.Env{})
	if _, _, err := s.toOp(&rec, 0); err == nil || !strings.Contains(err.Error(), "the record key has no column nope") {
		t.Fatalf("missing key column: %v", err)
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
