package mysql

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// TestPurgedBinlog: a stored position whose binlog file was purged fails Open with the wanted
// and the oldest available position; with snapshot.mode=when_needed the source takes a new
// snapshot instead, in a new epoch whose records sort after everything before.
func TestPurgedBinlog(t *testing.T) {
	m := harness.NewMariaDB(t, harness.MariaDBOptions{})
	db := m.Database
	exec(t, m, "USE "+db, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1), (2, 2)")
	store := &memStore{}
	cfg := baseConfig(m, db, nil)
	var l testLog
	l.run(t, newSource(t, cfg, store), time.Minute, func(l *testLog) bool { return l.count("test."+db+".t") == 2 })
	exec(t, m, "USE "+db, "INSERT INTO t VALUES (3, 3)")
	l.run(t, newSource(t, cfg, store), time.Minute, func(l *testLog) bool { return l.count("test."+db+".t") == 3 })
	st, err := parseState(l.committed.State)
	if err != nil {
		t.Fatal(err)
	}
	lastOrder := l.recs[len(l.recs)-1].Position.Order

	// rotate twice, purge everything before the newest file, and write meanwhile
	exec(t, m, "USE "+db, "UPDATE t SET v = 20 WHERE id = 2", "FLUSH BINARY LOGS", "DELETE FROM t WHERE id = 1", "FLUSH BINARY LOGS")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := appConn(t, m, db)
	r, err := c.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	newest, _ := r.GetString(0, 0)
	// the server keeps files until its binlog checkpoint passes them: retry the purge
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

	src := newSource(t, cfg, store)
	err = src.Open(ctx, l.committed)
	src.Close(ctx)
	wantPermanent(t, err,
		fmt.Sprintf("binlog position %s:%d needed to resume is no longer on the server (purged); the oldest available is %s:4", st.File, st.Pos, newest),
		"set snapshot.mode=when_needed")

	cfg[KeySnapshotMode] = SnapshotWhenNeeded
	start := len(l.recs)
	l.run(t, newSource(t, cfg, store), time.Minute, func(l *testLog) bool {
		st, err := parseState(l.committed.State)
		return err == nil && st.Snapshot == nil && st.Epoch == 1
	})
	reads := 0
	for _, r := range l.recs[start:] {
		if bytes.Compare(r.Position.Order, lastOrder) <= 0 {
			t.Fatalf("record of the new snapshot has order %x, not above the last one before %x", r.Position.Order, lastOrder)
		}
		if r.Value != nil && event(t, r).Op == connect.OpRead {
			reads++
		}
	}
	if reads != 2 {
		t.Errorf("the new snapshot read %d rows, want 2", reads)
	}
	if diff := diffStates(tableState(t, m, db, "t"), l.fold(t, "test."+db+".t")); diff != "" {
		t.Errorf("derived state differs from the table:\n%s", diff)
	}
}
