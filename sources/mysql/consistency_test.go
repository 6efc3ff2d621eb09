package mysql

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// writer runs random transactions of inserts, updates (some changing the key) and deletes on
// the tables ids (INT key), strs (VARCHAR key) and nokey (no key) until stop is closed.
func writer(t *testing.T, m *harness.MariaDB, db string, seed uint64, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	c := appConn(t, m, db)
	r := rand.New(rand.NewPCG(seed, 7))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		stmts := []string{"BEGIN"}
		for range 1 + r.IntN(6) {
			id := 1 + r.IntN(3000)
			switch r.IntN(10) {
			case 0, 1, 2:
				stmts = append(stmts, fmt.Sprintf("INSERT INTO ids (v, s) VALUES (%d, 'w%d')", r.IntN(1000), n))
			case 3, 4:
				stmts = append(stmts, fmt.Sprintf("UPDATE ids SET v = v + 1, s = 'u%d' WHERE id = %d", n, id))
			case 5:
				stmts = append(stmts, fmt.Sprintf("DELETE FROM ids WHERE id = %d", id))
			case 6:
				stmts = append(stmts, fmt.Sprintf("UPDATE IGNORE ids SET id = id + %d WHERE id = %d", 100000*(1+n%50), id))
			case 7:
				stmts = append(stmts, fmt.Sprintf("INSERT INTO strs VALUES ('k%05d', %d) ON DUPLICATE KEY UPDATE v = v + 1", id, n))
			case 8:
				stmts = append(stmts, fmt.Sprintf("DELETE FROM strs WHERE k = 'k%05d'", id))
			case 9:
				stmts = append(stmts, fmt.Sprintf("UPDATE ids SET v = %d WHERE id BETWEEN %d AND %d", n, id, id+20))
			}
		}
		stmts = append(stmts, "COMMIT")
		for _, q := range stmts {
			if _, err := c.Execute(q); err != nil {
				// the two writers may deadlock each other: roll back and go on
				if strings.Contains(err.Error(), "1213") || strings.Contains(err.Error(), "1205") {
					c.Execute("ROLLBACK")
					break
				}
				t.Errorf("writer: %s: %v", q, err)
				return
			}
		}
	}
}

func iterations(def int) int {
	if os.Getenv("SLUICE_SOAK") == "1" {
		return def * 10
	}
	if v, err := strconv.Atoi(os.Getenv("SLUICE_MYSQL_ITERATIONS")); err == nil && v > 0 {
		return v
	}
	return def
}

// TestSnapshotStreamUnderWritesWithCrashes: a writer changes the tables during the snapshot and
// after it, and the source "crashes" every few batches: it is dropped without Close and a new
// one is opened at a committed position up to three batches behind what the log holds (as
// after a crash between the log append and the position commit). In the end the state derived
// from each topic equals the table, row by row, and no binlog row change is in the log twice.
func TestSnapshotStreamUnderWritesWithCrashes(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	stmts := []string{"USE " + quoteName(db),
		"CREATE TABLE ids (id INT AUTO_INCREMENT PRIMARY KEY, v INT, s VARCHAR(20))",
		"CREATE TABLE strs (k VARCHAR(10) PRIMARY KEY, v INT)",
	}
	var rows []string
	for i := 1; i <= 3000; i++ {
		rows = append(rows, fmt.Sprintf("(%d, %d, 's%d')", i, i%97, i))
	}
	stmts = append(stmts, "INSERT INTO ids VALUES "+join(rows))
	rows = rows[:0]
	for i := 1; i <= 1500; i++ {
		rows = append(rows, fmt.Sprintf("('k%05d', %d)", i*2, i))
	}
	stmts = append(stmts, "INSERT INTO strs VALUES "+join(rows))
	exec(t, m, stmts...)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go writer(t, m, db, 1, stop, &wg)
	go writer(t, m, db, 2, stop, &wg)

	store := &memStore{}
	cfg := baseConfig(m, db, map[string]string{KeySnapshotFetchSize: "400", KeyMaxBatchSize: "150", KeyHeartbeatInterval: "100"})
	var l testLog
	var positions []connect.Position
	want := iterations(8)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := rand.New(rand.NewPCG(3, 3))
	var src *Source
	open := func() {
		src = newSource(t, cfg, store)
		if err := src.Open(ctx, l.committed); err != nil {
			t.Fatalf("open at %s: %v", l.committed, err)
		}
	}
	open()
	batches := 0
	crashes := [2]int{} // in the snapshot, while streaming
	for crashes[0]+crashes[1] < want || crashes[1] < want/2 {
		b, err := src.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		l.add(b)
		if !b.Position.IsZero() {
			positions = append(positions, b.Position)
		}
		batches++
		phase := min(src.phase, 1)
		if phase == phaseSnapshot && crashes[0] >= want/2 || r.IntN(4) != 0 {
			continue
		}
		crashes[phase]++
		// crash: the source is abandoned; the committed position lags up to 3 batches
		src.Close(ctx)
		back := r.IntN(4)
		if back >= len(positions) {
			l.committed = connect.Position{} // the log keeps its records and its floor
		} else {
			l.committed = positions[len(positions)-1-back]
		}
		t.Logf("crash after %d batches (phase %d), resuming at %s", batches, phase, l.committed)
		open()
	}
	close(stop)
	wg.Wait()
	drain(t, ctx, m, src, &l)
	for _, tbl := range []string{"ids", "strs"} {
		want := tableState(t, m, db, tbl)
		got := l.fold(t, "test."+db+"."+tbl)
		if diff := diffStates(want, got); diff != "" {
			t.Errorf("table %s: derived state differs from the table:\n%s", tbl, diff)
		}
	}
	src.Close(ctx)
	checkExactlyOnce(t, &l, "test."+db+".ids")
	t.Logf("%d records, %d replayed records dropped, crashes in snapshot/streaming %v", len(l.recs), l.dropped, crashes)
}

// checkExactlyOnce fails if a binlog row change (its file, transaction, row and part) is in
// the log twice, or a row of the integer-keyed table keyed was read twice by the snapshot.
func checkExactlyOnce(t *testing.T, l *testLog, keyed string) {
	t.Helper()
	seen := map[string]int{}
	reads := map[string]int{}
	for i, r := range l.recs {
		if r.Value != nil && r.Topic == keyed && event(t, r).Op == connect.OpRead {
			k, _ := connect.AppendJSON(nil, r.Key)
			if j, dup := reads[string(k)]; dup {
				t.Fatalf("snapshot row %s is in the log twice (records %d and %d)", k, j, i)
			}
			reads[string(k)] = i
		}
		if r.Value == nil || event(t, r).Op == connect.OpRead {
			continue
		}
		st, err := parseState(r.Position.State)
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("%s:%d:%d:%x", st.File, st.Pos, st.Row, r.Position.Order[len(r.Position.Order)-1])
		if j, dup := seen[id]; dup {
			t.Fatalf("binlog change %s is in the log twice (records %d and %d)", id, j, i)
		}
		seen[id] = i
	}
}

func join(rows []string) string {
	out := ""
	for i, r := range rows {
		if i > 0 {
			out += ","
		}
		out += r
	}
	return out
}
