package mysql

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
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
// values of every length prefix, a row over 16 MiB (split over two packets), an empty result; a server error is returned as
// go-mysql returns it and leaves the connection usable.
func TestTextQueryCells(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	stmts := []string{"USE " + quoteName(db), "SET GLOBAL max_allowed_packet = 64 << 20",
		"CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB, s VARCHAR(10))", "CREATE TABLE empty (id INT PRIMARY KEY)"}
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

	q := newTextQuery(c)
	queries := []string{"SELECT * FROM big ORDER BY id", "SELECT * FROM empty"}
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

	// a server error: go-mysql's error, and the connection is in step afterwards
	err := q.run("SELECT * FROM nope", 1, func() *rowSet { return &rowSet{} })
	var me *gomysql.MyError
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
	q = newTextQuery(appConn(t, m, db))
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
