package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/connect"
)

// The snapshot reads timestamptz columns in binary form, except a chunk key's, whose text the
// next chunk's query takes: a table keyed by a timestamptz, read in chunks of 7 rows, gives
// every row once, with both timestamps as the column's decoder renders the server's text.
func TestSnapshotTimestamptzKey(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE ev (k timestamptz PRIMARY KEY, t timestamptz, n int)",
		"INSERT INTO ev SELECT timestamptz '2024-01-31 11:45:30.5+00' + g * interval '1.25 seconds', timestamptz '0044-03-15 12:00:00+00 BC' + g * interval '1000 years 0.000001 seconds', g FROM generate_series(1, 50) g",
		"INSERT INTO ev VALUES ('infinity', '-infinity', 51)")
	checkTimestamptzSnapshot(t, db, nil, 51, func(k any, _ int64) connect.Row { return connect.Row{{Name: "k", Value: k}} })
}

// The columns the snapshot reads in binary form are those outside its chunk key, whatever the
// record key is: a table whose chunk key (primary key, else replica identity index) holds a
// timestamptz, with a record key of other columns (message.key.columns) or none of its own,
// read in chunks of 7, gives every row once, each timestamptz as its decoder renders the
// server's text, and the record key the configuration names.
func TestSnapshotTimestamptzChunkKeyNotRecordKey(t *testing.T) {
	cases := []struct {
		name    string
		ddl     []string
		keyCols string // message.key.columns; "" for the catalog's key
		wantKey func(k any, n int64) connect.Row
	}{
		{"primary key, message.key.columns", []string{
			"CREATE TABLE ev (k timestamptz PRIMARY KEY, t timestamptz, n int NOT NULL UNIQUE)"},
			"public.ev:n", func(_ any, n int64) connect.Row { return connect.Row{{Name: "n", Value: n}} }},
		{"replica identity index of two columns", []string{
			"CREATE TABLE ev (g int NOT NULL, k timestamptz NOT NULL, t timestamptz, n int NOT NULL)",
			"CREATE UNIQUE INDEX ev_gk ON ev (g, k)",
			"ALTER TABLE ev REPLICA IDENTITY USING INDEX ev_gk"},
			"", func(k any, _ int64) connect.Row {
				return connect.Row{{Name: "g", Value: int64(1)}, {Name: "k", Value: k}}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := newDB(t, sharedPG(t))
			db.exec(t, c.ddl...)
			cols := "k, t, n"
			vals := "timestamptz '2024-01-31 11:45:30.5+00' + g * interval '1.25 seconds', timestamptz '1999-12-31 23:00:00+00' + g * interval '1 hour 0.000001 seconds', g"
			if c.keyCols == "" {
				cols, vals = "g, "+cols, "1, "+vals
			}
			db.exec(t, "INSERT INTO ev ("+cols+") SELECT "+vals+" FROM generate_series(1, 50) g")
			var cfg map[string]string
			if c.keyCols != "" {
				cfg = map[string]string{KeyMessageKeyColumns: c.keyCols}
			}
			checkTimestamptzSnapshot(t, db, cfg, 50, c.wantKey)
		})
	}
}

// checkTimestamptzSnapshot reads table ev (columns n, k and t, the last two timestamptz) with
// an initial_only snapshot in chunks of 7 rows and checks that each of its rows comes once,
// with the record key wantKey gives and k and t as the timestamptz decoder renders the server's
// text of them.
func checkTimestamptzSnapshot(t *testing.T, db *testDB, cfg map[string]string, rows int, wantKey func(k any, n int64) connect.Row) {
	t.Helper()
	c := map[string]string{KeySnapshotMode: SnapshotInitialOnly, KeyMaxBatchSize: "10", KeySnapshotFetchSize: "7"}
	for k, v := range cfg {
		c[k] = v
	}
	src := openSource(t, db.config(c), connect.Position{})
	log := newMemLog()
	readUntil(t, src, log, false, 30*time.Second, func() bool { return src.phase == phaseDone })

	ctx := testCtx(t)
	dec, err := newTypeDecoders(&settings{timeMode: "adaptive"}, nil).decoder(ctx, pgtype.TimestamptzOID, -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.conn.Exec(ctx, "SET TimeZone = 'UTC'"); err != nil {
		t.Fatal(err)
	}
	res, err := db.conn.Query(ctx, "SELECT n, k::text, t::text FROM ev")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{}
	for res.Next() {
		var n int64
		var k, ts string
		if err := res.Scan(&n, &k, &ts); err != nil {
			t.Fatal(err)
		}
		kv, err1 := dec([]byte(k))
		tv, err2 := dec([]byte(ts))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		want[n] = fmt.Sprintf("key %s k %v t %v", jsonOf(t, wantKey(kv, n)), kv, tv)
	}
	if res.Close(); res.Err() != nil || len(want) != rows {
		t.Fatalf("%d rows in the table (%v), want %d", len(want), res.Err(), rows)
	}
	got := map[int64]string{}
	for _, r := range log.records {
		var n int64
		var k, ts any
		for _, f := range eventOf(t, r).After {
			switch f.Name {
			case "n":
				n = f.Value.(int64)
			case "k":
				k = f.Value
			case "t":
				ts = f.Value
			}
		}
		if _, dup := got[n]; dup {
			t.Fatalf("row %d read twice", n)
		}
		got[n] = fmt.Sprintf("key %s k %v t %v", jsonOf(t, r.Key), k, ts)
	}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("row %d: got %q, want %q", n, got[n], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d rows read, want %d", len(got), len(want))
	}
}
