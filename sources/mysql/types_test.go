package mysql

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

// typeTable is one table of the type matrix: its DDL, the rows inserted (SQL value lists) and
// the exact JSON of each row's after image, by id.
type typeTable struct {
	name string
	ddl  string
	rows []string
	want map[int64]string
}

var typeMatrix = []typeTable{
	{
		name: "ints",
		ddl: `(id INT PRIMARY KEY, ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
			mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED, b BOOL, iz INT(5) ZEROFILL)`,
		rows: []string{
			"(1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, 0, 42)",
			"(2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807, 18446744073709551615, 1, 0)",
			"(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
		},
		want: map[int64]string{
			1: `{"id":1,"ti":-128,"tiu":0,"si":-32768,"siu":0,"mi":-8388608,"miu":0,"i":-2147483648,"iu":0,"bi":-9223372036854775808,"biu":0,"b":0,"iz":42}`,
			2: `{"id":2,"ti":127,"tiu":255,"si":32767,"siu":65535,"mi":8388607,"miu":16777215,"i":2147483647,"iu":4294967295,"bi":9223372036854775807,"biu":18446744073709551615,"b":1,"iz":0}`,
			3: `{"id":3,"ti":null,"tiu":null,"si":null,"siu":null,"mi":null,"miu":null,"i":null,"iu":null,"bi":null,"biu":null,"b":null,"iz":null}`,
		},
	},
	{
		name: "nums",
		ddl:  `(id INT PRIMARY KEY, d DECIMAL(10,2), dbig DECIMAL(40,20) UNSIGNED, f FLOAT, db DOUBLE, bt1 BIT(1), bt BIT(10), bt64 BIT(64))`,
		rows: []string{
			"(1, -12345678.90, 12345678901234567890.12345678901234567890, 3.14, -2.5e-300, b'1', b'1000000001', 0xFFFFFFFFFFFFFFFF)",
			"(2, 0, 0, 0, 1.7976931348623157e308, b'0', b'0', 0)",
			"(3, 0.05, 0.00000000000000000001, -1.5e-7, 0.1, NULL, NULL, NULL)",
			"(4, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
		},
		want: map[int64]string{
			1: `{"id":1,"d":"-12345678.90","dbig":"12345678901234567890.12345678901234567890","f":3.14,"db":-2.5e-300,"bt1":true,"bt":"AQI=","bt64":"//////////8="}`,
			2: `{"id":2,"d":"0.00","dbig":"0.00000000000000000000","f":0,"db":1.7976931348623157e+308,"bt1":false,"bt":"AAA=","bt64":"AAAAAAAAAAA="}`,
			3: `{"id":3,"d":"0.05","dbig":"0.00000000000000000001","f":-1.5e-7,"db":0.1,"bt1":null,"bt":null,"bt64":null}`,
			4: `{"id":4,"d":null,"dbig":null,"f":null,"db":null,"bt1":null,"bt":null,"bt64":null}`,
		},
	},
	{
		name: "temporal",
		ddl: `(id INT PRIMARY KEY, d DATE, t TIME, t6 TIME(6), dt DATETIME, dt3 DATETIME(3), dt6 DATETIME(6),
			ts TIMESTAMP NULL, ts6 TIMESTAMP(6) NULL, y YEAR)`,
		rows: []string{
			"(1, '1000-01-01', '-838:59:59', '-00:00:01.5', '1000-01-01 00:00:00', '2020-02-29 23:59:59.123', '9999-12-31 23:59:59.999999', '1970-01-01 00:00:01', '2038-01-19 03:14:07.999999', 1901)",
			"(2, '2024-06-01', '838:59:59', '25:00:00.000001', '1970-01-01 00:00:00', '1969-12-31 23:59:59.999', '1970-01-01 00:00:00.000001', '2024-06-01 12:00:00', '2024-06-01 12:00:00.5', 2155)",
			"(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
		},
		want: map[int64]string{
			1: `{"id":1,"d":-354285,"t":-3020399000000,"t6":-1500000,"dt":-30610224000000,"dt3":1583020799123,"dt6":253402300799999999,"ts":"1970-01-01T00:00:01Z","ts6":"2038-01-19T03:14:07.999999Z","y":1901}`,
			2: `{"id":2,"d":19875,"t":3020399000000,"t6":90000000001,"dt":0,"dt3":-1,"dt6":1,"ts":"2024-06-01T12:00:00Z","ts6":"2024-06-01T12:00:00.500000Z","y":2155}`,
			3: `{"id":3,"d":null,"t":null,"t6":null,"dt":null,"dt3":null,"dt6":null,"ts":null,"ts6":null,"y":null}`,
		},
	},
	{
		name: "zero_dates",
		ddl: `(id INT PRIMARY KEY, d DATE NULL, dn DATE NOT NULL, dt DATETIME NULL, dtn DATETIME(3) NOT NULL,
			ts TIMESTAMP NULL, tsn TIMESTAMP NOT NULL DEFAULT '0000-00-00 00:00:00', y YEAR)`,
		rows: []string{
			"(1, '0000-00-00', '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', 0)",
			"(2, '2020-00-10', '2020-05-00', NULL, '2020-01-01 00:00:00', NULL, '2020-01-01 00:00:00', NULL)",
		},
		want: map[int64]string{
			1: `{"id":1,"d":null,"dn":0,"dt":null,"dtn":0,"ts":null,"tsn":"1970-01-01T00:00:00Z","y":0}`,
			2: `{"id":2,"d":null,"dn":0,"dt":null,"dtn":1577836800000,"ts":null,"tsn":"2020-01-01T00:00:00Z","y":null}`,
		},
	},
	{
		name: "strings",
		ddl: `(id INT PRIMARY KEY, c CHAR(5), vc VARCHAR(20), tx TEXT, l1 VARCHAR(20) CHARACTER SET latin1,
			cy VARCHAR(20) CHARACTER SET cp1251, gk VARCHAR(20) CHARACTER SET gbk, j JSON, e ENUM('a','b','ü'), s SET('x','y','z')) DEFAULT CHARSET=utf8mb4`,
		rows: []string{
			`(1, 'ab', 'héllo wörld 😀', 'line1\nline2 "q" \\ \t', 'Grüße €', 'Привет', '中文', '{"a": [1, 2.5, "ü"]}', 'ü', 'x,z')`,
			"(2, '', '', '', '', '', '', '[]', 'a', '')",
			"(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
		},
		want: map[int64]string{
			1: `{"id":1,"c":"ab","vc":"héllo wörld 😀","tx":"line1\nline2 \"q\" \\ \t","l1":"Grüße €","cy":"Привет","gk":"中文","j":"{\"a\": [1, 2.5, \"ü\"]}","e":"ü","s":"x,z"}`,
			2: `{"id":2,"c":"","vc":"","tx":"","l1":"","cy":"","gk":"","j":"[]","e":"a","s":""}`,
			3: `{"id":3,"c":null,"vc":null,"tx":null,"l1":null,"cy":null,"gk":null,"j":null,"e":null,"s":null}`,
		},
	},
	{
		name: "binaries",
		ddl:  `(id INT PRIMARY KEY, bn BINARY(4), vb VARBINARY(10), bl BLOB, lb LONGBLOB)`,
		rows: []string{
			"(1, X'01', X'00FF', X'DEADBEEF', X'00')",
			"(2, '', '', '', '')",
			"(3, NULL, NULL, NULL, NULL)",
		},
		want: map[int64]string{
			1: `{"id":1,"bn":"AQAAAA==","vb":"AP8=","bl":"3q2+7w==","lb":"AA=="}`,
			2: `{"id":2,"bn":"AAAAAA==","vb":"","bl":"","lb":""}`,
			3: `{"id":3,"bn":null,"vb":null,"bl":null,"lb":null}`,
		},
	},
	{
		name: "geo",
		ddl:  `(id INT PRIMARY KEY, g GEOMETRY, p POINT)`,
		rows: []string{
			"(1, ST_GeomFromText('POINT(1 2)'), ST_GeomFromText('POINT(3 4)', 4326))",
			"(2, NULL, NULL)",
		},
		want: map[int64]string{
			1: `{"id":1,"g":{"wkb":"AQEAAAAAAAAAAADwPwAAAAAAAABA","srid":0},"p":{"wkb":"AQEAAAAAAAAAAAAIQAAAAAAAABBA","srid":4326}}`,
			2: `{"id":2,"g":null,"p":null}`,
		},
	},
	{
		name: "composite",
		ddl:  `(a VARCHAR(10), b BIGINT UNSIGNED, v INT, PRIMARY KEY (b, a))`,
		rows: []string{"('x', 18446744073709551615, 1)", "('y', 0, 2)"},
	},
}

// insertMatrix inserts the rows of every type table (non-strict sql_mode allows zero dates).
func insertMatrix(t *testing.T, db string) {
	m := sharedMariaDB(t)
	stmts := []string{"SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'", "USE " + quoteName(db)}
	for _, tt := range typeMatrix {
		for _, r := range tt.rows {
			stmts = append(stmts, "INSERT INTO "+quoteName(tt.name)+" VALUES "+r)
		}
	}
	exec(t, m, stmts...)
}

// afterImages returns, per table, the JSON after images of the records with op, by key JSON.
func afterImages(t *testing.T, l *testLog, db string, op connect.Op) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, r := range l.recs {
		if r.Value == nil {
			continue
		}
		ev := event(t, r)
		if ev.Op != op {
			continue
		}
		tbl, _ := ev.Source.Get("table")
		name := tbl.(string)
		if out[name] == nil {
			out[name] = map[string]string{}
		}
		k, _ := connect.AppendJSON(nil, r.Key)
		v, _ := connect.AppendJSON(nil, ev.After)
		out[name][string(k)] = string(v)
	}
	return out
}

// TestTypeMatrix: every type family through the snapshot (op r, read through the text and
// through the binary protocol) and through the binlog (op c) gives exactly the expected JSON,
// and all paths give identical after images.
func TestTypeMatrix(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	total := 0
	stmts := []string{"USE " + quoteName(db)}
	for _, tt := range typeMatrix {
		stmts = append(stmts, "CREATE TABLE "+quoteName(tt.name)+" "+tt.ddl)
		total += len(tt.rows)
	}
	exec(t, m, stmts...)
	insertMatrix(t, db)

	store := &memStore{}
	src := newSource(t, baseConfig(m, db, nil), store)
	var l testLog
	l.run(t, src, time.Minute, func(l *testLog) bool { return src.phase == phaseStreaming })
	snap := afterImages(t, &l, db, connect.OpRead)

	// the same snapshot through prepared statements (the binary protocol, used for tables not
	// keyed by integers), and through go-mysql's text protocol reader (used on compressed
	// connections), gives the same images
	for _, v := range []struct {
		set  func(*Source)
		diff string
	}{
		{func(s *Source) { s.forcePrepared = true }, "through the text and the binary protocol differ (-text +binary)"},
		{func(s *Source) { s.goMySQLText = true }, "through sluice's and go-mysql's text protocol readers differ (-sluice +go-mysql)"},
	} {
		other := newSource(t, baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotInitialOnly, KeySnapshotLocking: "none"}), nil)
		v.set(other)
		var lo testLog
		lo.run(t, other, time.Minute, func(*testLog) bool { return other.phase == phaseIdle })
		if diff := cmp.Diff(snap, afterImages(t, &lo, db, connect.OpRead)); diff != "" {
			t.Errorf("snapshot after images %s:\n%s", v.diff, diff)
		}
	}
	// and as Rows (a connector with transforms), through either protocol, the same images and keys
	for _, prepared := range []bool{false, true} {
		rows := newSource(t, baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotInitialOnly, KeySnapshotLocking: "none"}), nil)
		rows.env.RawJSON, rows.forcePrepared = false, prepared
		var lr testLog
		lr.run(t, rows, time.Minute, func(*testLog) bool { return rows.phase == phaseIdle })
		for i, r := range lr.recs {
			if _, ok := r.Value.(connect.RawJSON); ok {
				t.Fatalf("prepared %v: record %d is rendered, want Rows", prepared, i)
			}
		}
		if diff := cmp.Diff(snap, afterImages(t, &lr, db, connect.OpRead)); diff != "" {
			t.Errorf("snapshot after images rendered and as Rows (prepared %v) differ (-rendered +rows):\n%s", prepared, diff)
		}
	}

	// the same rows again, through the binlog
	del := []string{"USE " + quoteName(db)}
	for _, tt := range typeMatrix {
		del = append(del, "DELETE FROM "+quoteName(tt.name))
	}
	exec(t, m, del...)
	insertMatrix(t, db)
	src = newSource(t, baseConfig(m, db, map[string]string{KeyServerID: src.cfgServerID()}), store)
	l.run(t, src, time.Minute, func(l *testLog) bool {
		n := 0
		for _, r := range l.recs {
			if r.Value != nil && event(t, r).Op == connect.OpCreate {
				n++
			}
		}
		return n == total
	})
	stream := afterImages(t, &l, db, connect.OpCreate)

	if diff := cmp.Diff(snap, stream); diff != "" {
		t.Errorf("snapshot and binlog after images differ (-snapshot +binlog):\n%s", diff)
	}
	for _, tt := range typeMatrix {
		if tt.want == nil {
			continue
		}
		want := map[string]string{}
		for id, v := range tt.want {
			k, _ := connect.AppendJSON(nil, connect.Row{{Name: "id", Value: id}})
			want[string(k)] = v
		}
		if diff := cmp.Diff(want, stream[tt.name]); diff != "" {
			t.Errorf("table %s: binlog after images (-want +got):\n%s", tt.name, diff)
		}
		if diff := cmp.Diff(want, snap[tt.name]); diff != "" {
			t.Errorf("table %s: snapshot after images (-want +got):\n%s", tt.name, diff)
		}
	}
	wantKeys := []string{`{"b":0,"a":"y"}`, `{"b":18446744073709551615,"a":"x"}`}
	for _, k := range wantKeys {
		if _, ok := stream["composite"][k]; !ok {
			t.Errorf("composite key %s missing from %v", k, stream["composite"])
		}
	}
}

// cfgServerID returns the source's server id as configured (for a second source that reuses it).
func (s *Source) cfgServerID() string {
	return itoa(int64(s.cfg.serverID))
}
