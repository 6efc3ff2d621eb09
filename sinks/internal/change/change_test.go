package change

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

// The one table that pins how every view names a row: a change here changes the id of stored
// documents and keys.
func TestAppendKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  any
		want string
		err  string
	}{
		{name: "integer column", key: connect.Row{{Name: "id", Value: int64(42)}}, want: "42"},
		{name: "negative", key: connect.Row{{Name: "id", Value: int64(-7)}}, want: "-7"},
		{name: "smallest integer", key: connect.Row{{Name: "id", Value: int64(math.MinInt64)}}, want: "-9223372036854775808"},
		{name: "unsigned beyond int64", key: connect.Row{{Name: "id", Value: uint64(1 << 63)}}, want: "9223372036854775808"},
		{name: "string column kept as is", key: connect.Row{{Name: "code", Value: `a:b\c`}}, want: `a:b\c`},
		{name: "float", key: connect.Row{{Name: "x", Value: 1.5}}, want: "1.5"},
		{name: "large float", key: connect.Row{{Name: "x", Value: 1e21}}, want: "1e+21"},
		{name: "bool", key: connect.Row{{Name: "x", Value: true}}, want: "true"},
		{name: "bytes as base64", key: connect.Row{{Name: "x", Value: []byte{0xff, 0}}}, want: "/wA="},
		{name: "time", key: connect.Row{{Name: "x", Value: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)}}, want: "2024-05-06T07:08:09Z"},
		{name: "null column", key: connect.Row{{Name: "x", Value: nil}}, want: ""},
		{name: "composite", key: connect.Row{{Name: "order", Value: int64(1001)}, {Name: "line", Value: int64(3)}}, want: "1001:3"},
		{name: "composite of negative and unsigned", key: connect.Row{{Name: "a", Value: int64(-1)}, {Name: "b", Value: uint64(math.MaxUint64)}, {Name: "c", Value: false}}, want: "-1:18446744073709551615:false"},
		{name: "composite escapes", key: connect.Row{{Name: "a", Value: "x:y"}, {Name: "b", Value: `z\`}}, want: `x\:y:z\\`},
		{name: "composite escapes times", key: connect.Row{{Name: "a", Value: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)}, {Name: "b", Value: int64(1)}}, want: `2024-05-06T07\:08\:09Z:1`},
		{name: "composite keeps column order", key: connect.Row{{Name: "b", Value: "2"}, {Name: "a", Value: "1"}}, want: "2:1"},
		{name: "composite with nested", key: connect.Row{{Name: "a", Value: connect.Row{{Name: "k", Value: "v"}}}, {Name: "b", Value: int64(1)}}, want: `{"k"\:"v"}:1`},
		{name: "composite with a null", key: connect.Row{{Name: "a", Value: nil}, {Name: "b", Value: int64(1)}}, want: `:1`},
		{name: "scalar key", key: "outbox-1", want: "outbox-1"},
		{name: "scalar integer key", key: int64(5), want: "5"},
		{name: "no key", key: nil, err: "record has no key (a view needs the primary key to identify the row)"},
		{name: "empty key", key: connect.Row{}, err: "record key has no columns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AppendKey([]byte("prefix:"), tc.key)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("AppendKey(%v) error = %v, want %q", tc.key, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := strings.TrimPrefix(string(got), "prefix:"); g != tc.want {
				t.Fatalf("AppendKey(%v) = %q, want %q", tc.key, g, tc.want)
			}
		})
	}
}

// TestAppendValueFastPaths: integers and booleans, rendered without JSON, render as their JSON
// text (the documented rendering of every non-string value).
func TestAppendValueFastPaths(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vals := []any{int64(0), int64(-1), int64(math.MaxInt64), int64(math.MinInt64), uint64(0), uint64(math.MaxUint64), true, false}
	for range 1000 {
		vals = append(vals, int64(rng.Uint64()), rng.Uint64(), rng.Int64N(1000)-500)
	}
	for _, v := range vals {
		j, err := connect.AppendJSON(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, escape := range []bool{false, true} {
			got, err := AppendValue(nil, v, escape)
			if err != nil || string(got) != string(j) {
				t.Fatalf("AppendValue(%T %v, %v) = %q, %v; its JSON is %s", v, v, escape, got, err, j)
			}
		}
	}
}

func TestInterpret(t *testing.T) {
	row := connect.Row{{Name: "id", Value: int64(1)}, {Name: "name", Value: "a"}}
	env := func(op connect.Op, before, after connect.Row) connect.Row {
		ev := connect.ChangeEvent{Op: op, Before: before, After: after, Source: connect.Row{{Name: "table", Value: "t"}}}
		return ev.Row()
	}
	unchanged := connect.Headers{{Key: connect.HeaderUnchanged, Value: []byte("bio, big")}}
	for _, tc := range []struct {
		name    string
		rec     connect.Record
		want    Change
		wantErr string
	}{
		{name: "tombstone", rec: connect.Record{Value: nil}, want: Change{Kind: Delete, Tombstone: true}},
		{name: "insert", rec: connect.Record{Value: env(connect.OpCreate, nil, row)}, want: Change{Kind: Write, Row: row}},
		{name: "update", rec: connect.Record{Value: env(connect.OpUpdate, row, row)}, want: Change{Kind: Write, Row: row}},
		{name: "snapshot read", rec: connect.Record{Value: env(connect.OpRead, nil, row)}, want: Change{Kind: Write, Row: row}},
		{name: "delete", rec: connect.Record{Value: env(connect.OpDelete, row, nil)}, want: Change{Kind: Delete}},
		{name: "truncate", rec: connect.Record{Value: env(connect.OpTruncate, nil, nil)}, want: Change{Kind: Skip}},
		{name: "flat row", rec: connect.Record{Value: row}, want: Change{Kind: Write, Row: row}},
		{name: "rewrite: live row", rec: connect.Record{Value: append(row.Clone(), connect.Field{Name: "__deleted", Value: "false"})},
			want: Change{Kind: Write, Row: row}},
		{name: "rewrite: deleted row", rec: connect.Record{Value: append(row.Clone(), connect.Field{Name: "__deleted", Value: "true"})},
			want: Change{Kind: Delete}},
		{name: "deleted as a boolean", rec: connect.Record{Value: append(row.Clone(), connect.Field{Name: "__deleted", Value: true})},
			want: Change{Kind: Delete}},
		{name: "unchanged columns", rec: connect.Record{Headers: unchanged,
			Value: env(connect.OpUpdate, nil, append(row.Clone(), connect.Field{Name: "bio", Value: "__debezium_unavailable_value"}))},
			want: Change{Kind: Write, Row: row, Unchanged: []string{"bio", "big"}}},
		{name: "unchanged columns of a flat row", rec: connect.Record{Headers: unchanged, Value: row},
			want: Change{Kind: Write, Row: row, Unchanged: []string{"bio", "big"}}},
		{name: "string value", rec: connect.Record{Value: "hello"}, wantErr: "value is a string, not a row or a change event"},
		{name: "array value", rec: connect.Record{Value: []any{int64(1)}}, wantErr: "value is an array, not a row or a change event"},
		{name: "bad op", rec: connect.Record{Value: connect.Row{{Name: "op", Value: "x"}}}, wantErr: `change event: op "x": want one of c, u, d, r, t`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Interpret(&tc.rec)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Interpret error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("Interpret (-want +got):\n%s", d)
			}
		})
	}
}

func TestTemplate(t *testing.T) {
	tp := SplitTopic("dbserver1.inventory.customers")
	if tp != (Topic{Name: "dbserver1.inventory.customers", DB: "inventory", Table: "customers"}) {
		t.Fatalf("SplitTopic = %+v", tp)
	}
	if tp := SplitTopic("plain"); tp != (Topic{Name: "plain", Table: "plain"}) {
		t.Fatalf("SplitTopic(plain) = %+v", tp)
	}
	tmpl, err := ParseTemplate("v-${db}-${table}", "topic", "db", "table", "key.")
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Static() {
		t.Fatal("a template with placeholders is static")
	}
	if lit, _ := ParseTemplate("fixed", "topic"); !lit.Static() {
		t.Fatal("a template without placeholders is not static")
	}
	got, _ := tmpl.Render(nil, func(dst []byte, ph string) ([]byte, error) { return append(dst, strings.ToUpper(ph)...), nil })
	if string(got) != "v-DB-TABLE" {
		t.Fatalf("Render = %q", got)
	}
	for in, want := range map[string]string{
		"${tabel}":   "unknown placeholder ${tabel}; use ${topic}, ${db}, ${table}, ${key.<column>}",
		"x-${table":  `unclosed placeholder in "x-${table"`,
		"${key.}":    "unknown placeholder ${key.}; use ${topic}, ${db}, ${table}, ${key.<column>}",
		"${key.id}x": "",
	} {
		_, err := ParseTemplate(in, "topic", "db", "table", "key.")
		if (err == nil) != (want == "") || err != nil && err.Error() != want {
			t.Errorf("ParseTemplate(%q) error = %v, want %q", in, err, want)
		}
	}
}
