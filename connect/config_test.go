package connect

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var testDef = ConfigDef{
	{Name: "database.hostname", Type: TypeString, Required: true, Doc: "The MySQL server's host name."},
	{Name: "database.port", Type: TypeInt, Default: "3306", HasDefault: true, Check: InRange(1, 65535)},
	{Name: "database.password", Type: TypePassword},
	{Name: "api.token", Type: TypeString, Secret: true},
	{Name: "snapshot.mode", Type: TypeString, Default: "initial", HasDefault: true, Enum: []string{"initial", "initial_only", "no_data", "when_needed", "never"}},
	{Name: "tombstones.on.delete", Type: TypeBoolean, Default: "true", HasDefault: true},
	{Name: "table.include.list", Type: TypeList},
	{Name: "heartbeat.interval.ms", Type: TypeLong, Default: "0", HasDefault: true, Check: AtLeast(0)},
	{Name: "ratio", Type: TypeDouble, Default: "0.5", HasDefault: true},
	{Name: "column.mask.with.", Prefix: true, Type: TypeList},
	{Name: "tasks.max", Type: TypeInt, Ignored: true, Doc: "sluice runs one task per connector."},
}

func TestConfigParseReportsEverything(t *testing.T) {
	_, errs := testDef.Parse(map[string]string{
		"database.prot":         "3306",
		"database.port":         "0",
		"snapshot.mode":         "sometimes",
		"tombstones.on.delete":  "yes",
		"heartbeat.interval.ms": "-5",
		"ratio":                 "abc",
		"database.password":     "hunter2",
		"completely.unrelated":  "x",
	})
	want := []FieldError{
		{"completely.unrelated", "unknown key"},
		{"database.hostname", "is required (the MySQL server's host name)"},
		{"database.port", "must be 1..65535 (got 0)"},
		{"database.prot", `unknown key; did you mean "database.port"?`},
		{"heartbeat.interval.ms", "must be at least 0 (got -5)"},
		{"ratio", `must be a number (got "abc")`},
		{"snapshot.mode", `must be one of initial, initial_only, no_data, when_needed, never (got "sometimes")`},
		{"tombstones.on.delete", `must be true or false (got "yes")`},
	}
	if diff := cmp.Diff(want, errs); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestConfigSecretNeverInErrors(t *testing.T) {
	def := ConfigDef{{Name: "pw", Type: TypePassword}, {Name: "port", Type: TypeInt, Secret: true}}
	_, errs := def.Parse(map[string]string{"port": "s3cr3t-canary"})
	if len(errs) != 1 || strings.Contains(errs[0].Error(), "s3cr3t-canary") || errs[0].Message != `must be an integer (got "****")` {
		t.Fatalf("errors: %v", errs)
	}
	c, _ := def.Parse(map[string]string{"pw": "s3cr3t-canary", "port": "1"})
	if got := c.Redacted(); got["pw"] != "****" || got["port"] != "****" {
		t.Fatalf("Redacted: %v", got)
	}
	if !def.IsSecret("pw") || def.IsSecret("nope") {
		t.Fatal("IsSecret")
	}
}

func TestConfigAccessors(t *testing.T) {
	c, errs := testDef.Parse(map[string]string{
		"database.hostname":        " db.local ",
		"snapshot.mode":            "WHEN_NEEDED",
		"tombstones.on.delete":     "False",
		"table.include.list":       "inv.a, inv.b ,,",
		"heartbeat.interval.ms":    "1500",
		"column.mask.with.5.chars": "inv.a.ssn",
		"tasks.max":                "1",
	})
	if errs != nil {
		t.Fatal(errs)
	}
	if c.String("database.hostname") != "db.local" || c.Int("database.port") != 3306 || c.Enum("snapshot.mode") != "when_needed" ||
		c.Bool("tombstones.on.delete") || c.Millis("heartbeat.interval.ms").Milliseconds() != 1500 || c.Float("ratio") != 0.5 {
		t.Fatalf("accessors wrong: %v", c.Raw())
	}
	if diff := cmp.Diff([]string{"inv.a", "inv.b"}, c.List("table.include.list")); diff != "" {
		t.Fatal(diff)
	}
	if diff := cmp.Diff(map[string]string{"5.chars": "inv.a.ssn"}, c.WithPrefix("column.mask.with.")); diff != "" {
		t.Fatal(diff)
	}
	if !c.Has("tasks.max") || c.Has("database.port") {
		t.Fatal("Has")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("undeclared key did not panic")
		}
	}()
	c.String("nope")
}

func TestSuggestKey(t *testing.T) {
	if s, ok := SuggestKey("conectors", []string{"connectors", "log"}); !ok || s != "connectors" {
		t.Fatalf("got %q %v", s, ok)
	}
	if _, ok := SuggestKey("zzzzzz", []string{"connectors", "log"}); ok {
		t.Fatal("suggested a far key")
	}
}

func TestRegistry(t *testing.T) {
	src := Plugin{Name: "mysql", Aliases: []string{"io.debezium.connector.mysql.MySqlConnector"}, Kind: KindSource,
		NewSource: func(Config, Env) (Source, error) { return nil, nil }}
	tr := Plugin{Name: "unwrap", Aliases: []string{"io.debezium.transforms.ExtractNewRecordState"}, Kind: KindTransform,
		NewTransform: func(Config) (Transform, error) { return nil, nil }}
	r, err := NewRegistry(src, tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mysql", "io.debezium.connector.mysql.MySqlConnector", "MySqlConnector", "MYSQL"} {
		if p, ok := r.Lookup(name, KindSource, KindSink); !ok || p.Name != "mysql" {
			t.Errorf("Lookup(%q) = %v, %v", name, p.Name, ok)
		}
	}
	if _, ok := r.Lookup("unwrap", KindSource); ok {
		t.Error("found a transform as a source")
	}
	if p := (Plugin{Name: "x"}); p.Class() != "x" || src.Class() != "io.debezium.connector.mysql.MySqlConnector" {
		t.Error("Class")
	}
	if err := r.Register(Plugin{Name: "MySqlConnector", Aliases: []string{"mysql"}, Kind: KindSource, NewSource: src.NewSource}); err == nil || err.Error() != `register plugin MySqlConnector: name "mysql" is taken` {
		t.Errorf("duplicate: %v", err)
	}
	if err := r.Register(Plugin{Name: "es", Kind: KindSink}); err == nil || err.Error() != "register plugin es: no constructor for kind sink" {
		t.Errorf("no constructor: %v", err)
	}
	if diff := cmp.Diff([]string{"mysql", "unwrap"}, r.Names()); diff != "" {
		t.Error(diff)
	}
}

func TestPermanent(t *testing.T) {
	base := Permanentf("bad config %s", "x")
	wrapped := fmtErrorf("start: %w", base)
	if !IsPermanent(wrapped) || IsRetriable(wrapped) || wrapped.Error() != "start: bad config x" {
		t.Fatalf("wrapped permanent: %v", wrapped)
	}
	if Permanent(nil) != nil || IsRetriable(nil) || !IsRetriable(fmtErrorf("io")) {
		t.Fatal("nil / plain")
	}
	if IsRetriable(fmtErrorf("stop: %w", contextCanceledErr())) {
		t.Fatal("cancellation is not retriable")
	}
	we := &WriteError{Failed: []RecordError{{0, fmtErrorf("a")}, {2, fmtErrorf("b")}, {3, fmtErrorf("c")}, {9, fmtErrorf("d")}, {10, fmtErrorf("e")}}}
	if got := we.Error(); got != "5 record(s) rejected; record 0: a; record 2: b; record 3: c; and 2 more" {
		t.Fatal(got)
	}
}

func TestHeaders(t *testing.T) {
	var h Headers
	h = h.Set("a", []byte("1"))
	h = append(h, Header{"b", nil}, Header{"a", []byte("2")})
	if v, ok := h.Get("a"); !ok || string(v) != "2" {
		t.Fatal("Get returns the last")
	}
	h2 := h.Set("a", []byte("3"))
	if diff := cmp.Diff(Headers{{"b", nil}, {"a", []byte("3")}}, h2); diff != "" {
		t.Fatal(diff)
	}
	if v, _ := h.Get("a"); string(v) != "2" {
		t.Fatal("Set modified its input")
	}
	if _, ok := h2.Del("a").Get("a"); ok {
		t.Fatal("Del")
	}
}

func TestRowHelpers(t *testing.T) {
	r := Row{{"a", int64(1)}, {"b", Row{{"c", []any{int64(2)}}}}}
	c := r.Clone()
	c[1].Value.(Row)[0].Value.([]any)[0] = int64(9)
	if v, _ := r.Get("b"); v.(Row)[0].Value.([]any)[0] != int64(2) {
		t.Fatal("Clone shares nested data")
	}
	if got := r.Delete("a"); len(got) != 1 || got[0].Name != "b" || len(r) != 2 {
		t.Fatal("Delete")
	}
	if got := r.Set("z", true).Names(); cmp.Diff([]string{"a", "b", "z"}, got) != "" {
		t.Fatal("Set/Names", got)
	}
	if !(Record{}).IsTombstone() || (Record{Value: Row{}}).IsTombstone() {
		t.Fatal("IsTombstone")
	}
}

func TestConfigBlankValues(t *testing.T) {
	_, errs := testDef.Parse(map[string]string{"database.hostname": "  ", "snapshot.mode": " ", "database.port": ""})
	want := []FieldError{
		{"database.hostname", "is required (the MySQL server's host name)"},
		{"database.port", `must be an integer (got "")`},
	}
	if diff := cmp.Diff(want, errs); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}
