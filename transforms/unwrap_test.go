package transforms

import (
	"testing"

	"github.com/sluice-cdc/sluice/connect"
)

func TestUnwrap(t *testing.T) {
	key := row("id", int64(1004))
	before := row("id", int64(1004), "email", "old@example.com", "address", row("city", "Berlin"))
	after := row("id", int64(1004), "email", "new@example.com", "address", row("city", "Paris"))
	create := rec(key, event(connect.OpCreate, nil, after))
	update := rec(key, event(connect.OpUpdate, before, after))
	read := rec(key, event(connect.OpRead, nil, after))
	del := rec(key, event(connect.OpDelete, before, nil))
	tomb := rec(key, nil)
	trunc := rec(nil, event(connect.OpTruncate, nil, nil))
	heartbeat := rec(row("serverName", "dbserver1"), row("ts_ms", int64(1)))
	val := func(r connect.Record, v any) connect.Record { return with(r, func(r *connect.Record) { r.Value = v }) }

	type step struct {
		name string
		in   connect.Record
		want result
	}
	for _, tc := range []struct {
		name  string
		opts  map[string]string
		steps []step
	}{
		{"default mode is tombstone", nil, []step{
			{"create", create, kept(val(create, after))},
			{"update", update, kept(val(update, after))},
			{"snapshot read", read, kept(val(read, after))},
			{"delete becomes a tombstone", del, kept(val(del, nil))},
			{"source tombstone dropped", tomb, dropped},
			{"truncate dropped", trunc, dropped},
			{"not a change event passes", heartbeat, kept(heartbeat)},
		}},
		{"drop", map[string]string{"delete.tombstone.handling.mode": "drop"}, []step{
			{"create", create, kept(val(create, after))},
			{"delete dropped", del, dropped},
			{"tombstone dropped", tomb, dropped},
		}},
		{"rewrite", map[string]string{"delete.tombstone.handling.mode": "rewrite"}, []step{
			{"create gets __deleted false", create, kept(val(create, append(after.Clone(), connect.Field{Name: "__deleted", Value: "false"})))},
			{"delete is the before row with __deleted true", del, kept(val(del, append(before.Clone(), connect.Field{Name: "__deleted", Value: "true"})))},
			{"tombstone dropped", tomb, dropped},
		}},
		{"rewrite-with-tombstone", map[string]string{"delete.tombstone.handling.mode": "REWRITE-WITH-TOMBSTONE"}, []step{
			{"delete rewritten", del, kept(val(del, append(before.Clone(), connect.Field{Name: "__deleted", Value: "true"})))},
			{"tombstone kept", tomb, kept(tomb)},
		}},
		{"delete-to-tombstone", map[string]string{"delete.tombstone.handling.mode": "delete-to-tombstone"}, []step{
			{"delete becomes a tombstone", del, kept(val(del, nil))},
			{"tombstone dropped", tomb, dropped},
		}},
		{"legacy keys", map[string]string{"drop.tombstones": "false", "delete.handling.mode": "none"}, []step{
			{"delete becomes a tombstone", del, kept(val(del, nil))},
			{"tombstone kept", tomb, kept(tomb)},
		}},
		{"legacy rewrite", map[string]string{"delete.handling.mode": "rewrite"}, []step{
			{"delete rewritten", del, kept(val(del, append(before.Clone(), connect.Field{Name: "__deleted", Value: "true"})))},
			{"tombstone dropped (drop.tombstones defaults to true)", tomb, dropped},
		}},
		{"add.fields", map[string]string{"add.fields": "op,table,source.ts_ms,ts_ms,lsn,db:database", "delete.tombstone.handling.mode": "rewrite"}, []step{
			{"update", update, kept(val(update, append(after.Clone(),
				connect.Field{Name: "__op", Value: "u"},
				connect.Field{Name: "__table", Value: "customers"},
				connect.Field{Name: "__source_ts_ms", Value: int64(1700000000000)},
				connect.Field{Name: "__ts_ms", Value: int64(1700000000123)},
				connect.Field{Name: "__lsn", Value: nil},
				connect.Field{Name: "__database", Value: "inventory"},
				connect.Field{Name: "__deleted", Value: "false"})))},
			{"delete", del, kept(val(del, append(before.Clone(),
				connect.Field{Name: "__op", Value: "d"},
				connect.Field{Name: "__table", Value: "customers"},
				connect.Field{Name: "__source_ts_ms", Value: int64(1700000000000)},
				connect.Field{Name: "__ts_ms", Value: int64(1700000000123)},
				connect.Field{Name: "__lsn", Value: nil},
				connect.Field{Name: "__database", Value: "inventory"},
				connect.Field{Name: "__deleted", Value: "true"})))},
		}},
		{"add.fields.prefix", map[string]string{"add.fields": "op", "add.fields.prefix": "meta_"}, []step{
			{"create", create, kept(val(create, append(after.Clone(), connect.Field{Name: "meta_op", Value: "c"})))},
		}},
		{"add.headers", map[string]string{"add.headers": "op,db,pos,lsn", "delete.tombstone.handling.mode": "rewrite-with-tombstone"}, []step{
			{"update", update, kept(with(update, func(r *connect.Record) {
				r.Value = append(after.Clone(), connect.Field{Name: "__deleted", Value: "false"})
				r.Headers = connect.Headers{hdr("__op", "u"), hdr("__db", "inventory"), hdr("__pos", "154")}
			}))},
			{"tombstone gets only op", tomb, kept(with(tomb, func(r *connect.Record) { r.Headers = connect.Headers{hdr("__op", "d")} }))},
		}},
		{"route.by.field", map[string]string{"route.by.field": "dest", "delete.tombstone.handling.mode": "rewrite"}, []step{
			{"after row routes", rec(key, event(connect.OpCreate, nil, row("id", int64(1), "dest", "eu"))),
				kept(with(rec(key, row("id", int64(1), "dest", "eu", "__deleted", "false")), func(r *connect.Record) { r.Topic = "eu" }))},
			{"delete routes by before", rec(key, event(connect.OpDelete, row("id", int64(1), "dest", "us"), nil)),
				kept(with(rec(key, row("id", int64(1), "dest", "us", "__deleted", "true")), func(r *connect.Record) { r.Topic = "us" }))},
			{"null keeps the topic", rec(key, event(connect.OpCreate, nil, row("id", int64(1), "dest", nil))),
				kept(rec(key, row("id", int64(1), "dest", nil, "__deleted", "false")))},
			{"missing field fails", create, failed(`transform t: route.by.field: the row has no field "dest"`)},
			{"non-string fails", rec(key, event(connect.OpCreate, nil, row("dest", int64(3)))),
				failed(`transform t: route.by.field: field "dest" is integer, want a string`)},
		}},
		{"drop.fields.header.name", map[string]string{"drop.fields.header.name": "drop", "drop.fields.from.key": "true"}, []step{
			{"comma list", rec(row("id", int64(1), "email", "k"), event(connect.OpCreate, nil, after), hdr("drop", "email,address")),
				kept(rec(row("id", int64(1)), row("id", int64(1004)), hdr("drop", "email,address")))},
			{"json list", rec(key, event(connect.OpCreate, nil, after), hdr("drop", `["address"]`)),
				kept(rec(key, row("id", int64(1004), "email", "new@example.com"), hdr("drop", `["address"]`)))},
			{"no header", create, kept(val(create, after))},
		}},
		{"malformed events", nil, []step{
			{"bad op", rec(key, row("op", "x", "after", after)), failed(`transform t: unwrap: change event: op "x": want one of c, u, d, r, t`)},
			{"create without after", rec(key, row("op", "c", "after", nil)), failed(`transform t: unwrap: change event: op c needs an after image`)},
			{"after not an object", rec(key, row("op", "c", "after", "x")), failed(`transform t: unwrap: change event: field after: want an object or null, got string`)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := single(t, "io.debezium.transforms.ExtractNewRecordState", tc.opts)
			for _, s := range tc.steps {
				t.Run(s.name, func(t *testing.T) { checkApply(t, c, s.in, s.want) })
			}
		})
	}
}

// Sinks must keep working after unwrap: the version and the unchanged-columns header survive,
// and a delete is recognizable (tombstone, or __deleted = "true").
func TestUnwrapKeepsWhatSinksNeed(t *testing.T) {
	c := chainOf(t, map[string]string{
		"transforms":                          "unwrap,strip",
		"transforms.unwrap.type":              "unwrap",
		"transforms.unwrap.add.headers":       "op",
		"transforms.strip.type":               "replace_field",
		"transforms.strip.exclude":            "secret",
		"transforms.strip.renames":            "bio:about",
		"transforms.unwrap.add.fields":        "op",
		"transforms.unwrap.add.fields.prefix": "_",
	})
	in := rec(row("id", int64(7)), event(connect.OpUpdate, nil, row("id", int64(7), "secret", "s", "bio", nil)),
		hdr(connect.HeaderVersion, "42"), hdr(connect.HeaderUnchanged, "secret,bio"))
	in.Version = 99
	want := rec(row("id", int64(7)), row("id", int64(7), "about", nil, "_op", "u"),
		hdr(connect.HeaderVersion, "42"), hdr("__op", "u"), hdr(connect.HeaderUnchanged, "about"))
	want.Version = 99
	checkApply(t, c, in, kept(want))

	del := rec(row("id", int64(7)), event(connect.OpDelete, row("id", int64(7)), nil), hdr(connect.HeaderVersion, "43"))
	del.Version = 100
	wantDel := rec(row("id", int64(7)), nil, hdr(connect.HeaderVersion, "43"), hdr("__op", "d"))
	wantDel.Version = 100
	checkApply(t, c, del, kept(wantDel))
}
