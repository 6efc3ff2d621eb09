package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// checkLog folds the topic of table items (per partition, in order) and compares it with the
// table row by row. It fails on a change that is in the log twice: a streamed change is
// identified by its op, key, LSN and transaction; a snapshot read by its key.
func checkLog(t *testing.T, dir string, d *database) (diff string, records, reads int) {
	t.Helper()
	recs := readTopic(t, dir, "pg.public.items")
	state := map[string]string{}
	seen := map[string]bool{}
	for _, r := range recs {
		records++
		if r.value == nil {
			delete(state, string(r.key))
			continue
		}
		v, err := connect.ParseJSON(r.value)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := connect.ParseChangeEvent(v)
		if err != nil {
			t.Fatal(err)
		}
		var id string
		if ev.Op == connect.OpRead {
			reads++
			id = "r" + string(r.key)
		} else {
			lsn, _ := ev.Source.Get("lsn")
			tx, _ := ev.Source.Get("txId")
			id = fmt.Sprintf("%s %s lsn=%v tx=%v", ev.Op, r.key, lsn, tx)
		}
		if seen[id] {
			t.Fatalf("change %s is in the log twice", id)
		}
		seen[id] = true
		switch ev.Op {
		case connect.OpDelete:
			delete(state, string(r.key))
		case connect.OpTruncate:
			clear(state)
		default:
			img, _ := connect.AppendJSON(nil, ev.After)
			state[string(r.key)] = string(img)
		}
	}
	rows, err := d.conn.Query(context.Background(), "SELECT id, v, s FROM items")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for rows.Next() {
		var id, v int64
		var s string
		if err := rows.Scan(&id, &v, &s); err != nil {
			t.Fatal(err)
		}
		k, _ := connect.AppendJSON(nil, connect.Row{{Name: "id", Value: id}})
		img, _ := connect.AppendJSON(nil, connect.Row{{Name: "id", Value: id}, {Name: "v", Value: v}, {Name: "s", Value: s}})
		want[string(k)] = string(img)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for k, v := range want {
		if state[k] != v {
			out = append(out, fmt.Sprintf("key %s: table %s, log %q", k, v, state[k]))
		}
	}
	for k, v := range state {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("key %s: not in the table, log %s", k, v))
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... %d more", len(out)-10))
	}
	return strings.Join(out, "\n"), records, reads
}

// TestKillDuringSnapshotAndStreaming runs `sluice run` with the PostgreSQL source and kills it
// with SIGKILL at random moments while it snapshots a 200,000-row table and then while it
// streams a concurrent writer's changes (protocol 2, whose large transactions are spilled).
// After every kill the slot's confirmed_flush_lsn is at or below what the log's committed
// position holds. Afterwards the topic holds every change once and the state derived from it
// equals the table. SLUICE_PG_KILLS sets the number of kills (default 6; SLUICE_SOAK=1 makes
// it 60).
func TestKillDuringSnapshotAndStreaming(t *testing.T) {
	d := newDatabase(t, server(t))
	d.exec(t,
		"CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, s text NOT NULL)",
		"INSERT INTO items SELECT g, g % 1000, 'row ' || g FROM generate_series(1, 200000) g",
	)
	dir := t.TempDir()
	path := pipeline(t, dir, d.sourceConfig(map[string]string{
		"snapshot.fetch.size": "2000",
		"max.batch.size":      "500",
	}), 3)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		w, err := pgx.Connect(context.Background(), d.pg.ConnStringFor(d.pg.User, d.name, false))
		if err != nil {
			t.Error(err)
			return
		}
		defer w.Close(context.Background())
		r := rand.New(rand.NewPCG(1, 2))
		next := 200001
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			id := 1 + r.IntN(210000)
			var q string
			switch r.IntN(5) {
			case 0:
				q = fmt.Sprintf("INSERT INTO items VALUES (%d, %d, 'new %d')", next, n, n)
				next++
			case 1:
				q = fmt.Sprintf("UPDATE items SET v = v + 1, s = 'upd %d' WHERE id = %d", n, id)
			case 2:
				q = fmt.Sprintf("DELETE FROM items WHERE id = %d", id)
			case 3: // a transaction of a few hundred changes
				q = fmt.Sprintf("BEGIN; UPDATE items SET v = v + 1 WHERE id BETWEEN %d AND %d; DELETE FROM items WHERE id BETWEEN %d AND %d; COMMIT",
					id, id+300, id+301, id+320)
			case 4: // a primary key change
				q = fmt.Sprintf("UPDATE items SET id = %d WHERE id = %d", next, id)
				next++
			}
			if _, err := w.Exec(context.Background(), q); err != nil {
				t.Errorf("writer: %s: %v", q, err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()

	kills := iterations(6)
	r := rand.New(rand.NewPCG(9, 9))
	var duringSnapshot, duringStream int
	streaming := false
	for i := 0; i < kills; i++ {
		cmd := start(t, dir, path)
		switch {
		case streaming:
			time.Sleep(time.Duration(400+r.IntN(1600)) * time.Millisecond)
		case i < kills/2: // short lives while the snapshot runs: several kills hit it
			time.Sleep(time.Duration(300+r.IntN(500)+100*i) * time.Millisecond)
		default: // long enough for the snapshot to end
			time.Sleep(time.Duration(1500+r.IntN(1500)) * time.Millisecond)
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		st := committedState(t, dir)
		durable, inSnapshot := durableLSN(t, st)
		if inSnapshot {
			duringSnapshot++
		} else if st != nil {
			duringStream++
			streaming = true
		}
		if cf := slotConfirmed(t, d); st != nil && cf > durable {
			t.Fatalf("kill %d: confirmed_flush_lsn %s passed the log's committed position %s (%v)", i, cf, durable, st)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d kills: %d with the snapshot running, %d while streaming", kills, duringSnapshot, duringStream)
	if kills >= 4 && (duringSnapshot == 0 || duringStream == 0) {
		t.Errorf("the kills did not hit both phases")
	}

	// let sluice catch up, stopping it gracefully to read the log, until the state matches
	deadline := time.Now().Add(3 * time.Minute)
	for {
		cmd := start(t, dir, path)
		time.Sleep(4 * time.Second)
		stopGracefully(t, dir, cmd)
		st := committedState(t, dir)
		durable, _ := durableLSN(t, st)
		if cf := slotConfirmed(t, d); cf > durable {
			t.Fatalf("confirmed_flush_lsn %s passed the log's committed position %s", cf, durable)
		}
		diff, n, reads := checkLog(t, dir, d)
		if diff == "" {
			t.Logf("%d records (%d snapshot reads) after %d kills; slot confirmed %s, log committed %s", n, reads, kills, slotConfirmed(t, d), durable)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("derived state differs from the table after %d kills:\n%s\nsluice log:\n%s", kills, diff, logTail(dir))
		}
	}
}

// TestHugeTransactionRSS runs `sluice run` while one transaction inserts 2 million rows
// (protocol 2 streams it; the source spills it to a file): every row reaches the log once, and
// the peak RSS of the sluice process stays under hugeRSSBoundMiB, the bound the README states.
// Kept in memory, the transaction alone would take several times that. The bound allows for the
// collector's target of `sluice run` (GOGC=300: the heap may grow to four times its live size,
// a few batches in flight); measured peaks are 99-146 MiB.
func TestHugeTransactionRSS(t *testing.T) {
	const rows = 2_000_000
	const hugeRSSBoundMiB = 192
	d := newDatabase(t, server(t))
	d.exec(t, "CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, s text NOT NULL)")
	dir := t.TempDir()
	path := pipeline(t, dir, d.sourceConfig(map[string]string{"snapshot.mode": "no_data", "pgoutput.protocol.version": "2"}), 1)
	cmd := start(t, dir, path)
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	// wait for the slot before writing
	for deadline := time.Now().Add(30 * time.Second); slotConfirmed(t, d) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no slot after 30 s:\n%s", logTail(dir))
		}
	}
	d.exec(t, fmt.Sprintf("INSERT INTO items SELECT g, g %% 7, 'row ' || g FROM generate_series(1, %d) g", rows))
	var targetText string
	if err := d.conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&targetText); err != nil {
		t.Fatal(err)
	}
	target, _ := pglogrepl.ParseLSN(targetText)
	t0 := time.Now()
	var hwm float64
	// the slot confirms only what the log holds: wait until it passes the insert
	for slotConfirmed(t, d) < target && time.Since(t0) < 5*time.Minute {
		hwm = max(hwm, harness.PeakRSSMiB(cmd.Process.Pid))
		time.Sleep(500 * time.Millisecond)
	}
	hwm = max(hwm, harness.PeakRSSMiB(cmd.Process.Pid))
	stopGracefully(t, dir, cmd)
	recs := readTopic(t, dir, "pg.public.items")
	seen := make([]bool, rows+1)
	for _, r := range recs {
		k, err := connect.ParseJSON(r.key)
		if err != nil {
			t.Fatal(err)
		}
		id := k.(connect.Row)[0].Value.(int64)
		if seen[id] {
			t.Fatalf("row %d is in the log twice", id)
		}
		seen[id] = true
	}
	if len(recs) != rows {
		t.Fatalf("%d records in the log, want %d\n%s", len(recs), rows, logTail(dir))
	}
	t.Logf("%d rows in %v; peak RSS of sluice %.0f MiB (bound %d MiB)", rows, time.Since(t0).Round(time.Second), hwm, hugeRSSBoundMiB)
	if hwm <= 0 {
		t.Fatal("the peak RSS of sluice was never read")
	}
	if hwm > hugeRSSBoundMiB {
		t.Fatalf("peak RSS %.0f MiB, bound %d MiB", hwm, hugeRSSBoundMiB)
	}
}
