package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/connect"
)

// typeCase is one column of the type matrix: its SQL type and, per row, the SQL literal
// stored and the JSON value the source must emit (default settings).
type typeCase struct {
	col, typ string
	vals     [2][2]string // {sql literal, want JSON} for rows 1 and 2; row 3 is all NULL
}

var typeMatrix = []typeCase{
	{"c_int2", "smallint", [2][2]string{{"1", "1"}, {"-32768", "-32768"}}},
	{"c_int4", "integer", [2][2]string{{"42", "42"}, {"2147483647", "2147483647"}}},
	{"c_int8", "bigint", [2][2]string{{"9007199254740993", "9007199254740993"}, {"-9223372036854775808", "-9223372036854775808"}}},
	{"c_num", "numeric(10,2)", [2][2]string{{"1234.5", `"1234.50"`}, {"'NaN'", `"NaN"`}}},
	{"c_numu", "numeric", [2][2]string{{"123456789012345678901234567890.123456789", `"123456789012345678901234567890.123456789"`}, {"'-Infinity'", `"-Infinity"`}}},
	{"c_numinf", "numeric", [2][2]string{{"'Infinity'", `"Infinity"`}, {"-0.000001", `"-0.000001"`}}},
	{"c_f4", "real", [2][2]string{{"1.1", "1.1"}, {"'Infinity'", `"Infinity"`}}},
	{"c_f8", "double precision", [2][2]string{{"0.1", "0.1"}, {"'NaN'", `"NaN"`}}},
	{"c_f8neg", "double precision", [2][2]string{{"'-Infinity'", `"-Infinity"`}, {"1e-300", "1e-300"}}},
	{"c_bool", "boolean", [2][2]string{{"true", "true"}, {"false", "false"}}},
	{"c_text", "text", [2][2]string{{`E'h\u00e9llo "q"\n\\'`, `"héllo \"q\"\n\\"`}, {"''", `""`}}},
	{"c_vc", "varchar(10)", [2][2]string{{"'abc'", `"abc"`}, {"'x'", `"x"`}}},
	{"c_ch", "char(5)", [2][2]string{{"'ab'", `"ab   "`}, {"'abcde'", `"abcde"`}}},
	{"c_bytea", "bytea", [2][2]string{{`'\x00ff10'`, `"AP8Q"`}, {`'\x'`, `""`}}},
	{"c_uuid", "uuid", [2][2]string{{"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`}, {"'00000000-0000-0000-0000-000000000000'", `"00000000-0000-0000-0000-000000000000"`}}},
	{"c_json", "json", [2][2]string{{`'{"b": 1, "a": [1, 2]}'`, `"{\"b\": 1, \"a\": [1, 2]}"`}, {"'null'", `"null"`}}},
	{"c_jsonb", "jsonb", [2][2]string{{`'{"b": 1, "a": [1, 2]}'`, `"{\"a\": [1, 2], \"b\": 1}"`}, {`'"s"'`, `"\"s\""`}}},
	{"c_intarr", "integer[]", [2][2]string{{"'{1,NULL,3}'", "[1,null,3]"}, {"'{}'", "[]"}}},
	{"c_textarr2", "text[][]", [2][2]string{{`'{{"a","b"},{"c",NULL}}'`, `[["a","b"],["c",null]]`}, {`'{"a,b","NULL","\"",""}'`, `["a,b","NULL","\"",""]`}}},
	{"c_numarr", "numeric[]", [2][2]string{{"'{1.50,NaN}'", `["1.50","NaN"]`}, {"'{{1},{2}}'", `[["1"],["2"]]`}}},
	{"c_date", "date", [2][2]string{{"'2024-01-31'", "19753"}, {"'infinity'", "2147483647"}}},
	{"c_date2", "date", [2][2]string{{"'1969-12-31'", "-1"}, {"'-infinity'", "-2147483648"}}},
	{"c_time", "time", [2][2]string{{"'13:45:30.123456'", "49530123456"}, {"'24:00:00'", "86400000000"}}},
	{"c_time3", "time(3)", [2][2]string{{"'13:45:30.123'", "49530123"}, {"'00:00:00'", "0"}}},
	{"c_timetz", "timetz", [2][2]string{{"'13:45:30.5+02'", `"11:45:30.5Z"`}, {"'00:30:00-05:30'", `"06:00:00Z"`}}},
	{"c_ts", "timestamp", [2][2]string{{"'2024-01-31 13:45:30.123456'", "1706708730123456"}, {"'infinity'", "9223372036854775807"}}},
	{"c_ts3", "timestamp(3)", [2][2]string{{"'2024-01-31 13:45:30.123'", "1706708730123"}, {"'-infinity'", "-9223372036854775808"}}},
	{"c_tstz", "timestamptz", [2][2]string{{"'2024-01-31 13:45:30.12+02'", `"2024-01-31T11:45:30.12Z"`}, {"'infinity'", `"infinity"`}}},
	{"c_tstz2", "timestamptz", [2][2]string{{"'0044-03-15 12:00:00+00 BC'", `"-0043-03-15T12:00:00Z"`}, {"'-infinity'", `"-infinity"`}}},
	{"c_interval", "interval", [2][2]string{{"'1 year 2 mons 3 days 04:05:06.78'", "37091106780000"}, {"'-1 day -00:00:01'", "-86401000000"}}},
	{"c_enum", "mood", [2][2]string{{"'happy'", `"happy"`}, {"'sad'", `"sad"`}}},
	{"c_enumarr", "mood[]", [2][2]string{{"'{happy,sad}'", `["happy","sad"]`}, {"'{NULL}'", "[null]"}}},
	{"c_dom", "posint", [2][2]string{{"5", "5"}, {"2147483647", "2147483647"}}},
	{"c_domtext", "shorttext", [2][2]string{{"'dom'", `"dom"`}, {"''", `""`}}},
	{"c_domarr", "posint[]", [2][2]string{{"'{1,2}'", "[1,2]"}, {"'{}'", "[]"}}},
	{"c_inet", "inet", [2][2]string{{"'192.168.0.1/24'", `"192.168.0.1/24"`}, {"'::1'", `"::1"`}}},
	{"c_cidr", "cidr", [2][2]string{{"'10.0.0.0/8'", `"10.0.0.0/8"`}, {"'2001:db8::/32'", `"2001:db8::/32"`}}},
	{"c_mac", "macaddr", [2][2]string{{"'08:00:2b:01:02:03'", `"08:00:2b:01:02:03"`}, {"'ff:ff:ff:ff:ff:ff'", `"ff:ff:ff:ff:ff:ff"`}}},
	{"c_hstore", "hstore", [2][2]string{{"'b=>2, a=>1, c=>NULL'", `"{\"a\":\"1\",\"b\":\"2\",\"c\":null}"`}, {"''", `"{}"`}}},
	{"c_money", "money", [2][2]string{{"1234.56", `"$1,234.56"`}, {"-5", `"-$5.00"`}}},
	{"c_bit1", "bit(1)", [2][2]string{{"B'1'", "true"}, {"B'0'", "false"}}},
	{"c_varbit", "varbit", [2][2]string{{"B'101'", `"101"`}, {"B''", `""`}}},
	{"c_point", "point", [2][2]string{{"'(1,2)'", `"(1,2)"`}, {"'(-1.5,0)'", `"(-1.5,0)"`}}},
	{"c_tsvector", "tsvector", [2][2]string{{"'fat cat a'", `"'a' 'cat' 'fat'"`}, {"''", `""`}}},
	{"c_tstzarr", "timestamptz[]", [2][2]string{{"'{\"2024-01-31 13:45:30.12+02\",NULL,infinity}'", `["2024-01-31T11:45:30.12Z",null,"infinity"]`}, {"'{}'", "[]"}}},
	{"c_domtstz", "tstzdom", [2][2]string{{"'2024-01-31 13:45:30.5+02'", `"2024-01-31T11:45:30.5Z"`}, {"'-infinity'", `"-infinity"`}}},
	{"c_int4range", "int4range", [2][2]string{{"'[1,5)'", `"[1,5)"`}, {"'empty'", `"empty"`}}},
}

func typeMatrixDDL() []string {
	cols := []string{"id int PRIMARY KEY"}
	for _, c := range typeMatrix {
		cols = append(cols, c.col+" "+c.typ)
	}
	return []string{
		"CREATE EXTENSION IF NOT EXISTS hstore",
		"CREATE TYPE mood AS ENUM ('sad', 'happy')",
		"CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",
		"CREATE DOMAIN shorttext AS varchar(20)",
		"CREATE DOMAIN tstzdom AS timestamptz",
		"CREATE TABLE types (" + strings.Join(cols, ", ") + ")",
	}
}

// typeMatrixInsert inserts the matrix rows with ids base+1..base+3 in one statement.
func typeMatrixInsert(base int) string {
	names := []string{"id"}
	for _, c := range typeMatrix {
		names = append(names, c.col)
	}
	var rows []string
	for r := 0; r < 3; r++ {
		vals := []string{fmt.Sprint(base + r + 1)}
		for _, c := range typeMatrix {
			if r == 2 {
				vals = append(vals, "NULL")
			} else {
				vals = append(vals, c.vals[r][0])
			}
		}
		rows = append(rows, "("+strings.Join(vals, ", ")+")")
	}
	return "INSERT INTO types (" + strings.Join(names, ", ") + ") VALUES " + strings.Join(rows, ", ")
}

// wantTypeRow is the JSON after image of matrix row r (0..2) with the given id.
func wantTypeRow(id, r int) string {
	parts := []string{fmt.Sprintf(`"id":%d`, id)}
	for _, c := range typeMatrix {
		v := "null"
		if r < 2 {
			v = c.vals[r][1]
		}
		parts = append(parts, fmt.Sprintf("%q:%s", c.col, v))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Every type family with edge values: the snapshot path and the streaming path (protocol 1
// and 2) emit exactly the expected JSON, so they agree with each other.
func TestTypeMatrix(t *testing.T) {
	for _, proto := range []string{"1", "2"} {
		t.Run("proto"+proto, func(t *testing.T) {
			db := newDB(t, sharedPG(t))
			db.exec(t, typeMatrixDDL()...)
			db.exec(t, typeMatrixInsert(0))
			src := openSource(t, db.config(map[string]string{KeyProtocolVersion: proto}), connect.Position{})
			log := newMemLog()
			readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 3 })
			// the same values through the stream: inserts, and an update that rewrites row 1
			db.exec(t, typeMatrixInsert(10), "UPDATE types SET id = id WHERE id = 11")
			readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 7 })
			recs, _ := log.snapshot()
			check := func(i, id, row int, op connect.Op) {
				t.Helper()
				ev := eventOf(t, recs[i])
				if ev.Op != op {
					t.Errorf("record %d: op %v, want %v", i, ev.Op, op)
				}
				got, want := jsonOf(t, ev.After), wantTypeRow(id, row)
				if got != want {
					t.Errorf("record %d (%v, id %d):\n got %s\nwant %s\n%s", i, op, id, got, want, fieldDiff(t, want, got))
				}
			}
			for r := 0; r < 3; r++ {
				check(r, r+1, r, connect.OpRead)
				check(3+r, 11+r, r, connect.OpCreate)
			}
			check(6, 11, 0, connect.OpUpdate)
		})
	}
}

// fieldDiff names the fields of two JSON rows that differ.
func fieldDiff(t *testing.T, want, got string) string {
	w, err1 := connect.ParseJSON([]byte(want))
	g, err2 := connect.ParseJSON([]byte(got))
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("parse: %v %v", err1, err2)
	}
	wr, gr := w.(connect.Row), g.(connect.Row)
	var out []string
	for _, f := range wr {
		gv, ok := gr.Get(f.Name)
		if !ok {
			out = append(out, f.Name+": missing")
			continue
		}
		if a, b := jsonOf(t, f.Value), jsonOf(t, gv); a != b {
			out = append(out, fmt.Sprintf("%s: got %s want %s", f.Name, b, a))
		}
	}
	return strings.Join(out, "\n")
}

// The other value modes: decimal.handling.mode=double, binary.handling.mode=hex,
// time.precision.mode=connect and isostring, interval.handling.mode=string, hstore map.
func TestValueModes(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t,
		"CREATE EXTENSION IF NOT EXISTS hstore",
		"CREATE TABLE m (id int PRIMARY KEY, n numeric(6,2), b bytea, d date, t time, ts timestamp, i interval, h hstore, mo money, tz timestamptz)",
		`INSERT INTO m VALUES (1, 12.5, '\xdead', '2024-01-31', '13:45:30.123456', '2024-01-31 13:45:30.123456', '1 year 2 mons 3 days 04:05:06.78', 'k=>v', 12.34, '2024-01-31 13:45:30.123+02')`,
	)
	cases := []struct {
		name string
		cfg  map[string]string
		want string
	}{
		{"double-hex-connect", map[string]string{KeyDecimalMode: "double", KeyBinaryMode: "hex", KeyTimePrecision: "connect", KeyIntervalMode: "string", KeyHstoreMode: "map"},
			`{"id":1,"n":12.5,"b":"dead","d":19753,"t":49530123,"ts":1706708730123,"i":"P1Y2M3DT4H5M6.78S","h":{"k":"v"},"mo":12.34,"tz":"2024-01-31T11:45:30.123Z"}`},
		{"string-base64-iso", map[string]string{KeyDecimalMode: "string", KeyBinaryMode: "base64", KeyTimePrecision: "isostring"},
			`{"id":1,"n":"12.50","b":"3q0=","d":"2024-01-31","t":"13:45:30.123456","ts":"2024-01-31T13:45:30.123456Z","i":37091106780000,"h":"{\"k\":\"v\"}","mo":"$12.34","tz":"2024-01-31T11:45:30.123Z"}`},
		{"adaptive-time-micros-urlsafe", map[string]string{KeyBinaryMode: "base64-url-safe", KeyTimePrecision: "adaptive_time_microseconds"},
			`{"id":1,"n":"12.50","b":"3q0=","d":19753,"t":49530123456,"ts":1706708730123456,"i":37091106780000,"h":"{\"k\":\"v\"}","mo":"$12.34","tz":"2024-01-31T11:45:30.123Z"}`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := db.config(c.cfg)
			cfg[KeySlotName] = fmt.Sprintf("%s_%d", db.slot, i)
			cfg[KeySnapshotMode] = SnapshotInitialOnly
			src := openSource(t, cfg, connect.Position{})
			log := newMemLog()
			readUntil(t, src, log, false, 30*time.Second, func() bool { return len(log.records) >= 1 })
			if got := jsonOf(t, eventOf(t, log.records[0]).After); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// table.decode's fast path for timestamptz (the session's UTC, into the batch's slab) gives
// what the column's decoder gives, value or error, in every time.precision.mode and for every
// form the server may send: fractions or none, the edges of the range, infinities, BC dates,
// other offsets, malformed text.
func TestTimestamptzFastPath(t *testing.T) {
	ins := []string{
		"2024-01-31 11:45:30.12+00", "2024-01-31 11:45:30+00", "2024-01-31 11:45:30.123456+00",
		"1969-12-31 23:59:59.999999+00", "0001-01-01 00:00:00+00", "294276-12-31 23:59:59.999999+00",
		"infinity", "-infinity", "0044-03-15 12:00:00+00 BC", "2024-01-31 13:45:30.12+02",
		"2024-01-31 11:45:30+05:30", "2024-01-31 11:45:30-00", "2024-01-31 11:45:30+00:00",
		"1800-01-01 00:00:00-00:01:15", "2024-02-30 00:00:00+00", "garbage+00", "2024-01-31 11:45:30.+00",
	}
	for _, mode := range []string{"adaptive", "adaptive_time_microseconds", "connect", "isostring"} {
		d := newTypeDecoders(&settings{timeMode: mode}, nil)
		dec, err := d.decoder(context.Background(), pgtype.TimestamptzOID, -1)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range ins {
			want, werr := dec([]byte(in))
			tb := &table{cols: []column{{name: "c", decode: dec, fast: fastKind(dec, pgtype.TimestamptzOID)}}, vals: make([]any, 1), kind: make([]byte, 1), slab: &connect.Slab{}}
			gerr := tb.decode(func(int) (byte, []byte) { return kindText, []byte(in) })
			if (werr != nil) != (gerr != nil) || !reflect.DeepEqual(tb.vals[0], want) {
				t.Errorf("%s %q: fast %#v (%v), decoder %#v (%v)", mode, in, tb.vals[0], gerr, want, werr)
			}
		}
	}
}

// A snapshot reads timestamptz columns in binary form (chunkQuery.binaryTimestamptz): for
// every value the server holds (years 4713 BC to 294276, fractions of every length,
// infinities), appendTimestamptzText gives exactly the text the server sends for it, and
// table.decode gives the same value, or error, from the binary form as from the text, in every
// time.precision.mode.
func TestTimestamptzBinaryMatchesText(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t,
		"SET TimeZone = 'UTC'",
		"CREATE TABLE tsb (id int PRIMARY KEY, t timestamptz)",
		// days since 1970 from 4713 BC to 294276 AD, denser in the common years; times of
		// day with 0 to 6 fraction digits
		`INSERT INTO tsb SELECT g, 'epoch'::timestamptz
			+ make_interval(days => (CASE g % 4
				WHEN 0 THEN -2440000 + (g::bigint * 1299709) % 108000000
				WHEN 1 THEN -719000 + (g::bigint * 7919) % 3652000
				WHEN 2 THEN -25000 + (g::bigint * 104729) % 70000
				ELSE -2440000 + (g::bigint * 15485863) % 2450000 END)::int)
			+ ((g::bigint * 2654435761) % 86400000000 / (10 ^ (g % 7))::bigint * (10 ^ (g % 7))::bigint) * interval '1 microsecond'
			FROM generate_series(1, 4000) g`,
		`INSERT INTO tsb VALUES (-1, 'infinity'), (-2, '-infinity'), (-3, '0001-01-01 00:00:00+00'),
			(-4, '0001-12-31 23:59:59.999999+00 BC'), (-5, '9999-12-31 23:59:59.999999+00'),
			(-6, '10000-01-01 00:00:00+00'), (-7, '4713-01-01 00:00:00+00 BC'),
			(-8, '294276-12-31 23:59:59.999999+00'), (-9, '1970-01-01 00:00:00.000001+00'),
			(-10, '1969-12-31 23:59:59.999999+00'), (-11, '2000-01-01 00:00:00+00'), (-12, NULL)`,
	)
	ctx := testCtx(t)
	rr := db.conn.PgConn().ExecParams(ctx, "SELECT t, t FROM tsb ORDER BY id", nil, nil, nil,
		[]int16{pgtype.TextFormatCode, pgtype.BinaryFormatCode})
	var texts, bins [][]byte
	for rr.NextRow() {
		v := rr.Values()
		texts = append(texts, bytes.Clone(v[0]))
		bins = append(bins, bytes.Clone(v[1]))
	}
	if _, err := rr.Close(); err != nil {
		t.Fatal(err)
	}
	if len(texts) != 4012 {
		t.Fatalf("%d rows, want 4012", len(texts))
	}
	years := map[string]bool{}
	for i := range texts {
		if texts[i] == nil {
			if bins[i] != nil {
				t.Fatalf("row %d: NULL as text, %x as binary", i, bins[i])
			}
			continue
		}
		us := int64(binary.BigEndian.Uint64(bins[i]))
		if got := string(appendTimestamptzText(nil, us)); got != string(texts[i]) {
			t.Fatalf("row %d: appendTimestamptzText(%d) = %q, the server sends %q", i, us, got, texts[i])
		}
		switch y, _, _, _, _, _, _ := civilMicros(us); {
		case us == pgInfinity || us == pgMinusInfinity:
			years["infinite"] = true
		case y < 1:
			years["BC"] = true
		case y > 9999:
			years["past 9999"] = true
		default:
			years["1 to 9999"] = true
		}
	}
	if len(years) != 4 {
		t.Fatalf("the values cover %v, want all four ranges", years)
	}
	for _, mode := range []string{"adaptive", "adaptive_time_microseconds", "connect", "isostring"} {
		d := newTypeDecoders(&settings{timeMode: mode}, nil)
		dec, err := d.decoder(ctx, pgtype.TimestamptzOID, -1)
		if err != nil {
			t.Fatal(err)
		}
		tb := &table{cols: []column{{name: "c", typ: pgtype.TimestamptzOID, decode: dec, fast: fastKind(dec, pgtype.TimestamptzOID)}},
			vals: make([]any, 1), kind: make([]byte, 1), slab: &connect.Slab{}}
		for i := range texts {
			if texts[i] == nil {
				continue
			}
			werr := tb.decode(func(int) (byte, []byte) { return kindText, texts[i] })
			want := tb.vals[0]
			gerr := tb.decode(func(int) (byte, []byte) { return kindBinary, bins[i] })
			if (werr != nil) != (gerr != nil) || !reflect.DeepEqual(tb.vals[0], want) {
				t.Fatalf("%s %q: binary %#v (%v), text %#v (%v)", mode, texts[i], tb.vals[0], gerr, want, werr)
			}
		}
	}
}
