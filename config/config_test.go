package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/sinks/file"
	"github.com/sluice-cdc/sluice/sources/datagen"
)

func checker(t testing.TB) runtime.Checker {
	reg, err := connect.NewRegistry(datagen.Plugin(), file.Plugin())
	if err != nil {
		t.Fatal(err)
	}
	return runtime.Checker{Registry: reg}
}

var testEnv = map[string]string{"PREFIX": "demo", "BAD_KEYS": "s3cr3t-value", "ZERO": "0"}

func lookup(name string) (string, bool) {
	v, ok := testEnv[name]
	return v, ok
}

// load runs the whole pipeline of checks on one file's text: Parse, Resolve, Check.
func load(t testing.TB, text string) (*config.Pipeline, []string) {
	p, err := config.OpenBytes("pipeline.yaml", []byte(text), lookup, checker(t))
	if err == nil {
		return p, nil
	}
	return p, strings.Split(err.Error(), "\n")
}

const valid = `log:
  dir: /var/lib/sluice
  partitions: 3
connectors:
  - name: gen
    class: datagen
    config:
      topic.prefix: ${env:PREFIX}
      datagen.keys: 100
      datagen.tables: [customers, orders]
  - name: out
    class: file
    config:
      topics.regex: demo\..*
      file: /tmp/out.jsonl
`

func TestValidPipeline(t *testing.T) {
	p, errs := load(t, valid)
	if errs != nil {
		t.Fatalf("errors: %q", errs)
	}
	if p.Log.Dir != "/var/lib/sluice" || p.Log.Partitions != 3 || p.Log.Fsync != config.FsyncAlways {
		t.Fatalf("log settings %+v", p.Log)
	}
	if len(p.Connectors) != 2 {
		t.Fatalf("%d connectors", len(p.Connectors))
	}
	gen := p.Connectors[0]
	want := map[string]string{"topic.prefix": "${env:PREFIX}", "datagen.keys": "100", "datagen.tables": "customers,orders"}
	if diff := cmp.Diff(want, gen.Config); diff != "" {
		t.Fatalf("config as written (-want +got):\n%s", diff)
	}
	want["topic.prefix"] = "demo"
	if diff := cmp.Diff(want, gen.Resolved()); diff != "" {
		t.Fatalf("resolved config (-want +got):\n%s", diff)
	}
}

func TestMalformedPipelines(t *testing.T) {
	dir := t.TempDir()
	props := filepath.Join(dir, "secrets.properties")
	if err := os.WriteFile(props, []byte("# creds\nkeys = 25\nbad: -3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		text string
		want []string
	}{
		{"unclosed flow list", "log: [a, b\n", []string{
			"pipeline.yaml:1:6: invalid YAML: sequence end token ']' not found"}},
		{"tab indentation", "log:\n\tdir: /x\n", []string{
			"pipeline.yaml:2:1: invalid YAML: found character '\\t' that cannot start any token"}},
		{"empty file", "", []string{
			"pipeline.yaml:1:1: the file is empty: want a mapping with log and connectors"}},
		{"top level list", "- log\n", []string{
			"pipeline.yaml:1:1: must be a mapping (got a list)"}},
		{"misspelled top key", "log:\n  dir: /x\nconnector: []\n", []string{
			`pipeline.yaml:3:1: connector: unknown key; did you mean "connectors"?`}},
		{"unknown top key", "log:\n  dir: /x\nworkers: 3\n", []string{
			"pipeline.yaml:3:1: workers: unknown key; known keys: log, rest, connectors"}},
		{"no log", "connectors: []\n", []string{
			"pipeline.yaml:1:1: log: is required: set log.dir, the directory of the log's data"}},
		{"log without dir", "log:\n  partitions: 2\n", []string{
			"pipeline.yaml:1:1: log.dir: is required (the directory of the log's data)"}},
		{"empty dir", "log:\n  dir: \"\"\n", []string{
			`pipeline.yaml:2:8: log.dir: must not be empty`}},
		{"dir is a list", "log:\n  dir: [a]\n", []string{
			"pipeline.yaml:2:8: log.dir: must be a single value (got a list)"}},
		{"null dir", "log:\n  dir:\n", []string{
			`pipeline.yaml:2:3: log.dir: must have a value (write "" for an empty one)`}},
		{"bad fsync", "log:\n  dir: /x\n  fsync: sometimes\n", []string{
			`pipeline.yaml:3:10: log.fsync: must be always or unsafe-never (got "sometimes")`}},
		{"zero partitions", "log:\n  dir: /x\n  partitions: 0\n", []string{
			"pipeline.yaml:3:15: log.partitions: must be 1..10000 (got 0)"}},
		{"text partitions", "log:\n  dir: /x\n  partitions: many\n", []string{
			"pipeline.yaml:3:15: log.partitions: must be 1..10000 (got many)"}},
		{"misspelled log key", "log:\n  dir: /x\n  partitons: 3\n", []string{
			`pipeline.yaml:3:3: log.partitons: unknown key; did you mean "partitions"?`}},
		{"bad topic setting", "log:\n  dir: /x\n  topic:\n    retention.ms: soon\n", []string{
			`pipeline.yaml:4:5: log.topic.retention.ms: must be an integer number of milliseconds (got "soon")`}},
		{"unknown topic setting", "log:\n  dir: /x\n  topic:\n    retention.mss: 5\n", []string{
			`pipeline.yaml:4:5: log.topic.retention.mss: unknown topic config key (did you mean "retention.ms"?)`}},
		{"cluster nodes", "log:\n  dir: /x\n  cluster:\n    nodes: [a:1, b:2]\n", []string{
			`pipeline.yaml:4:12: log.cluster.nodes[0]: must be id=host:port with an id > 0 (got "a:1")`,
			`pipeline.yaml:4:12: log.cluster.nodes[1]: must be id=host:port with an id > 0 (got "b:2")`}},
		{"placeholder in log dir", "log:\n  dir: ${env:DIR}\n", []string{
			"pipeline.yaml:2:8: log.dir: placeholders are resolved only in connector config values"}},
		{"connectors is a mapping", "log:\n  dir: /x\nconnectors:\n  gen: {}\n", []string{
			"pipeline.yaml:4:6: connectors: must be a list of connectors (got a mapping)"}},
		{"connector is a string", "log:\n  dir: /x\nconnectors:\n  - gen\n", []string{
			"pipeline.yaml:4:5: connectors[0]: must be a mapping (got a string)"}},
		{"connector without name", "log:\n  dir: /x\nconnectors:\n  - class: datagen\n", []string{
			"pipeline.yaml:4:5: connectors[0].name: is required"}},
		{"misspelled connector key", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    clas: datagen\n", []string{
			"pipeline.yaml:4:5: connectors[gen].class: is required (the connector class, one of datagen, file)",
			`pipeline.yaml:5:5: connectors[gen].clas: unknown key; did you mean "class"?`}},
		{"duplicate connector name", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n  - name: gen\n    class: datagen\n", []string{
			`pipeline.yaml:6:5: connectors[gen].name: duplicate connector name "gen"; first at pipeline.yaml:4:5`}},
		{"duplicate config key", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.keys: 1\n      datagen.keys: 2\n", []string{
			"pipeline.yaml:8:7: connectors[gen].config.datagen.keys: duplicate key; first at line 7"}},
		{"nested config mapping", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen:\n        keys: 1\n", []string{
			"pipeline.yaml:8:13: connectors[gen].config.datagen: must be a single value or a list; write nested keys with dots, e.g. datagen.<key>: value"}},
		{"null config value", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.keys:\n", []string{
			`pipeline.yaml:7:7: connectors[gen].config.datagen.keys: must have a value (write "" for an empty one)`}},
		{"unknown class", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagne\n", []string{
			`pipeline.yaml:5:5: connectors[gen].class: unknown connector class "datagne"; did you mean "datagen"?`}},
		{"unknown class far off", "log:\n  dir: /x\nconnectors:\n  - name: db\n    class: io.debezium.connector.mysql.MySqlConnector\n", []string{
			`pipeline.yaml:5:5: connectors[db].class: unknown connector class "io.debezium.connector.mysql.MySqlConnector"; known: datagen, file`}},
		{"misspelled config key", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.key: 5\n", []string{
			`pipeline.yaml:7:7: connectors[gen].config.datagen.key: unknown key; did you mean "datagen.keys"?`}},
		{"wrong type", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.keys: lots\n", []string{
			`pipeline.yaml:7:7: connectors[gen].config.datagen.keys: must be an integer (got "lots")`}},
		{"out of range", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.batch.size: 0\n", []string{
			"pipeline.yaml:7:7: connectors[gen].config.datagen.batch.size: must be 1..100000 (got 0)"}},
		{"bad boolean", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      tombstones.on.delete: yes\n", []string{
			`pipeline.yaml:7:7: connectors[gen].config.tombstones.on.delete: must be true or false (got "yes")`}},
		{"missing required key", "log:\n  dir: /x\nconnectors:\n  - name: out\n    class: file\n    config:\n      topics: a\n", []string{
			"pipeline.yaml:6:5: connectors[out].config.file: is required (path of the file to append to (created if missing); \"-\" (quoted in YAML) writes to standard output)"}},
		{"missing required without config", "log:\n  dir: /x\nconnectors:\n  - name: out\n    class: file\n", []string{
			"pipeline.yaml:4:5: connectors[out].config.file: is required (path of the file to append to (created if missing); \"-\" (quoted in YAML) writes to standard output)",
			"pipeline.yaml:4:5: connectors[out].config.topics: is required: set topics or topics.regex"}},
		{"unknown placeholder", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      topic.prefix: ${vault:prefix}\n", []string{
			`pipeline.yaml:7:21: connectors[gen].config.topic.prefix: unknown placeholder "${vault:prefix}": want ${env:NAME} or ${file:/path:key}`}},
		{"unterminated placeholder", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      topic.prefix: a${env:PREFIX\n", []string{
			`pipeline.yaml:7:21: connectors[gen].config.topic.prefix: unterminated placeholder "${env:PREFIX": want ${env:NAME} or ${file:/path:key}`}},
		{"bad env name", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      topic.prefix: ${env:A-B}\n", []string{
			`pipeline.yaml:7:21: connectors[gen].config.topic.prefix: bad placeholder "${env:A-B}": want ${env:NAME} with NAME of A-Z a-z 0-9 _`}},
		{"env not set", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      topic.prefix: ${env:NOPE}\n", []string{
			"pipeline.yaml:7:7: connectors[gen].config.topic.prefix: environment variable NOPE is not set (from ${env:NOPE})"}},
		{"unresolved required key", "log:\n  dir: /x\nconnectors:\n  - name: out\n    class: file\n    config:\n      topics: a\n      file: ${env:NOPE}/out\n", []string{
			"pipeline.yaml:8:7: connectors[out].config.file: environment variable NOPE is not set (from ${env:NOPE})"}},
		{"file missing", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.keys: ${file:/nonexistent/s.properties:keys}\n", []string{
			"pipeline.yaml:7:7: connectors[gen].config.datagen.keys: ${file:/nonexistent/s.properties:keys}: cannot read /nonexistent/s.properties: no such file or directory"}},
		{"file key missing", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.keys: ${file:" + props + ":nokey}\n", []string{
			"pipeline.yaml:7:7: connectors[gen].config.datagen.keys: ${file:" + props + `:nokey}: the file has no key "nokey"`}},
		{"secret stays hidden", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.keys: ${env:BAD_KEYS}\n", []string{
			"pipeline.yaml:7:7: connectors[gen].config.datagen.keys: must be an integer (got ${env:BAD_KEYS})"}},
		{"short secret stays hidden", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.batch.size: ${env:ZERO}\n", []string{
			"pipeline.yaml:7:7: connectors[gen].config.datagen.batch.size: must be 1..100000 (got ${env:ZERO})"}},
		{"file secret stays hidden", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.keys: ${file:" + props + ":bad}\n", []string{
			"pipeline.yaml:7:7: connectors[gen].config.datagen.keys: must be 1..1099511627776 (got ${file:" + props + ":bad})"}},
		{"anchors", "log:\n  dir: &d /x\n", []string{
			"pipeline.yaml:2:8: log.dir: anchors and aliases are not supported; write the value out"}},
		{"merge key", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      <<: {a: 1}\n", []string{
			"pipeline.yaml:7:7: connectors[gen].config: merge keys (<<) are not supported; write the keys out"}},
		{"two documents", "log:\n  dir: /x\n---\nconnectors: []\n", []string{
			"pipeline.yaml:4:11: more than one YAML document; put each pipeline part in its own file"}},
		{"bad connector name", "log:\n  dir: /x\nconnectors:\n  - name: my gen\n    class: datagen\n", []string{
			`pipeline.yaml:4:5: connectors[my gen].name: must be 1 to 200 of A-Z a-z 0-9 . _ - (got "my gen")`}},
		{"bad tolerance", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      errors.tolerance: some\n", []string{
			`pipeline.yaml:7:7: connectors[gen].config.errors.tolerance: must be one of none, all (got "some")`}},
		{"topics and regex", "log:\n  dir: /x\nconnectors:\n  - name: out\n    class: file\n    config:\n      file: /tmp/o\n      topics: a\n      topics.regex: b.*\n", []string{
			"pipeline.yaml:9:7: connectors[out].config.topics.regex: must not be set together with topics"}},
		{"class twice", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      connector.class: file\n", []string{
			`pipeline.yaml:5:5: connectors[gen].class: names "file" but the connector's class is "datagen"`}},
		{"every problem at once", "log:\n  dir: /x\n  fsync: no\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.keys: 0\n      datagen.rate: fast\n  - name: out\n    class: file\n    config:\n      file: /tmp/o\n", []string{
			`pipeline.yaml:3:10: log.fsync: must be always or unsafe-never (got "no")`,
			"pipeline.yaml:8:7: connectors[gen].config.datagen.keys: must be 1..1099511627776 (got 0)",
			`pipeline.yaml:9:7: connectors[gen].config.datagen.rate: must be a number (got "fast")`,
			"pipeline.yaml:12:5: connectors[out].config.topics: is required: set topics or topics.regex",
		}},
		{"every problem of the connectors at once", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.keys: 0\n      datagen.rate: fast\n  - name: out\n    class: file\n    config:\n      file: /tmp/o\n", []string{
			"pipeline.yaml:7:7: connectors[gen].config.datagen.keys: must be 1..1099511627776 (got 0)",
			`pipeline.yaml:8:7: connectors[gen].config.datagen.rate: must be a number (got "fast")`,
			"pipeline.yaml:11:5: connectors[out].config.topics: is required: set topics or topics.regex",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := load(t, tc.text)
			if diff := cmp.Diff(tc.want, errs); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			for _, e := range errs {
				if strings.Contains(e, "s3cr3t-value") {
					t.Fatalf("a resolved secret leaked: %s", e)
				}
			}
		})
	}
}

func errorsAs(err error, target *config.Errors) bool {
	e, ok := err.(config.Errors)
	if ok {
		*target = e
	}
	return ok
}
