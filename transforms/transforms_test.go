package transforms

import (
	"testing"

	"github.com/sluice-cdc/sluice/connect"
)

type applyCase struct {
	name string
	in   connect.Record
	want result
}

type transformCase struct {
	name  string
	typ   string
	opts  map[string]string
	cases []applyCase
}

func runTransformCases(t *testing.T, tcs []transformCase) {
	t.Helper()
	for _, tc := range tcs {
		t.Run(tc.name, func(t *testing.T) {
			c := single(t, tc.typ, tc.opts)
			for _, ac := range tc.cases {
				t.Run(ac.name, func(t *testing.T) { checkApply(t, c, ac.in, ac.want) })
			}
		})
	}
}

func v(r connect.Record, value any) connect.Record {
	return with(r, func(r *connect.Record) { r.Value = value })
}

func k(r connect.Record, key any) connect.Record {
	return with(r, func(r *connect.Record) { r.Key = key })
}

func TestFieldTransforms(t *testing.T) {
	key := row("id", int64(1), "tenant", "a") // composite key
	base := rec(key, row("id", int64(1), "name", "Ann", "password", "pw", "address", row("city", "Oslo", "geo", row("lat", 59.9)), "tags", []any{"x"}, "note", nil))
	tomb := rec(key, nil)
	str := rec(key, "plain")

	runTransformCases(t, []transformCase{
		{"replace_field exclude", "replace_field", map[string]string{"exclude": "password,missing"}, []applyCase{
			{"row", base, kept(v(base, row("id", int64(1), "name", "Ann", "address", row("city", "Oslo", "geo", row("lat", 59.9)), "tags", []any{"x"}, "note", nil)))},
			{"tombstone", tomb, kept(tomb)},
			{"type mismatch", str, failed("transform t: replace_field needs an object, got string")},
		}},
		{"replace_field include and renames (whitelist alias)", "org.apache.kafka.connect.transforms.ReplaceField$Value", map[string]string{"whitelist": "id,name", "renames": "name:full_name"}, []applyCase{
			{"row", base, kept(v(base, row("id", int64(1), "full_name", "Ann")))},
			{"unchanged header follows", with(base, func(r *connect.Record) { r.Headers = connect.Headers{hdr(connect.HeaderUnchanged, "name,password")} }),
				kept(with(base, func(r *connect.Record) {
					r.Value = row("id", int64(1), "full_name", "Ann")
					r.Headers = connect.Headers{hdr(connect.HeaderUnchanged, "full_name")}
				}))},
		}},
		{"replace_field_key", "ReplaceField$Key", map[string]string{"blacklist": "tenant"}, []applyCase{
			{"composite key", base, kept(k(base, row("id", int64(1))))},
			{"null key", k(base, nil), kept(k(base, nil))},
		}},
		{"mask_field", "mask_field", map[string]string{"fields": "name,id,tags,address,note,absent"}, []applyCase{
			{"row", base, kept(v(base, row("id", int64(0), "name", "", "password", "pw", "address", connect.Row{}, "tags", []any{}, "note", nil, "absent", nil)))},
			{"tombstone", tomb, kept(tomb)},
		}},
		{"mask_field replacement", "MaskField$Value", map[string]string{"fields": "name,id", "replacement": "***"}, []applyCase{
			{"number cannot take text", base, failed(`transform t: mask_field: field id: replacement "***" is not an integer`)},
			{"text", v(base, row("name", "Ann")), kept(v(base, row("name", "***", "id", nil)))},
		}},
		{"insert_field", "insert_field", map[string]string{"topic.field": "_topic", "partition.field": "_part", "offset.field": "_off", "timestamp.field": "_ts", "static.field": "origin", "static.value": "sluice"}, []applyCase{
			{"source side: no partition, no offset", v(base, row("id", int64(1))),
				kept(v(base, row("id", int64(1), "_topic", "dbserver1.inventory.customers", "_ts", int64(1700000000100), "origin", "sluice")))},
			{"sink side", with(base, func(r *connect.Record) { r.Value = row("id", int64(1)); r.Partition = 2; r.Offset = 77 }),
				kept(with(base, func(r *connect.Record) {
					r.Value = row("id", int64(1), "_topic", "dbserver1.inventory.customers", "_part", int64(2), "_off", int64(77), "_ts", int64(1700000000100), "origin", "sluice")
					r.Partition = 2
					r.Offset = 77
				}))},
			{"tombstone", tomb, kept(tomb)},
		}},
		{"insert_field required offset", "InsertField$Value", map[string]string{"offset.field": "_off!"}, []applyCase{
			{"source side fails", v(base, row("id", int64(1))), failed("transform t: insert_field: offset.field _off is required but the record has no offset (offsets exist on the sink side only)")},
		}},
		{"insert_field_key", "InsertField$Key", map[string]string{"static.field": "src", "static.value": "eu"}, []applyCase{
			{"key", base, kept(k(base, row("id", int64(1), "tenant", "a", "src", "eu")))},
		}},
		{"value_to_key", "value_to_key", map[string]string{"fields": "name,id,absent"}, []applyCase{
			{"row", base, kept(k(base, row("name", "Ann", "id", int64(1), "absent", nil)))},
			{"tombstone", tomb, kept(tomb)},
			{"type mismatch", str, failed("transform t: value_to_key needs an object, got string")},
		}},
		{"extract_field", "extract_field", map[string]string{"field": "address"}, []applyCase{
			{"nested row", base, kept(v(base, row("city", "Oslo", "geo", row("lat", 59.9))))},
			{"missing field is null", v(base, row("id", int64(1))), kept(v(base, nil))},
			{"tombstone", tomb, kept(tomb)},
		}},
		{"extract_field V2 path", "ExtractField$Value", map[string]string{"field": "address.geo.lat", "field.syntax.version": "V2"}, []applyCase{
			{"nested", base, kept(v(base, 59.9))},
			{"through null", v(base, row("address", nil)), kept(v(base, nil))},
			{"through a string", v(base, row("address", "x")), failed("transform t: extract_field needs an object, got string")},
		}},
		{"extract_field_key", "ExtractField$Key", map[string]string{"field": "id"}, []applyCase{
			{"key", base, kept(k(base, int64(1)))},
		}},
		{"hoist_field", "HoistField$Value", map[string]string{"field": "payload"}, []applyCase{
			{"string", str, kept(v(str, row("payload", "plain")))},
			{"tombstone becomes an object, as in Kafka Connect", tomb, kept(v(tomb, row("payload", nil)))},
		}},
		{"flatten", "flatten", nil, []applyCase{
			{"nested", base, kept(v(base, row("id", int64(1), "name", "Ann", "password", "pw", "address.city", "Oslo", "address.geo.lat", 59.9, "tags", []any{"x"}, "note", nil)))},
			{"tombstone", tomb, kept(tomb)},
		}},
		{"flatten delimiter", "Flatten$Value", map[string]string{"delimiter": "_"}, []applyCase{
			{"nested", v(base, row("a", row("b", int64(1)))), kept(v(base, row("a_b", int64(1))))},
		}},
	})
}

func TestCastAndTimestamps(t *testing.T) {
	r := rec(row("id", int64(1)), row("i", int64(300), "f", 3.99, "s", "42", "b", true, "bytes", []byte("hi"), "big", 1e300, "n", nil))
	runTransformCases(t, []transformCase{
		{"cast fields", "cast", map[string]string{"spec": "i:int8,f:int32,s:int64,b:float64,bytes:string,big:int64,n:string,absent:boolean"}, []applyCase{
			{"java conversions", r, kept(v(r, row("i", int64(44), "f", int64(3), "s", int64(42), "b", 1.0, "bytes", "aGk=", "big", int64(9223372036854775807), "n", nil, "absent", nil)))},
			{"unparsable string", v(r, row("s", "4x")), failed(`transform t: cast: field s: cannot cast "4x" to int64`)},
		}},
		{"cast to string and boolean", "Cast$Value", map[string]string{"spec": "i:string,f:string,s:boolean,b:string,big:string"}, []applyCase{
			{"text", r, kept(v(r, row("i", "300", "f", "3.99", "s", false, "b", "true", "bytes", []byte("hi"), "big", "1.0E300", "n", nil)))},
		}},
		{"cast whole key", "Cast$Key", map[string]string{"spec": "string"}, []applyCase{
			{"int key", k(r, int64(7)), kept(k(r, "7"))},
			{"row key cannot", r, failed("transform t: cast_key: cannot cast object to string")},
		}},
		{"timestamp_converter to string", "timestamp_converter", map[string]string{"field": "ts", "target.type": "string", "format": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"}, []applyCase{
			{"millis", v(r, row("ts", int64(1700000000123))), kept(v(r, row("ts", "2023-11-14T22:13:20.123Z")))},
			{"null", v(r, row("ts", nil)), kept(v(r, row("ts", nil)))},
			{"object", v(r, row("ts", row())), failed("transform t: timestamp_converter: field ts: cannot convert object to a timestamp")},
		}},
		{"timestamp_converter from string", "TimestampConverter$Value", map[string]string{"field": "d", "target.type": "Date", "format": "dd/MM/yyyy"}, []applyCase{
			{"date", v(r, row("d", "15/11/2023")), kept(v(r, row("d", int64(19676))))},
			{"bad", v(r, row("d", "2023-11-15")), failed("transform t: timestamp_converter: field d: cannot parse \"2023-11-15\" with format 02/01/2006")},
		}},
		{"timestamp_converter unix precision", "TimestampConverter$Value", map[string]string{"field": "ts", "target.type": "unix", "unix.precision": "seconds"}, []applyCase{
			{"seconds to seconds", v(r, row("ts", int64(1700000000))), kept(v(r, row("ts", int64(1700000000))))},
		}},
		{"timestamp_converter Time and Timestamp", "TimestampConverter$Value", map[string]string{"target.type": "Time"}, []applyCase{
			{"whole value", v(r, int64(1700000000123)), kept(v(r, int64(80000123)))},
		}},
	})
}

func TestRoutingAndHeaders(t *testing.T) {
	key := row("id", int64(1))
	r := rec(key, row("id", int64(1), "region", "eu", "meta", row("a", int64(1))), hdr("keep", "1"), hdr("drop", "2"), hdr("drop", "3"))
	shard := with(r, func(x *connect.Record) { x.Topic = "dbserver1.shard_2.orders" })
	runTransformCases(t, []transformCase{
		{"route", "org.apache.kafka.connect.transforms.RegexRouter", map[string]string{"regex": `([^.]+)\.([^.]+)\.([^.]+)`, "replacement": "$3-\\$-$1"}, []applyCase{
			{"match", r, kept(with(r, func(x *connect.Record) { x.Topic = "customers-$-dbserver1" }))},
			{"twice (cached)", r, kept(with(r, func(x *connect.Record) { x.Topic = "customers-$-dbserver1" }))},
			{"partial match does not count", with(r, func(x *connect.Record) { x.Topic = "a.b.c.d" }), kept(with(r, func(x *connect.Record) { x.Topic = "a.b.c.d" }))},
		}},
		{"logical_table_router", "io.debezium.transforms.ByLogicalTableRouter", map[string]string{"topic.regex": `(.*)\.shard_\d+\.(.*)`, "topic.replacement": "$1.all.$2"}, []applyCase{
			{"shard", shard, kept(with(shard, func(x *connect.Record) {
				x.Topic = "dbserver1.all.orders"
				x.Key = row("id", int64(1), "__dbz__physicalTableIdentifier", "dbserver1.shard_2.orders")
			}))},
			{"tombstone keeps its key unique too", v(shard, nil), kept(with(shard, func(x *connect.Record) {
				x.Topic = "dbserver1.all.orders"
				x.Value = nil
				x.Key = row("id", int64(1), "__dbz__physicalTableIdentifier", "dbserver1.shard_2.orders")
			}))},
			{"other topic", r, kept(r)},
		}},
		{"logical_table_router key regex", "logical_table_router", map[string]string{"topic.regex": `(.*)\.shard_(\d+)\.(.*)`, "topic.replacement": "$1.all.$3",
			"key.field.name": "shard", "key.field.regex": `.*\.shard_(\d+)\..*`, "key.field.replacement": "$1"}, []applyCase{
			{"shard", shard, kept(with(shard, func(x *connect.Record) { x.Topic = "dbserver1.all.orders"; x.Key = row("id", int64(1), "shard", "2") }))},
		}},
		{"logical_table_router without uniqueness", "logical_table_router", map[string]string{"topic.regex": `.*\.shard_\d+\.(.*)`, "topic.replacement": "$1", "key.enforce.uniqueness": "false"}, []applyCase{
			{"shard", shard, kept(with(shard, func(x *connect.Record) { x.Topic = "orders" }))},
		}},
		{"insert_header", "InsertHeader", map[string]string{"header": "app", "value.literal": "shop"}, []applyCase{
			{"appends", r, kept(with(r, func(x *connect.Record) { x.Headers = append(r.Headers.Clone(), hdr("app", "shop")) }))},
		}},
		{"drop_headers", "DropHeaders", map[string]string{"headers": "drop,absent"}, []applyCase{
			{"all of that name", r, kept(with(r, func(x *connect.Record) { x.Headers = connect.Headers{hdr("keep", "1")} }))},
		}},
		{"header_from move", "HeaderFrom$Value", map[string]string{"fields": "region,meta,id,absent", "headers": "r,m,i,a", "operation": "move"}, []applyCase{
			{"rendering", r, kept(with(r, func(x *connect.Record) {
				x.Value = row()
				x.Headers = append(r.Headers.Clone(), hdr("r", "eu"), hdr("m", `{"a":1}`), hdr("i", "1"), connect.Header{Key: "a"})
			}))},
			{"tombstone", v(r, nil), kept(v(r, nil))},
		}},
		{"header_from_key copy", "HeaderFrom$Key", map[string]string{"fields": "id", "headers": "key_id", "operation": "copy"}, []applyCase{
			{"key", r, kept(with(r, func(x *connect.Record) { x.Headers = append(r.Headers.Clone(), hdr("key_id", "1")) }))},
		}},
	})
}

func TestExpressions(t *testing.T) {
	key := row("id", int64(2))
	upd := rec(key, event(connect.OpUpdate, row("id", int64(2), "status", "new"), row("id", int64(2), "status", "archived", "qty", int64(5), "tags", []any{"a", "b"})), hdr("tenant", "acme"))
	ins := rec(key, event(connect.OpCreate, nil, row("id", int64(3), "status", "active", "qty", 2.5)))
	del := rec(key, event(connect.OpDelete, row("id", int64(2), "status", "x"), nil))
	tomb := rec(key, nil)
	flat := rec(key, row("id", int64(2), "__op", "u"))
	runTransformCases(t, []transformCase{
		{"filter on after", "filter", map[string]string{"condition": `value.after.status != "archived"`}, []applyCase{
			{"archived dropped", upd, dropped},
			{"active kept", ins, kept(ins)},
			{"delete: after is null, so the field is null", del, kept(del)},
			{"tombstone kept (null.handling.mode=keep)", tomb, kept(tomb)},
		}},
		{"filter Debezium's example", "io.debezium.transforms.Filter", map[string]string{"language": "jsr223.groovy", "condition": "value.op == 'u' && value.before.id == 2"}, []applyCase{
			{"update of id 2 kept", upd, kept(upd)},
			{"insert dropped", ins, dropped},
		}},
		{"filter variables", "filter", map[string]string{"condition": `op in ["c", "u"] && headers.tenant == "acme" && header.tenant.value == "acme" && topic matches "inventory" && key.id == 2 && value.after.qty >= 5 && "b" in value.after.tags && "qty" in value.after && value.after.tags[-1] == "b" && partition == -1 && timestamp == 1700000000100`}, []applyCase{
			{"all true", upd, kept(upd)},
			{"missing header", ins, dropped},
		}},
		{"filter op after unwrap", "filter", map[string]string{"condition": `op == "u"`}, []applyCase{
			{"__op field", flat, kept(flat)},
			{"header", rec(key, row("id", int64(1)), hdr("__op", "d")), dropped},
		}},
		{"filter null handling drop", "filter", map[string]string{"condition": "true", "null.handling.mode": "drop"}, []applyCase{
			{"tombstone", tomb, dropped},
		}},
		{"filter null handling evaluate", "filter", map[string]string{"condition": `value == nil`, "null.handling.mode": "evaluate"}, []applyCase{
			{"tombstone", tomb, kept(tomb)},
			{"row", ins, dropped},
		}},
		{"filter topic.regex", "filter", map[string]string{"condition": "false", "topic.regex": `.*\.orders`}, []applyCase{
			{"other topic untouched", ins, kept(ins)},
			{"matching topic filtered", with(ins, func(x *connect.Record) { x.Topic = "a.orders" }), dropped},
		}},
		{"filter runtime errors", "filter", map[string]string{"condition": `value.after.status.length > 1`}, []applyCase{
			{"field of a string", ins, failed(`transform t: filter: evaluate "value.after.status.length > 1": cannot read field length of string (1:20)`)},
		}},
		{"filter memory budget", "filter", map[string]string{"condition": `len(1..1000000) > 0`}, []applyCase{
			{"refused", ins, failed(`transform t: filter: evaluate "len(1..1000000) > 0": memory budget exceeded (1:6)`)},
		}},
		{"filter non-boolean result", "filter", map[string]string{"condition": `value.after.status`}, []applyCase{
			{"string", ins, failed(`transform t: filter: evaluate "value.after.status": want a boolean, got string`)},
		}},
		{"content_router", "io.debezium.transforms.ContentBasedRouter", map[string]string{"topic.expression": `value.after.qty > 3 ? "big." + topic : nil`}, []applyCase{
			{"routed", upd, kept(with(upd, func(x *connect.Record) { x.Topic = "big.dbserver1.inventory.customers" }))},
			{"null keeps", ins, kept(ins)},
			{"tombstone kept", tomb, kept(tomb)},
		}},
		{"content_router bad result", "content_router", map[string]string{"topic.expression": `value.after.qty`}, []applyCase{
			{"number", ins, failed("transform t: content_router: topic.expression gave number, want a string or null")},
		}},
	})
}

func TestPredicates(t *testing.T) {
	r := rec(row("id", int64(1)), row("id", int64(1), "vip", true), hdr("trace", ""))
	for _, tc := range []struct {
		name string
		typ  string
		opts map[string]string
		in   connect.Record
		want bool
	}{
		{"topic matches whole name", "TopicNameMatches", map[string]string{"pattern": `dbserver1\..*`}, r, true},
		{"topic prefix is not a match", "TopicNameMatches", map[string]string{"pattern": `dbserver1`}, r, false},
		{"has header", "HasHeaderKey", map[string]string{"name": "trace"}, r, true},
		{"has no header", "HasHeaderKey", map[string]string{"name": "span"}, r, false},
		{"tombstone", "RecordIsTombstone", nil, v(r, nil), true},
		{"not tombstone", "RecordIsTombstone", nil, r, false},
		{"expression", "expression", map[string]string{"condition": "value.vip"}, r, true},
		{"expression on tombstone", "expression", map[string]string{"condition": "value.vip == true"}, v(r, nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := map[string]string{"predicates": "p", "predicates.p.type": tc.typ,
				"transforms": "d", "transforms.d.type": "drop", "transforms.d.predicate": "p"}
			for k, v := range tc.opts {
				cfg["predicates.p."+k] = v
			}
			c := chainOf(t, cfg)
			_, keep, err := c.Apply(tc.in)
			if err != nil || keep == tc.want {
				t.Errorf("predicate %v: kept=%v err=%v; want the predicate to be %v", tc.typ, keep, err, tc.want)
			}
		})
	}
}
