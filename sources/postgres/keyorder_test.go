package postgres

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// The key encodings sort exactly like PostgreSQL's ORDER BY, for every supported type and for
// composite keys; equal keys encode equally.
func TestKeyOrderMatchesServer(t *testing.T) {
	db := newDB(t, sharedPG(t))
	cases := []struct {
		name, typ, coll, values string
	}{
		{"int2", "smallint", "", "(-32768),(-1),(0),(1),(32767)"},
		{"int4", "integer", "", "(-2147483648),(-5),(0),(7),(2147483647)"},
		{"int8", "bigint", "", "(-9223372036854775808),(-1),(0),(1),(9223372036854775807)"},
		{"bool", "boolean", "", "(false),(true)"},
		{"uuid", "uuid", "", "('00000000-0000-0000-0000-000000000000'),('0fffffff-0000-0000-0000-000000000000'),('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'),('ffffffff-ffff-ffff-ffff-ffffffffffff')"},
		{"textC", "text", "C", "(''),('A'),('a'),('ab'),('abc'),('b'),('é'),('z')"},
		{"name", "name", "", "(''),('Z'),('a'),('aa')"},
		{"bytea", "bytea", "", `('\x'),('\x00'),('\x0000'),('\x0001'),('\x01'),('\xff')`},
		{"date", "date", "", "('-infinity'),('4713-01-01 BC'),('1969-12-31'),('1970-01-01'),('2024-02-29'),('infinity')"},
		{"ts", "timestamp", "", "('-infinity'),('1900-01-01 00:00:00.000001'),('1970-01-01'),('2024-01-31 13:45:30.123456'),('infinity')"},
		{"tstz", "timestamptz", "", "('-infinity'),('1969-12-31 23:59:59.999999+00'),('2024-01-31 13:45:30+02'),('2024-01-31 13:45:30+00'),('infinity')"},
	}
	m := pgtype.NewMap()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			col := "v " + c.typ
			if c.coll != "" {
				col += " COLLATE " + quoteIdent(c.coll)
			}
			// pairs of the values as a composite key (v1, v2)
			db.exec(t, fmt.Sprintf("DROP TABLE IF EXISTS k; CREATE TABLE k (a %s, b %s)", strings.TrimPrefix(col, "v "), strings.TrimPrefix(col, "v ")),
				fmt.Sprintf("INSERT INTO k SELECT x.v::%s, y.v::%s FROM (VALUES %s) x(v), (VALUES %s) y(v)", c.typ, c.typ, c.values, c.values))
			enc := keyEncoderFor(m, typeOID(t, db, c.typ), collName(c.coll))
			if enc == nil {
				t.Fatalf("no encoder for %s", c.typ)
			}
			rr := db.conn.PgConn().ExecParams(testCtx(t), "SELECT a, b FROM k ORDER BY a, b", nil, nil, nil, []int16{0})
			var prev []byte
			n := 0
			for rr.NextRow() {
				var key []byte
				var err error
				for _, v := range rr.Values() {
					if key, err = enc(key, v); err != nil {
						t.Fatal(err)
					}
				}
				if prev != nil && bytes.Compare(prev, key) >= 0 {
					t.Fatalf("row %d %q: encoding %x not above the previous %x", n, rr.Values(), key, prev)
				}
				prev = key
				n++
			}
			if _, err := rr.Close(); err != nil {
				t.Fatal(err)
			}
			if n < 4 {
				t.Fatalf("%d rows", n)
			}
		})
	}
	// text in a locale collation cannot be encoded: the counter form is used
	if keyEncoderFor(m, pgtype.TextOID, "en_US.utf8") != nil {
		t.Error("text in en_US got a byte-order encoder")
	}
}

func typeOID(t *testing.T, db *testDB, typ string) uint32 {
	var oid uint32
	if err := db.conn.QueryRow(testCtx(t), "SELECT $1::regtype::oid", typ).Scan(&oid); err != nil {
		t.Fatal(err)
	}
	return oid
}

func collName(c string) string {
	if c == "" {
		return "C" // the test server's database collation
	}
	return c
}

func TestTIDKeyOrder(t *testing.T) {
	var prev []byte
	for _, s := range []string{"(0,1)", "(0,2)", "(0,65535)", "(1,1)", "(4294967295,1)"} {
		k, err := encodeTIDKey(nil, []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("%s: %x not above %x", s, k, prev)
		}
		prev = k
	}
}
