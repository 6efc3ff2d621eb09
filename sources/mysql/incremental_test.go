package mysql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// Incremental snapshots against the package's MariaDB, driving the source directly: the log
// is a testLog (the runtime's replay rule), acknowledged as the runtime does after appending.

func snapshotStatus(t testing.TB, src *Source) snapshot.Status {
	t.Helper()
	var st snapshot.Status
	if err := json.Unmarshal(src.SnapshotStatus(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// tableDone reports whether the status shows the table's snapshot finished.
func tableDone(st snapshot.Status, table string) bool {
	if st.RemainingTables > 0 {
		return false
	}
	for _, ts := range st.Tables {
		if ts.Table == table && ts.State == "SUCCEEDED" {
			return true
		}
	}
	return false
}

func signalSource(t testing.TB, src *Source, typ, data string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := src.SnapshotSignal(ctx, snapshot.OriginAPI, "", typ, []byte(data))
	return err
}

// incrLog is a testLog whose batches are acknowledged lag reads after they were added, like
// the runtime's commits: a kill loses the positions not acknowledged yet.
type incrLog struct {
	testLog
	lag     int
	pending []connect.Position
	last    connect.Position // of the last batch
}

func (l *incrLog) addAcked(t testing.TB, src *Source, b connect.Batch) {
	t.Helper()
	for _, r := range b.Records {
		if len(r.Position.Order) > 0 && l.floor != nil && string(r.Position.Order) <= string(l.floor) {
			l.dropped++
			continue
		}
		if len(r.Position.Order) > 0 {
			l.floor = r.Position.Order
		}
		l.recs = append(l.recs, r)
	}
	if b.Position.IsZero() {
		return
	}
	l.last = b.Position
	l.pending = append(l.pending, b.Position)
	for len(l.pending) > l.lag {
		p := l.pending[0]
		l.pending = l.pending[1:]
		if err := src.Ack(context.Background(), p); err != nil {
			t.Fatalf("ack: %v", err)
		}
		l.committed = p
	}
}

// open opens a source at the log's committed position.
func (l *incrLog) open(t testing.TB, raw map[string]string, store connect.Store) *Source {
	t.Helper()
	src := newSource(t, raw, store)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := src.Open(ctx, l.committed); err != nil {
		src.Close(context.Background())
		t.Fatalf("open: %v", err)
	}
	l.pending = nil
	t.Cleanup(func() { src.Close(context.Background()) })
	return src
}

// read reads into the log until done holds, failing after timeout.
func (l *incrLog) read(t testing.TB, src *Source, timeout time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v; snapshot status %s", timeout, src.SnapshotStatus())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		b, err := src.Read(ctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			t.Fatalf("read: %v", err)
		}
		l.addAcked(t, src, b)
	}
}

// caughtUp reports whether the last batch's position is at or past a binlog position.
func (l *incrLog) caughtUp(file string, pos uint64) bool {
	st, err := parseState(l.last.State)
	if err != nil || st.Snapshot != nil {
		return false
	}
	seq, _ := fileSeq(file)
	got, _ := fileSeq(st.File)
	return got > seq || got == seq && uint64(st.Pos) >= pos
}

func binlogHeadOf(t testing.TB, m *harness.MariaDB) (string, uint64) {
	t.Helper()
	c, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	file, _ := r.GetString(0, 0)
	pos, _ := r.GetUint(0, 1)
	return file, pos
}

// catchUp reads until the log holds every change committed before the call.
func (l *incrLog) catchUp(t testing.TB, m *harness.MariaDB, src *Source) {
	t.Helper()
	file, pos := binlogHeadOf(t, m)
	l.read(t, src, time.Minute, func() bool { return l.caughtUp(file, pos) })
}

// hammer writes to a table with single-statement transactions (inserts, updates, deletes and
// primary key changes) until halted.
type hammer struct {
	stop   chan struct{}
	done   chan struct{}
	writes atomic.Int64
	err    error
}

func startHammer(t testing.TB, m *harness.MariaDB, db, table string, keys int, seed uint64) *hammer {
	t.Helper()
	c := appConn(t, m, db)
	w := &hammer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		rng := rand.New(rand.NewPCG(seed, seed+1))
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			k := rng.IntN(keys)
			var q string
			switch r := rng.IntN(10); {
			case r < 3:
				q = fmt.Sprintf("INSERT INTO %s (id, v, note) VALUES (%d, %d, 'w') ON DUPLICATE KEY UPDATE v = VALUES(v)", table, k, rng.IntN(1000000))
			case r < 6:
				q = fmt.Sprintf("UPDATE %s SET v = %d, note = 'u' WHERE id = %d", table, rng.IntN(1000000), k)
			case r < 8:
				q = fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, k)
			default:
				to := keys + rng.IntN(keys)
				if rng.IntN(2) == 0 {
					k, to = to, rng.IntN(keys)
				}
				q = fmt.Sprintf("UPDATE %s SET id = %d WHERE id = %d", table, to, k)
			}
			if _, err := c.Execute(q); err != nil {
				if strings.Contains(err.Error(), "Duplicate entry") {
					continue
				}
				w.err = err
				return
			}
			w.writes.Add(1)
		}
	}()
	t.Cleanup(func() { w.halt(t) })
	return w
}

func (w *hammer) halt(t testing.TB) {
	t.Helper()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
}

// seedTable creates db.name (id int primary key, v int, note text) with rows rows.
func seedTable(t testing.TB, m *harness.MariaDB, db, name string, rows int) {
	t.Helper()
	exec(t, m, fmt.Sprintf("CREATE TABLE %s.%s (id INT PRIMARY KEY, v INT NOT NULL, note TEXT)", quoteName(db), name),
		fmt.Sprintf("INSERT INTO %s.%s SELECT seq, seq * 7, 'seed' FROM %s.seq_0_to_%d", quoteName(db), name, quoteName(db), rows-1))
}

func countOps(t testing.TB, recs []connect.Record, topic string) map[string]int {
	t.Helper()
	ops := map[string]int{}
	for _, r := range recs {
		if r.Topic == topic && r.Value != nil {
			ops[string(event(t, r).Op)]++
		}
	}
	return ops
}

// TestIncrementalSnapshotUnderWrites snapshots a table chunk by chunk while a writer inserts,
// updates, deletes and changes keys: the table folded from the log equals the table, the
// percent never goes down, and the notifications arrive.
func TestIncrementalSnapshotUnderWrites(t *testing.T) {
	m := sharedMariaDB(t)
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			db := testDB(t, m)
			seedTable(t, m, db, "t", 20000)
			cfg := baseConfig(m, db, map[string]string{
				KeySnapshotMode:            SnapshotNoData,
				KeyHeartbeatInterval:       "200",
				snapshot.KeyChunkSize:      "500",
				snapshot.KeyNotifyChannels: "sink",
				snapshot.KeyNotifyTopic:    "notes",
			})
			// acknowledgements two batches late keep each chunk's window open while the stream
			// goes on: changes after the read must then be dropped from the chunk
			l := &incrLog{lag: 2}
			src := l.open(t, cfg, &memStore{})
			w := startHammer(t, m, db, "t", 20000, seed)
			l.read(t, src, time.Minute, func() bool { return w.writes.Load() > 200 })
			if err := signalSource(t, src, snapshot.SignalExecute, `{"data-collections":["`+db+`\\.t"]}`); err != nil {
				t.Fatal(err)
			}
			last := -1.0
			l.read(t, src, 3*time.Minute, func() bool {
				st := snapshotStatus(t, src)
				for _, ts := range st.Tables {
					if ts.Table == db+".t" {
						if ts.Percent < last {
							t.Fatalf("percent went down: %v after %v", ts.Percent, last)
						}
						last = ts.Percent
					}
				}
				return tableDone(st, db+".t")
			})
			w.halt(t)
			l.catchUp(t, m, src)
			topic := "test." + db + ".t"
			if d := diffStates(tableState(t, m, db, "t"), l.fold(t, topic)); d != "" {
				t.Fatalf("derived state differs from the table (%d writes):\n%s", w.writes.Load(), d)
			}
			ops := countOps(t, l.recs, topic)
			notes := 0
			for _, r := range l.recs {
				if r.Topic == "notes" {
					notes++
				}
			}
			st := src.Stats()
			t.Logf("%d writes, ops %v, %d notifications, %d chunks", w.writes.Load(), ops, notes, st.ChunkID)
			if ops["r"] < 15000 {
				t.Fatalf("only %d snapshot reads: %v", ops["r"], ops)
			}
			if notes < 4 || st.ChunkID < 30 || st.RowsScanned[db+".t"] < 15000 || st.RemainingTableCount != 0 {
				t.Fatalf("want STARTED, IN_PROGRESS..., TABLE_SCAN_COMPLETED, COMPLETED notifications and the chunks counted; got %d notifications, stats %+v", notes, st)
			}
			for _, r := range l.recs {
				if r.Topic == topic && r.Value != nil && event(t, r).Op == connect.OpRead {
					ev := event(t, r)
					if s, _ := ev.Source.Get("snapshot"); s != "incremental" {
						t.Fatalf("source.snapshot of a chunk row: %v", s)
					}
					break
				}
			}
		})
	}
}
