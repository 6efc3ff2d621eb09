package connect

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files")

func mysqlSource(snapshot string, pos int64, row int64) Row {
	return Row{
		{"version", "0.1.0"}, {"connector", "mysql"}, {"name", "dbserver1"},
		{"ts_ms", int64(1732924800000)}, {"snapshot", snapshot}, {"db", "inventory"},
		{"sequence", nil}, {"table", "customers"}, {"server_id", int64(223344)},
		{"gtid", "0-1-42"}, {"file", "mariadb-bin.000003"}, {"pos", pos}, {"row", row},
		{"thread", int64(7)}, {"query", nil},
	}
}

func postgresSource(snapshot string, lsn int64) Row {
	return Row{
		{"version", "0.1.0"}, {"connector", "postgresql"}, {"name", "pgserver1"},
		{"ts_ms", int64(1732924800000)}, {"snapshot", snapshot}, {"db", "inventory"},
		{"sequence", `["24023119","24023128"]`}, {"schema", "public"}, {"table", "customers"},
		{"txId", int64(555)}, {"lsn", lsn}, {"xmin", nil},
	}
}

func customer(id int64, email string) Row {
	return Row{
		{"id", id}, {"first_name", "Anne"}, {"last_name", "Kretchmar"}, {"email", email},
		{"balance", "1234.50"}, {"score", 0.25}, {"active", true}, {"tags", []any{"a", "ü"}},
		{"note", nil},
	}
}

type goldenCase struct {
	name  string
	key   any
	value any // nil: tombstone
}

func goldenCases() []goldenCase {
	key := Row{{"id", int64(1004)}}
	ev := func(e ChangeEvent) any { return e.Row() }
	var out []goldenCase
	for _, src := range []struct {
		prefix string
		source func(snapshot string) Row
	}{
		{"mysql", func(s string) Row { return mysqlSource(s, 484, 0) }},
		{"postgres", func(s string) Row { return postgresSource(s, 24023128) }},
	} {
		p := src.prefix
		out = append(out,
			goldenCase{p + "_c", key, ev(ChangeEvent{Op: OpCreate, After: customer(1004, "annek@noanswer.org"), Source: src.source("false"), TsMs: 1732924800123})},
			goldenCase{p + "_u", key, ev(ChangeEvent{Op: OpUpdate, Before: customer(1004, "annek@noanswer.org"), After: customer(1004, "anne@example.com"), Source: src.source("false"), TsMs: 1732924800124})},
			goldenCase{p + "_d", key, ev(ChangeEvent{Op: OpDelete, Before: customer(1004, "anne@example.com"), Source: src.source("false"), TsMs: 1732924800125})},
			goldenCase{p + "_r", key, ev(ChangeEvent{Op: OpRead, After: customer(1004, "annek@noanswer.org"), Source: src.source("true"), TsMs: 1732924800100})},
			goldenCase{p + "_t", nil, ev(ChangeEvent{Op: OpTruncate, Source: src.source("false"), TsMs: 1732924800126})},
			goldenCase{p + "_tombstone", key, nil},
		)
	}
	return out
}

// render is the golden form: the key's JSON on one line, the value's on the next.
func render(t *testing.T, key, value any) []byte {
	t.Helper()
	k, err := MarshalJSONValue(key)
	if err != nil {
		t.Fatal(err)
	}
	v, err := MarshalJSONValue(value)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(string(k) + "\n" + string(v) + "\n")
}

func TestChangeEventGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", "events", tc.name+".json")
			got := render(t, tc.key, tc.value)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (run go test ./connect -update to create it): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("rendering changed (-want +got):\n%s", cmp.Diff(string(want), string(got)))
			}
			// The golden file parses back into exactly the event that produced it.
			lines := strings.SplitN(string(want), "\n", 3)
			gotKey, err := ParseJSON([]byte(lines[0]))
			if err != nil {
				t.Fatal(err)
			}
			gotValue, err := ParseJSON([]byte(lines[1]))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.key, gotKey); diff != "" {
				t.Errorf("key (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.value, gotValue); diff != "" {
				t.Errorf("value (-want +got):\n%s", diff)
			}
			if tc.value == nil {
				return
			}
			ev, err := ParseChangeEvent(gotValue)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.value, any(ev.Row())); diff != "" {
				t.Errorf("ParseChangeEvent round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDebeziumEnvelope(t *testing.T) {
	// An event as Debezium 2.x renders it with schemas disabled: extra envelope fields are
	// ignored, the images and source block are kept in order.
	in := `{"before":null,"after":{"id":1,"name":"x"},"source":{"connector":"mysql","db":"d","table":"t"},"transaction":null,"op":"c","ts_ms":1700000000000,"ts_us":1700000000000000}`
	var ev ChangeEvent
	if err := ev.UnmarshalJSON([]byte(in)); err != nil {
		t.Fatal(err)
	}
	want := ChangeEvent{Op: OpCreate, After: Row{{"id", int64(1)}, {"name", "x"}}, Source: Row{{"connector", "mysql"}, {"db", "d"}, {"table", "t"}}, TsMs: 1700000000000}
	if diff := cmp.Diff(want, ev); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	out, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), `{"before":null,"after":{"id":1,"name":"x"},"source":{"connector":"mysql","db":"d","table":"t"},"op":"c","ts_ms":1700000000000}`; got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

func TestParseChangeEventErrors(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{`{"id":1}`, `change event: value is not a change event (no "op" field)`},
		{`[1]`, `change event: value is not a change event (got array)`},
		{`{"op":"x"}`, `change event: op "x": want one of c, u, d, r, t`},
		{`{"op":1}`, `change event: field op: want a string, got number`},
		{`{"op":"c","after":null}`, `change event: op c needs an after image`},
		{`{"op":"u","before":{"a":1},"after":null}`, `change event: op u needs an after image`},
		{`{"op":"d","before":null,"after":null}`, `change event: op d needs a before image`},
		{`{"op":"d","before":{"a":1},"after":{"a":1}}`, `change event: op d must not have an after image`},
		{`{"op":"t","after":{"a":1}}`, `change event: op t has no row images`},
		{`{"op":"c","after":[1]}`, `change event: field after: want an object or null, got array`},
		{`{"op":"c","after":{},"ts_ms":"x"}`, `change event: field ts_ms: "x" is not an integer`},
		{`{"op":"c","after":{},"ts_ms":1.5}`, `change event: field ts_ms: 1.5 is not an integer`},
	} {
		v, err := ParseJSON([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		_, err = ParseChangeEvent(v)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got error %v, want %q", tc.in, err, tc.want)
		}
	}
	_, err := ParseChangeEvent(Row{{"id", int64(1)}})
	if !errors.Is(err, ErrNotChangeEvent) {
		t.Errorf("flat row: got %v, want ErrNotChangeEvent", err)
	}
}

func TestOpString(t *testing.T) {
	for _, o := range []Op{OpCreate, OpUpdate, OpDelete, OpRead, OpTruncate} {
		p, err := ParseOp(o.String())
		if err != nil || p != o {
			t.Errorf("ParseOp(%q) = %v, %v", o.String(), p, err)
		}
	}
	if got := Op('z').String(); got != "Op(122)" {
		t.Errorf("invalid op renders %q", got)
	}
}

// Boxed gives every op's letter, as String does, without an allocation.
func TestOpBoxed(t *testing.T) {
	for _, op := range []Op{OpCreate, OpUpdate, OpDelete, OpRead, OpTruncate, Op(0), Op('x')} {
		if got := op.Boxed(); got != op.String() {
			t.Errorf("%v.Boxed() = %v, want %q", op, got, op.String())
		}
	}
	var sink any
	if n := testing.AllocsPerRun(100, func() { sink = OpTruncate.Boxed() }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
	_ = sink
}
