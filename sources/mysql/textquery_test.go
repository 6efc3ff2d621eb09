package mysql

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/packet"
)

// cellsOf is every cell of a row set as text, one line per row.
func cellsOf(rs *rowSet, ncols int) []string {
	var rows []string
	for i := 0; i < rs.n; i++ {
		var b strings.Builder
		for _, c := range rs.cells[i*ncols : (i+1)*ncols] {
			switch c.Type {
			case gomysql.FieldValueTypeString:
				fmt.Fprintf(&b, "s%q ", c.str)
			default:
				fmt.Fprintf(&b, "%d:%x ", c.Type, c.bits)
			}
		}
		rows = append(rows, b.String())
	}
	return rows
}

// A textQuery reads the cells go-mysql's text protocol reader reads (its FieldValues, as a row
// set copies them), for every type of the matrix (NULLs, extremes, non-ASCII and binary text),
// values of every length prefix, a row over 16 MiB (split over two packets), a row that starts
// with a value over 16 MiB, rows of 0xfffffe and 0xffffff bytes, an empty result; a server error,
// before the rows or after some, is returned as go-mysql returns it and leaves the connection
// usable. All of it with the rows ended by an OK packet (CLIENT_DEPRECATE_EOF) and by EOF packets.
func TestTextQueryCells(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	stmts := []string{"USE " + quoteName(db), "SET GLOBAL max_allowed_packet = 64 << 20",
		"CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB, s VARCHAR(10))", "CREATE TABLE empty (id INT PRIMARY KEY)",
		"CREATE TABLE n (id INT PRIMARY KEY)",
		"INSERT INTO n WITH RECURSIVE r(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM r WHERE i < 99) SELECT a.i * 100 + b.i + 1 FROM r a, r b WHERE a.i < 30"}
	for _, tt := range typeMatrix {
		stmts = append(stmts, "CREATE TABLE "+quoteName(tt.name)+" "+tt.ddl)
	}
	exec(t, m, stmts...)
	insertMatrix(t, db)
	c := appConn(t, m, db) // after max_allowed_packet was raised
	big := bytes.Repeat([]byte("0123456789abcdef\xff"), 17<<20/17+1)
	if _, err := c.Execute("INSERT INTO big VALUES (1, ?, 'after'), (2, REPEAT('ab', 500), NULL), (3, REPEAT('x', 70000), 'ä'), (4, '', '')", big); err != nil {
		t.Fatal(err)
	}
	for _, deprecateEOF := range []bool{true, false} {
		connect := func() *client.Conn {
			c, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, db, func(c *client.Conn) error {
				if !deprecateEOF {
					c.UnsetCapability(gomysql.CLIENT_DEPRECATE_EOF)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		t.Run(fmt.Sprintf("deprecateEOF=%v", deprecateEOF), func(t *testing.T) {
			textQueryCells(t, connect, db, big, deprecateEOF)
		})
	}
}

func textQueryCells(t *testing.T, connect func() *client.Conn, db string, big []byte, deprecateEOF bool) {
	c := connect()
	q := newTextQuery(c)
	if q.deprecateEOF != deprecateEOF {
		t.Fatalf("deprecateEOF %v, want %v", q.deprecateEOF, deprecateEOF)
	}
	queries := []string{"SELECT * FROM big ORDER BY id", "SELECT * FROM empty",
		// a row that starts with a 0xfe length prefix (a first value over 16 MiB) is no terminator
		"SELECT b, s, id FROM big ORDER BY id",
		// the largest one-packet row (0xfffffe bytes) and a row of exactly 0xffffff bytes, which
		// the server follows with an empty packet
		"SELECT 1, REPEAT('x', 16777208)", "SELECT 1, REPEAT('x', 16777209)"}
	for _, tt := range typeMatrix {
		queries = append(queries, "SELECT * FROM "+quoteName(tt.name)+" ORDER BY 1, 2")
	}
	for _, query := range queries {
		var res gomysql.Result
		want := &rowSet{}
		if err := c.ExecuteSelectStreaming(query, &res, func(row []gomysql.FieldValue) error {
			want.add(row)
			return nil
		}, nil); err != nil {
			t.Fatalf("%s: go-mysql: %v", query, err)
		}
		ncols := len(res.Fields)
		got := &rowSet{}
		if err := q.run(query, ncols, func() *rowSet { return got }); err != nil {
			t.Fatalf("%s: textQuery: %v", query, err)
		}
		w, g := cellsOf(want, ncols), cellsOf(got, ncols)
		if len(w) != len(g) {
			t.Fatalf("%s: %d rows, go-mysql read %d", query, len(g), len(w))
		}
		for i := range w {
			if w[i] != g[i] {
				t.Errorf("%s: row %d:\n got %.300s\nwant %.300s", query, i, g[i], w[i])
			}
		}
		if query == queries[0] && (len(g) != 4 || !bytes.Equal(got.cells[1].str, big)) {
			t.Errorf("the %d-byte value was not read whole", len(big))
		}
	}

	// an error after rows were sent (the subquery has two rows from row 3000 on): the error,
	// not a short result, and the connection in step afterwards
	err := q.run("SELECT id, (SELECT id FROM n n2 WHERE n2.id <= n.id AND n2.id IN (1, 3000)) FROM n ORDER BY id", 2,
		func() *rowSet { return &rowSet{} })
	var me *gomysql.MyError
	if !errors.As(err, &me) || me.Code != 1242 {
		t.Fatalf("error %v, want MariaDB's 1242 after 2999 rows", err)
	}
	if rs := (&rowSet{}); q.run("SELECT 5", 1, func() *rowSet { return rs }) != nil || rs.n != 1 || rs.cells[0].bits != 5 {
		t.Fatalf("after an error amid the rows: %d rows %v", rs.n, rs.cells)
	}

	// a server error: go-mysql's error, and the connection is in step afterwards
	err = q.run("SELECT * FROM nope", 1, func() *rowSet { return &rowSet{} })
	if !errors.As(err, &me) || me.Code != 1146 || me.Message != "Table '"+db+".nope' doesn't exist" {
		t.Fatalf("error %v, want MariaDB's 1146 for the missing table", err)
	}
	if err := q.run("SELECT * FROM empty", 2, func() *rowSet { return &rowSet{} }); err == nil ||
		err.Error() != "the query returned 1 columns where 2 were due" {
		t.Fatalf("error %v, want the column count's", err)
	}
	if err := q.run("SELECT 1", 1, func() *rowSet { return &rowSet{} }); err == nil ||
		err.Error() != "the connection is unusable after a failed read" {
		t.Fatalf("error %v, want the connection unusable after a read stopped midway", err)
	}
	q = newTextQuery(connect())
	rs := &rowSet{}
	if err := q.run("SELECT 7, NULL, -8, 'x'", 4, func() *rowSet { return rs }); err != nil {
		t.Fatal(err)
	}
	if g := cellsOf(rs, 4); len(g) != 1 || g[0] != `2:7 0:0 2:fffffffffffffff8 s"x" ` {
		t.Fatalf("cells %q", g)
	}
	if r, err := q.conn.Execute("SELECT 2"); err != nil || r.Values[0][0].AsInt64() != 2 {
		t.Fatalf("go-mysql after a textQuery: %v", err)
	}
}

// fakeReply runs a textQuery against a scripted server on a pipe: the server reads the query and
// writes reply (whole packets, headers included), then closes its end if hangUp.
func fakeReply(t *testing.T, reply []byte, hangUp bool) *textQuery {
	t.Helper()
	cli, srv := net.Pipe()
	t.Cleanup(func() { cli.Close(); srv.Close() })
	go func() {
		var h [4]byte
		if _, err := io.ReadFull(srv, h[:]); err != nil {
			return
		}
		if _, err := io.ReadFull(srv, make([]byte, int(h[0])|int(h[1])<<8|int(h[2])<<16)); err != nil {
			return
		}
		srv.Write(reply)
		if hangUp {
			srv.Close()
		}
	}()
	// no capabilities: no CLIENT_DEPRECATE_EOF (EOF packets), no query attributes
	return newTextQuery(&client.Conn{Conn: packet.NewConn(cli)})
}

// A reply the server should not send is an error, never rows or cells made up of it, and leaves
// the connection marked unusable unless the reply was read to its end.
func TestTextQueryMalformed(t *testing.T) {
	type pkt struct {
		seq  int // 0: the next
		data []byte
	}
	lenc := func(v string) []byte { return gomysql.PutLengthEncodedString([]byte(v)) }
	row := func(vs ...[]byte) []byte { return bytes.Join(vs, nil) }
	head := []pkt{{data: []byte{2}},
		{data: (&gomysql.Field{Name: []byte("a"), Type: gomysql.MYSQL_TYPE_LONGLONG}).Dump()},
		{data: (&gomysql.Field{Name: []byte("b"), Type: gomysql.MYSQL_TYPE_VAR_STRING}).Dump()},
		{data: []byte{0xfe, 0, 0, 2, 0}}}
	eof := pkt{data: []byte{0xfe, 0, 0, 2, 0}}
	long := strings.Repeat("y", 70000)
	for _, tc := range []struct {
		name   string
		rows   []pkt
		hangUp bool
		cells  []string // the rows read, if no error
		err    string   // in the error
		broken bool
	}{
		{name: "every length prefix", rows: []pkt{{data: row(lenc("7"), lenc("a"))},
			{data: row([]byte{0xfb}, lenc(strings.Repeat("x", 300)))},
			{data: row(lenc("-5"), lenc(long))}, eof},
			cells: []string{`2:7 s"a" `, `0:0 s"` + strings.Repeat("x", 300) + `" `, `2:fffffffffffffffb s"` + long + `" `}},
		{name: "sequence", rows: []pkt{{data: row(lenc("7"), lenc("a"))}, {seq: 7, data: row(lenc("8"), lenc("b"))}, eof},
			err: "packet 7 of the reply where 6 was due", broken: true},
		{name: "trailing byte", rows: []pkt{{data: row(lenc("7"), lenc("a"), []byte{0})}, eof},
			err: "1 bytes after the last of 2 values", broken: true},
		{name: "value past the end", rows: []pkt{{data: row(lenc("7"), []byte{5, 'a'})}, eof},
			err: "a value of 5 bytes", broken: true},
		{name: "missing value", rows: []pkt{{data: lenc("7")}, eof},
			err: "1 values where 2 were due", broken: true},
		{name: "cut length prefix", rows: []pkt{{data: row(lenc("7"), []byte{0xfc, 1})}, eof},
			err: "length prefix 0xfc", broken: true},
		{name: "not an integer", rows: []pkt{{data: row(lenc("x"), lenc("a"))}, eof},
			err: `integer "x"`, broken: true},
		{name: "error amid the rows", rows: []pkt{{data: row(lenc("7"), lenc("a"))},
			{data: append([]byte{0xff, 0x12, 0x34}, "stop"...)}},
			err: "ERROR 13330", broken: false},
		{name: "connection closed in a row", rows: []pkt{{data: row(lenc("7"), lenc("a"))}}, hangUp: true,
			err: "connection closed", broken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reply []byte
			seq := 1
			for _, p := range append(append([]pkt(nil), head...), tc.rows...) {
				if p.seq != 0 {
					seq = p.seq
				}
				n := len(p.data)
				if tc.hangUp && seq > len(head) {
					p.data = p.data[:n/2] // the header promises more than comes
				}
				reply = append(append(reply, byte(n), byte(n>>8), byte(n>>16), byte(seq)), p.data...)
				seq++
			}
			q := fakeReply(t, reply, tc.hangUp)
			rs := &rowSet{}
			err := q.run("SELECT a, b FROM t", 2, func() *rowSet { return rs })
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if g := cellsOf(rs, 2); !slices.Equal(g, tc.cells) {
					t.Fatalf("cells %.200q", g)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one with %q", err, tc.err)
			}
			if q.broken != tc.broken {
				t.Fatalf("broken %v, want %v", q.broken, tc.broken)
			}
			if tc.broken {
				if err := q.run("SELECT 1", 1, func() *rowSet { return rs }); err == nil || !strings.Contains(err.Error(), "unusable") {
					t.Fatalf("error %v, want the connection unusable", err)
				}
			}
		})
	}
}

// The query goes out as COM_QUERY, with the empty set of query attributes that a server with
// CLIENT_QUERY_ATTRIBUTES (MySQL 8.0.23 on) expects first, as go-mysql sends it.
func TestTextQuerySend(t *testing.T) {
	for _, attrs := range []bool{false, true} {
		cli, srv := net.Pipe()
		got := make(chan []byte, 1)
		go func() {
			var h [4]byte
			io.ReadFull(srv, h[:])
			p := make([]byte, int(h[0])|int(h[1])<<8|int(h[2])<<16)
			io.ReadFull(srv, p)
			got <- append(h[3:4:4], p...)
			srv.Write([]byte{5, 0, 0, 1, 0xff, 1, 0, 'n', 'o'}) // an error ends it
		}()
		q := newTextQuery(&client.Conn{Conn: packet.NewConn(cli)})
		q.queryAttrs = attrs
		err := q.run("SELECT 1", 1, func() *rowSet { return &rowSet{} })
		want := []byte("\x00\x03SELECT 1") // sequence 0, COM_QUERY
		if attrs {
			want = []byte("\x00\x03\x00\x01SELECT 1")
		}
		if p := <-got; !bytes.Equal(p, want) || err == nil || q.broken {
			t.Errorf("attributes %v: sent %q, want %q; error %v", attrs, p, want, err)
		}
		cli.Close()
		srv.Close()
	}
}
