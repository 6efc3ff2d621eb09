package transforms

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluice-cdc/sluice/connect"
)

// The compatibility suite runs connector configurations as users paste them from Debezium
// setups, over the records a Debezium source emits for one sequence of changes, and compares
// with the records those configurations produce under Debezium. The expected records are
// written by hand from Debezium's documentation of each transform.

// pgSource is a Postgres source block, as Debezium's Postgres connector fills it.
func pgSource(table string, lsn int64) connect.Row {
	return row("version", "2.7.0", "connector", "postgresql", "name", "pg", "ts_ms", int64(1700000000000),
		"snapshot", "false", "db", "shop", "schema", "public", "table", table, "txId", int64(501), "lsn", lsn)
}

func pgRec(table string, lsn int64, key connect.Row, op connect.Op, before, after connect.Row) connect.Record {
	r := connect.Record{Topic: "pg.public." + table, Partition: -1, Offset: -1,
		Timestamp: time.UnixMilli(1700000000200).UTC(), Key: key, Version: lsn}
	if op != 0 {
		e := connect.ChangeEvent{Op: op, Before: before, After: after, Source: pgSource(table, lsn), TsMs: 1700000000300}
		r.Value = e.Row()
	}
	return r
}

func runCompat(t *testing.T, cfg map[string]string, in, want []connect.Record) {
	t.Helper()
	c := chainOf(t, cfg)
	var got []connect.Record
	for i, r := range in {
		out, keep, err := c.Apply(r)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if keep {
			got = append(got, out)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// A Postgres connector feeding a JDBC-style sink: unwrap with rewritten deletes and metadata
// fields, route to the table name, drop archived rows (Debezium's Filter, Groovy syntax).
func TestCompatUnwrapRouteFilter(t *testing.T) {
	cfg := map[string]string{
		"connector.class":        "io.debezium.connector.postgresql.PostgresConnector",
		"topic.prefix":           "pg",
		"transforms":             "unwrap,route,filter",
		"transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
		"transforms.unwrap.delete.tombstone.handling.mode": "rewrite",
		"transforms.unwrap.add.fields":                     "op,table,lsn,source.ts_ms",
		"transforms.unwrap.add.headers":                    "db",
		"transforms.route.type":                            "org.apache.kafka.connect.transforms.RegexRouter",
		"transforms.route.regex":                           `([^.]+)\.([^.]+)\.([^.]+)`,
		"transforms.route.replacement":                     "$3",
		"transforms.filter.type":                           "io.debezium.transforms.Filter",
		"transforms.filter.language":                       "jsr223.groovy",
		"transforms.filter.condition":                      "value.status != 'archived'",
		"transforms.filter.null.handling.mode":             "keep",
	}
	k1 := row("id", int64(1))
	k2 := row("id", int64(2))
	in := []connect.Record{
		pgRec("orders", 100, k1, connect.OpRead, nil, row("id", int64(1), "status", "new", "total", "10.50")),
		pgRec("orders", 200, k2, connect.OpCreate, nil, row("id", int64(2), "status", "new", "total", "5.00")),
		pgRec("orders", 300, k1, connect.OpUpdate, row("id", int64(1), "status", "new", "total", "10.50"), row("id", int64(1), "status", "archived", "total", "10.50")),
		pgRec("orders", 400, k2, connect.OpDelete, row("id", int64(2), "status", "new", "total", "5.00"), nil),
		pgRec("orders", 400, k2, 0, nil, nil), // the tombstone after the delete
	}
	meta := func(op string, lsn int64, deleted string) []connect.Field {
		return []connect.Field{{Name: "__op", Value: op}, {Name: "__table", Value: "orders"}, {Name: "__lsn", Value: lsn},
			{Name: "__source_ts_ms", Value: int64(1700000000000)}, {Name: "__deleted", Value: deleted}}
	}
	out := func(r connect.Record, value connect.Row) connect.Record {
		r.Topic = "orders"
		r.Value = value
		r.Headers = connect.Headers{hdr("__db", "shop")}
		return r
	}
	want := []connect.Record{
		out(in[0], append(row("id", int64(1), "status", "new", "total", "10.50"), meta("r", 100, "false")...)),
		out(in[1], append(row("id", int64(2), "status", "new", "total", "5.00"), meta("c", 200, "false")...)),
		// in[2] (status archived) is filtered out.
		out(in[3], append(row("id", int64(2), "status", "new", "total", "5.00"), meta("d", 400, "true")...)),
		// in[4], the tombstone, is dropped by rewrite mode.
	}
	runCompat(t, cfg, in, want)
}

// The default unwrap in front of a sink that deletes on tombstones: deletes become
// tombstones, the source's own tombstones are dropped, so each delete arrives once.
func TestCompatUnwrapDefaultForTombstoneSinks(t *testing.T) {
	cfg := map[string]string{
		"transforms":             "unwrap",
		"transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
	}
	k := row("id", int64(9))
	in := []connect.Record{
		pgRec("users", 10, k, connect.OpCreate, nil, row("id", int64(9), "name", "A")),
		pgRec("users", 20, k, connect.OpDelete, row("id", int64(9), "name", "A"), nil),
		pgRec("users", 20, k, 0, nil, nil),
	}
	want := []connect.Record{
		with(in[0], func(r *connect.Record) { r.Value = row("id", int64(9), "name", "A") }),
		with(in[1], func(r *connect.Record) { r.Value = nil }),
	}
	runCompat(t, cfg, in, want)
}

// Debezium's outbox example: an insert into outboxevent becomes an event on
// outbox.event.<aggregatetype> keyed by aggregateid with the id header; JSON expansion and
// an additional header as in the documentation; updates and deletes of outbox rows vanish.
func TestCompatOutbox(t *testing.T) {
	cfg := map[string]string{
		"connector.class":                                     "io.debezium.connector.postgresql.PostgresConnector",
		"table.include.list":                                  "public.outboxevent",
		"tombstones.on.delete":                                "false",
		"transforms":                                          "outbox",
		"transforms.outbox.type":                              "io.debezium.transforms.outbox.EventRouter",
		"transforms.outbox.table.expand.json.payload":         "true",
		"transforms.outbox.table.fields.additional.placement": "type:header:eventType",
	}
	payload := `{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "quantity": 2}], "customerId": 123}`
	outboxRow := row("id", "406c07f3-26f0-4eea-a50c-109940064b8f", "aggregatetype", "Order", "aggregateid", "1",
		"type", "OrderCreated", "payload", payload, "timestamp", int64(1556890294344))
	k := row("id", "406c07f3-26f0-4eea-a50c-109940064b8f")
	in := []connect.Record{
		pgRec("outboxevent", 700, k, connect.OpCreate, nil, outboxRow),
		pgRec("outboxevent", 800, k, connect.OpUpdate, outboxRow, outboxRow),
		pgRec("outboxevent", 900, k, connect.OpDelete, outboxRow, nil),
	}
	parsed, err := connect.ParseJSON([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	want := []connect.Record{{
		Topic:     "outbox.event.Order",
		Partition: -1,
		Offset:    -1,
		Timestamp: time.UnixMilli(1700000000300).UTC(), // the change event's ts_ms
		Key:       "1",
		Value:     parsed,
		Headers:   connect.Headers{hdr("id", "406c07f3-26f0-4eea-a50c-109940064b8f"), hdr("eventType", "OrderCreated")},
		Version:   700,
	}}
	runCompat(t, cfg, in, want)

	// With routing and timestamp columns set, an envelope field and no expansion.
	cfg2 := map[string]string{
		"transforms":                                          "outbox",
		"transforms.outbox.type":                              "io.debezium.transforms.outbox.EventRouter",
		"transforms.outbox.route.by.field":                    "type",
		"transforms.outbox.route.topic.replacement":           "events.${routedByValue}",
		"transforms.outbox.table.field.event.timestamp":       "timestamp",
		"transforms.outbox.table.fields.additional.placement": "aggregatetype:envelope:kind",
		"transforms.outbox.table.op.invalid.behavior":         "fatal",
	}
	want2 := []connect.Record{{
		Topic: "events.OrderCreated", Partition: -1, Offset: -1,
		Timestamp: time.UnixMilli(1556890294344).UTC(),
		Key:       "1",
		Value:     row("payload", payload, "kind", "Order"),
		Headers:   connect.Headers{hdr("id", "406c07f3-26f0-4eea-a50c-109940064b8f")},
		Version:   700,
	}}
	runCompat(t, cfg2, in[:1], want2)
	c := chainOf(t, cfg2)
	checkApply(t, c, in[1], failed("transform outbox: outbox: an outbox row was updated; outbox tables take inserts only (table.op.invalid.behavior=fatal)"))
}

// Sharded tables merged into one topic by ByLogicalTableRouter, then unwrapped: keys stay
// unique across shards.
func TestCompatLogicalTable(t *testing.T) {
	cfg := map[string]string{
		"transforms":                           "Reroute,unwrap",
		"transforms.Reroute.type":              "io.debezium.transforms.ByLogicalTableRouter",
		"transforms.Reroute.topic.regex":       `(.*)customers_shard(.*)`,
		"transforms.Reroute.topic.replacement": "$1customers_all_shards",
		"transforms.unwrap.type":               "io.debezium.transforms.ExtractNewRecordState",
	}
	a := pgRec("customers_shard1", 1, row("id", int64(1)), connect.OpCreate, nil, row("id", int64(1)))
	b := pgRec("customers_shard2", 2, row("id", int64(1)), connect.OpCreate, nil, row("id", int64(1)))
	want := []connect.Record{
		with(a, func(r *connect.Record) {
			r.Topic = "pg.public.customers_all_shards"
			r.Key = row("id", int64(1), "__dbz__physicalTableIdentifier", "pg.public.customers_shard1")
			r.Value = row("id", int64(1))
		}),
		with(b, func(r *connect.Record) {
			r.Topic = "pg.public.customers_all_shards"
			r.Key = row("id", int64(1), "__dbz__physicalTableIdentifier", "pg.public.customers_shard2")
			r.Value = row("id", int64(1))
		}),
	}
	runCompat(t, cfg, []connect.Record{a, b}, want)
}
