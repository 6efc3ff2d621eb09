package mysql

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

// TestStats: the counters move as Stats documents them, through a snapshot of two tables,
// streamed transactions (one of them a skipped delete, one a DDL), an Ack and Close, while
// another goroutine reads Stats all along (for the race detector).
func TestStats(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	exec(t, m, "USE "+quoteName(db),
		"CREATE TABLE a (id INT PRIMARY KEY, v INT)", "CREATE TABLE b (id INT PRIMARY KEY)",
		"INSERT INTO a VALUES (1, 1), (2, 2), (3, 3)", "INSERT INTO b VALUES (1)", "ANALYZE TABLE a, b")
	c := appConn(t, m, db)
	estimates := map[string]int64{}
	r, err := c.Execute("SELECT TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", db)
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.Values {
		name, _ := r.GetString(i, 0)
		n, _ := r.GetInt(i, 1)
		estimates[db+"."+name] = n
	}

	src := newSource(t, baseConfig(m, db, map[string]string{KeySkippedOperations: "d", KeySnapshotFetchSize: "2", KeyHeartbeatInterval: "100"}), nil)
	want := Stats{MilliSecondsBehindSource: -1}
	if diff := cmp.Diff(want, src.Stats()); diff != "" {
		t.Fatalf("before Open (-want +got):\n%s", diff)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = src.Stats()
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := src.Open(ctx, connect.Position{}); err != nil {
		t.Fatal(err)
	}
	st := src.Stats()
	// The snapshot's reader runs ahead of Read: after Open each table may already be partly
	// (or wholly) scanned, never beyond its rows.
	scannedOK := len(st.RowsScanned) == len(estimates)
	for table, n := range st.RowsScanned {
		scannedOK = scannedOK && n >= 0 && n <= estimates[table]
	}
	if !st.Connected || !st.SnapshotRunning || st.SnapshotCompleted || !scannedOK || !cmp.Equal(st.RowsTotalEstimate, estimates) {
		t.Fatalf("after Open: %+v, want connected, snapshot running, rows scanned 0..estimate per table, estimates %v", st, estimates)
	}

	var l testLog
	read := func(cond func() bool) {
		t.Helper()
		for !cond() {
			b, err := src.Read(ctx)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			l.add(b)
		}
	}
	read(func() bool { return src.phase == phaseStreaming })
	st = src.Stats()
	if st.SnapshotRunning || !st.SnapshotCompleted || st.TotalNumberOfEventsSeen != 4 || st.MilliSecondsBehindSource != -1 ||
		!cmp.Equal(st.RowsScanned, map[string]int64{db + ".a": 3, db + ".b": 1}) {
		t.Fatalf("after the snapshot: %+v, want it completed with 4 events, rows scanned a 3, b 1, not behind", st)
	}

	// four transactions: an insert and an update; a delete (skipped.operations=d); an insert;
	// a DDL (a schema change event)
	for _, q := range []string{
		"BEGIN", "INSERT INTO a VALUES (4, 4)", "UPDATE a SET v = 5 WHERE id = 1", "COMMIT",
		"DELETE FROM a WHERE id = 2",
		"INSERT INTO b VALUES (2)",
		"ALTER TABLE b ADD COLUMN c INT",
	} {
		if _, err := c.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	r, err = c.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	headFile, _ := r.GetString(0, 0)
	headPos, _ := r.GetInt(0, 1)
	before := len(l.recs)
	drain(t, ctx, m, src, &l)
	if got := len(l.recs) - before; got != 4 {
		t.Fatalf("streamed %d records, want 4 (insert, update, insert, schema change)", got)
	}
	st = src.Stats()
	if st.TotalNumberOfEventsSeen != 8 || st.NumberOfCommittedTransactions != 4 || st.NumberOfSkippedEvents != 1 ||
		st.BinlogFilename != headFile || st.BinlogPosition != headPos {
		t.Fatalf("after streaming: %+v, want 8 events, 4 transactions, 1 skipped, binlog at %s:%d", st, headFile, headPos)
	}
	if st.MilliSecondsBehindSource < 0 || st.MilliSecondsBehindSource > 60_000 {
		t.Fatalf("MilliSecondsBehindSource = %d, want the age of the last change (0 to 60 s)", st.MilliSecondsBehindSource)
	}

	if err := src.Ack(ctx, l.committed); err != nil {
		t.Fatal(err)
	}
	if got := src.Stats().NumberOfAcknowledgedBatches; got != 1 {
		t.Fatalf("NumberOfAcknowledgedBatches = %d after one Ack", got)
	}
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := src.Stats(); st.Connected || st.NumberOfReconnects != 0 {
		t.Fatalf("after Close: %+v, want disconnected, no reconnects", st)
	}
}
