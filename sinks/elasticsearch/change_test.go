package elasticsearch

// This file is shared word for word (but the package clause) with the other view sink, so
// both read records and render keys the same way.

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

func TestAppendKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  any
		want string
		err  string
	}{
		{name: "integer column", key: connect.Row{{Name: "id", Value: int64(42)}}, want: "42"},
		{name: "negative", key: connect.Row{{Name: "id", Value: int64(-7)}}, want: "-7"},
		{name: "unsigned beyond int64", key: connect.Row{{Name: "id", Value: uint64(1 << 63)}}, want: "9223372036854775808"},
		{name: "string column kept as is", key: connect.Row{{Name: "code", Value: `a:b\c`}}, want: `a:b\c`},
		{name: "float", key: connect.Row{{Name: "x", Value: 1.5}}, want: "1.5"},
		{name: "bool", key: connect.Row{{Name: "x", Value: true}}, want: "true"},
		{name: "bytes as base64", key: connect.Row{{Name: "x", Value: []byte{0xff, 0}}}, want: "/wA="},
		{name: "time", key: connect.Row{{Name: "x", Value: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)}}, want: "2024-05-06T07:08:09Z"},
		{name: "null column", key: connect.Row{{Name: "x", Value: nil}}, want: ""},
		{name: "composite", key: connect.Row{{Name: "order", Value: int64(1001)}, {Name: "line", Value: int64(3)}}, want: "1001:3"},
		{name: "composite escapes", key: connect.Row{{Name: "a", Value: "x:y"}, {Name: "b", Value: `z\`}}, want: `x\:y:z\\`},
		{name: "composite keeps column order", key: connect.Row{{Name: "b", Value: "2"}, {Name: "a", Value: "1"}}, want: "2:1"},
		{name: "composite with nested", key: connect.Row{{Name: "a", Value: connect.Row{{Name: "k", Value: "v"}}}, {Name: "b", Value: int64(1)}}, want: `{"k"\:"v"}:1`},
		{name: "scalar key", key: "outbox-1", want: "outbox-1"},
		{name: "scalar integer key", key: int64(5), want: "5"},
		{name: "no key", key: nil, err: "record has no key (a view needs the primary key to identify the row)"},
		{name: "empty key", key: connect.Row{}, err: "record key has no columns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := appendKey([]byte("prefix:"), tc.key)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("appendKey(%v) error = %v, want %q", tc.key, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := strings.TrimPrefix(string(got), "prefix:"); g != tc.want {
				t.Fatalf("appendKey(%v) = %q, want %q", tc.key, g, tc.want)
			}
		})
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
		want    change
		wantErr string
	}{
		{name: "tombstone", rec: connect.Record{Value: nil}, want: change{kind: changeDelete, tombstone: true}},
		{name: "insert", rec: connect.Record{Value: env(connect.OpCreate, nil, row)}, want: change{kind: changeWrite, row: row}},
		{name: "update", rec: connect.Record{Value: env(connect.OpUpdate, row, row)}, want: change{kind: changeWrite, row: row}},
		{name: "snapshot read", rec: connect.Record{Value: env(connect.OpRead, nil, row)}, want: change{kind: changeWrite, row: row}},
		{name: "delete", rec: connect.Record{Value: env(connect.OpDelete, row, nil)}, want: change{kind: changeDelete}},
		{name: "truncate", rec: connect.Record{Value: env(connect.OpTruncate, nil, nil)}, want: change{kind: changeSkip}},
		{name: "flat row", rec: connect.Record{Value: row}, want: change{kind: changeWrite, row: row}},
		{name: "rewrite: live row", rec: connect.Record{Value: append(row.Clone(), connect.Field{Name: "__deleted", Value: "false"})},
			want: change{kind: changeWrite, row: row}},
		{name: "rewrite: deleted row", rec: connect.Record{Value: append(row.Clone(), connect.Field{Name: "__deleted", Value: "true"})},
			want: change{kind: changeDelete}},
		{name: "deleted as a boolean", rec: connect.Record{Value: append(row.Clone(), connect.Field{Name: "__deleted", Value: true})},
			want: change{kind: changeDelete}},
		{name: "unchanged columns", rec: connect.Record{Headers: unchanged,
			Value: env(connect.OpUpdate, nil, append(row.Clone(), connect.Field{Name: "bio", Value: "__debezium_unavailable_value"}))},
			want: change{kind: changeWrite, row: row, unchanged: []string{"bio", "big"}}},
		{name: "unchanged columns of a flat row", rec: connect.Record{Headers: unchanged, Value: row},
			want: change{kind: changeWrite, row: row, unchanged: []string{"bio", "big"}}},
		{name: "string value", rec: connect.Record{Value: "hello"}, wantErr: "value is a string, not a row or a change event"},
		{name: "array value", rec: connect.Record{Value: []any{int64(1)}}, wantErr: "value is an array, not a row or a change event"},
		{name: "bad op", rec: connect.Record{Value: connect.Row{{Name: "op", Value: "x"}}}, wantErr: `change event: op "x": want one of c, u, d, r, t`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := interpret(&tc.rec)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("interpret error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(change{})); d != "" {
				t.Fatalf("interpret (-want +got):\n%s", d)
			}
		})
	}
}

func TestTemplate(t *testing.T) {
	tp := splitTopic("dbserver1.inventory.customers")
	if tp != (topicParts{topic: "dbserver1.inventory.customers", db: "inventory", table: "customers"}) {
		t.Fatalf("splitTopic = %+v", tp)
	}
	if tp := splitTopic("plain"); tp != (topicParts{topic: "plain", table: "plain"}) {
		t.Fatalf("splitTopic(plain) = %+v", tp)
	}
	tmpl, err := parseTemplate("v-${db}-${table}", "topic", "db", "table", "key.")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := tmpl.render(nil, func(dst []byte, ph string) ([]byte, error) { return append(dst, strings.ToUpper(ph)...), nil })
	if string(got) != "v-DB-TABLE" {
		t.Fatalf("render = %q", got)
	}
	for in, want := range map[string]string{
		"${tabel}":   "unknown placeholder ${tabel}; use ${topic}, ${db}, ${table}, ${key.<column>}",
		"x-${table":  `unclosed placeholder in "x-${table"`,
		"${key.}":    "unknown placeholder ${key.}; use ${topic}, ${db}, ${table}, ${key.<column>}",
		"${key.id}x": "",
	} {
		_, err := parseTemplate(in, "topic", "db", "table", "key.")
		if (err == nil) != (want == "") || err != nil && err.Error() != want {
			t.Errorf("parseTemplate(%q) error = %v, want %q", in, err, want)
		}
	}
}
