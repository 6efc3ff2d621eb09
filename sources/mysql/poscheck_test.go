package mysql

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// TestCheckPosition: the offsets API's check of a binlog position against the server (a server
// of its own: the test purges binlogs). Accepted: a transaction's start with its GTID and rows to
// skip, the file's first event, the file's end. Refused, each with the message the user sees:
// a position past the end, inside an event, a GTID the binlog does not hold there, rows to skip
// from an event that starts no transaction, a file not written yet, a purged file. The check
// leaves no connection behind.
func TestCheckPosition(t *testing.T) {
	m := harness.NewMariaDB(t, harness.MariaDBOptions{})
	db := m.Database
	exec(t, m, "USE "+db, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1), (2, 2)")
	c := appConn(t, m, db)
	r, err := c.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	file, _ := r.GetString(0, 0)
	size, _ := r.GetUint(0, 1)
	r, err = c.Execute("SHOW BINLOG EVENTS IN '" + file + "'")
	if err != nil {
		t.Fatal(err)
	}
	// the last transaction: its GTID event and the event after it
	var txPos, nextPos uint64
	var gtid string
	for i := range r.Values {
		typ, _ := r.GetString(i, 2)
		if typ == "Gtid" {
			txPos, _ = r.GetUint(i, 1)
			nextPos, _ = r.GetUint(i, 4)
			info, _ := r.GetString(i, 5)
			gtid, _ = eventGTID(typ, info)
		}
	}
	if gtid == "" || !strings.HasPrefix(gtid, "0-1-") {
		t.Fatalf("no GTID event found in %s: %v", file, r.Values)
	}
	seq, _ := fileSeq(file)
	fileN := func(n uint32) string { return fmt.Sprintf("%s.%06d", file[:strings.LastIndexByte(file, '.')], n) }

	src := newSource(t, baseConfig(m, db, nil), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := func(st string) error {
		t.Helper()
		return src.CheckPosition(ctx, connect.Position{State: []byte(st)})
	}
	stream := func(file string, pos uint64, row uint32, gtid string) string {
		return string(appendStreamState(nil, 0, file, uint32(pos), row, gtid))
	}
	accept := func(st string) {
		t.Helper()
		if err := check(st); err != nil {
			t.Errorf("CheckPosition(%s): %v", st, err)
		}
	}
	refuse := func(st, want string) {
		t.Helper()
		err := check(st)
		if err == nil || err.Error() != want {
			t.Errorf("CheckPosition(%s) = %v\nwant %s", st, err, want)
		}
	}

	accept(stream(file, txPos, 1, gtid))
	accept(stream(file, txPos, 0, ""))
	accept(stream(file, 4, 0, ""))
	accept(stream(file, size, 0, ""))
	accept(`{"v":1,"epoch":0,"snapshot":{"tables":["app.t"],"table":0,"rows":1}}`)

	refuse(stream(file, size+100, 0, ""),
		fmt.Sprintf("position %d is past the end of binlog %s (%d bytes): give a position the server has written", size+100, file, size))
	refuse(stream(file, txPos+1, 0, ""),
		fmt.Sprintf("no event starts at position %d of binlog %s: give the position of an event (SHOW BINLOG EVENTS IN '%s')", txPos+1, file, file))
	refuse(stream(file, 2, 0, ""),
		fmt.Sprintf("position 2 in binlog %s is before its first event: give a position of at least 4", file))
	refuse(stream(file, txPos, 1, "0-1-999999"),
		fmt.Sprintf("binlog position %s:%d holds transaction %s, not 0-1-999999: the server's binlog no longer matches the position", file, txPos, gtid))
	refuse(stream(file, nextPos, 2, ""),
		fmt.Sprintf("binlog position %s:%d holds an event of type Annotate_rows, not a transaction's first event: a position with rows to skip (row 2) must give where the transaction starts", file, nextPos))
	refuse(stream(file, size, 1, gtid),
		fmt.Sprintf("position %d is the end of binlog %s: no transaction starts there (the position names transaction %q, row 1)", size, file, gtid))
	refuse(stream(fileN(seq+5), 4, 0, ""),
		fmt.Sprintf("binlog %s is not on the server yet (ahead of it); the newest is %s, %d bytes: give a position the server has written", fileN(seq+5), file, size))

	// rotate twice and purge everything before the newest file
	exec(t, m, "USE "+db, "FLUSH BINARY LOGS", "UPDATE t SET v = 3 WHERE id = 1", "FLUSH BINARY LOGS")
	r, err = c.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	newest, _ := r.GetString(0, 0)
	for deadline := time.Now().Add(30 * time.Second); ; {
		exec(t, m, "PURGE BINARY LOGS TO '"+newest+"'")
		r, err := c.Execute("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		if first, _ := r.GetString(0, 0); first == newest {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("binlog files before %s are still on the server", newest)
		}
		time.Sleep(200 * time.Millisecond)
	}
	refuse(stream(file, txPos, 1, gtid),
		fmt.Sprintf("binlog %s was purged; the oldest on the server is %s: reset the offsets (a new snapshot) or give a later position", file, newest))
	accept(stream(newest, 4, 0, ""))

	// nothing left open: the check's connections are closed (the server notices a client's
	// close a moment after it returned, so it gets a few seconds)
	for deadline := time.Now().Add(5 * time.Second); ; {
		r, err = c.Execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", m.ReplUser)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := r.GetInt(0, 0)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d connections of %s are still open 5 s after the checks", n, m.ReplUser)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}
