package mysql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
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
	idle    bool             // the last batch was a heartbeat
	// lastReads counts the snapshot rows (op r) of the last batch
	lastReads int
}

func (l *incrLog) addAcked(t testing.TB, src *Source, b connect.Batch) {
	t.Helper()
	l.lastReads = 0
	for _, r := range b.Records {
		if r.Value == nil {
			continue
		}
		if ev, err := connect.ParseChangeEvent(r.Value); err == nil && ev.Op == connect.OpRead {
			l.lastReads++
		}
	}
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
	l.idle = len(b.Records) == 0
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

// catchUp reads until the log holds every change committed before the call and a heartbeat
// came (the batches of a chunk emitted at the last position come before it).
func (l *incrLog) catchUp(t testing.TB, m *harness.MariaDB, src *Source) {
	t.Helper()
	file, pos := binlogHeadOf(t, m)
	l.idle = false
	l.read(t, src, time.Minute, func() bool { return l.idle && l.caughtUp(file, pos) })
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
// updates, deletes and changes keys: the table folded from the log equals the table, no row is
// read twice, the percent never goes down, and the notifications arrive. The second seed reads
// chunks of 5000 rows, converted in three runs while the query streams (convRun): the
// de-duplication keys and the last key of a chunk span the runs.
func TestIncrementalSnapshotUnderWrites(t *testing.T) {
	m := sharedMariaDB(t)
	for _, tc := range []struct {
		seed      uint64
		chunk     string
		minChunks int64
	}{{1, "500", 30}, {2, "5000", 4}} {
		t.Run(fmt.Sprint("seed", tc.seed), func(t *testing.T) {
			seed := tc.seed
			db := testDB(t, m)
			seedTable(t, m, db, "t", 20000)
			cfg := baseConfig(m, db, map[string]string{
				KeySnapshotMode:            SnapshotNoData,
				KeyHeartbeatInterval:       "200",
				KeyMaxBatchSize:            "200", // a chunk goes out in several batches
				snapshot.KeyChunkSize:      tc.chunk,
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
			want, got := tableState(t, m, db, "t"), l.fold(t, topic)
			if d := diffStates(want, got); d != "" {
				t.Fatalf("derived state differs from the table (%d writes):\n%s\n%s", w.writes.Load(), d, keyHistory(t, l.recs, topic, want, got))
			}
			if err := versionsGrow(t, l.recs, topic); err != nil {
				t.Fatal(err)
			}
			ops := countOps(t, l.recs, topic)
			notes := 0
			for _, r := range l.recs {
				if r.Topic == "notes" {
					notes++
				}
			}
			st := src.Stats()
			chunks, reread := rereadRows(t, l.recs, topic, nil)
			t.Logf("%d writes, ops %v, %d notifications, %d chunks (%d with rows)", w.writes.Load(), ops, notes, st.ChunkID, chunks)
			if ops["r"] < 15000 {
				t.Fatalf("only %d snapshot reads: %v", ops["r"], ops)
			}
			if reread[0] != 0 {
				t.Fatalf("%d snapshot rows were read twice (no restart)", reread[0])
			}
			if notes < 4 || st.ChunkID < tc.minChunks || st.RowsScanned[db+".t"] < 15000 || st.RemainingTableCount != 0 {
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
			// a chunk's rows go out once each, in key order (MariaDB converts them in runs
			// while the query streams: no run may be lost, repeated or handed out of order)
			var mark string
			prev := int64(-1)
			for _, rd := range snapshotReads(t, l.recs, topic) {
				if rd.chunk != mark {
					mark, prev = rd.chunk, -1
				}
				if rd.id <= prev {
					t.Fatalf("chunk at %s: row %d after row %d (a chunk's rows go out once each, in key order)", mark, rd.id, prev)
				}
				prev = rd.id
			}
		})
	}
}

// tableStateWith is tableState with more configuration (message.key.columns).
func tableStateWith(t testing.TB, m *harness.MariaDB, db, tbl string, extra map[string]string) map[string]string {
	t.Helper()
	cfg := baseConfig(m, db, map[string]string{KeyTableInclude: db + "\\." + tbl, KeySnapshotMode: SnapshotInitialOnly, KeySnapshotLocking: "none"})
	for k, v := range extra {
		cfg[k] = v
	}
	src := newSource(t, cfg, nil)
	var l testLog
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := src.Open(ctx, connect.Position{}); err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	for src.phase != phaseIdle {
		b, err := src.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.add(b)
	}
	return l.fold(t, "test."+db+"."+tbl)
}

// rereadRows counts the snapshot chunks of a topic (by their binlog position) and the
// snapshot rows read again: rows whose key an earlier snapshot read already emitted. starts
// are the lengths of the log at each restart: reread[i] counts the rows read again after the
// i-th kill, reread[0] those before any (within one run chunks never overlap, so none). A
// kill may make the source read again at most the one chunk it had not had acknowledged, so
// at most a chunk's rows; rows the writer inserts meanwhile may spread that range over two new
// chunks, which is why rows are counted rather than chunks.
func rereadRows(t testing.TB, recs []connect.Record, topic string, starts []int) (chunks int, reread []int) {
	t.Helper()
	reread = make([]int, len(starts)+1)
	run := 0
	seen := map[int64]bool{}
	var cur string
	for _, rd := range snapshotReads(t, recs, topic) {
		for run < len(starts) && rd.at >= starts[run] {
			run++
		}
		if rd.chunk != cur {
			cur = rd.chunk
			chunks++
		}
		if seen[rd.id] {
			reread[run]++
		}
		seen[rd.id] = true
	}
	return chunks, reread
}

// snapshotRead is a snapshot read (op r) of a topic: its index in the log, its chunk (the
// binlog position of its watermark) and its row's id.
type snapshotRead struct {
	at    int
	chunk string
	id    int64
}

// snapshotReads returns the snapshot reads of a topic in log order.
func snapshotReads(t testing.TB, recs []connect.Record, topic string) []snapshotRead {
	t.Helper()
	var out []snapshotRead
	for i, r := range recs {
		if r.Topic != topic || r.Value == nil {
			continue
		}
		ev := event(t, r)
		if ev.Op != connect.OpRead {
			continue
		}
		file, _ := ev.Source.Get("file")
		pos, _ := ev.Source.Get("pos")
		id, _ := ev.After.Get("id")
		k, err := connect.AsInt64(id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, snapshotRead{at: i, chunk: fmt.Sprint(file, pos), id: k})
	}
	return out
}

// TestIncrementalSnapshotResumesAfterKills closes the source without acknowledging its last
// batches, many times, during a snapshot under writes: each restart goes on after the last
// acknowledged chunk, at most one chunk per kill is read again, and the view equals the table.
func TestIncrementalSnapshotResumesAfterKills(t *testing.T) {
	const chunkRows = 300
	m := sharedMariaDB(t)
	db := testDB(t, m)
	seedTable(t, m, db, "t", 30000)
	cfg := baseConfig(m, db, map[string]string{
		KeySnapshotMode:           SnapshotNoData,
		KeyHeartbeatInterval:      "200",
		KeyMaxBatchSize:           "128", // a kill may fall between the batches of a chunk
		snapshot.KeyChunkSize:     strconv.Itoa(chunkRows),
		snapshot.KeyMaxRowsPerSec: "15000",
	})
	store := &memStore{}
	l := &incrLog{lag: 2}
	src := l.open(t, cfg, store)
	w := startHammer(t, m, db, "t", 30000, 7)
	l.read(t, src, time.Minute, func() bool { return w.writes.Load() > 100 })
	if err := signalSource(t, src, snapshot.SignalExecute, `{"data-collections":["`+db+`.t"]}`); err != nil {
		t.Fatal(err)
	}
	id := db + ".t"
	kills := 0
	var starts []int // the log's length at each restart
	for kills < 6 {
		// acknowledgements at once (as the runtime's while a chunk is out), one batch late, or
		// none for 300 batches (a stalled log: a chunk waits for the acknowledgement of the one
		// before, so that a kill reads at most one again). Every third kill falls right after a
		// chunk's first batch (128 rows of 300) is acknowledged, before its other batches are
		// read: the restart must read the chunk again, not go on after it
		l.lag = []int{0, 1, 1 << 30}[kills%3]
		midChunk, stalled := kills%3 == 0, kills%3 == 2
		before := snapshotStatus(t, src)
		reads := 0
		l.read(t, src, time.Minute, func() bool {
			st := snapshotStatus(t, src)
			if tableDone(st, id) {
				return true
			}
			if stalled {
				reads++
				return reads > 300
			}
			if st.ChunkID < before.ChunkID+2+uint64(kills%3) {
				return false
			}
			return !midChunk || l.lastReads == 128
		})
		if tableDone(snapshotStatus(t, src), id) {
			break
		}
		// kill: what was not acknowledged is lost to the source; the log keeps it
		scanned := snapshotStatus(t, src).Tables[0].RowsScanned
		src.Close(context.Background())
		kills++
		starts = append(starts, len(l.recs))
		src = l.open(t, cfg, store)
		l.read(t, src, 10*time.Second, func() bool { return snapshotStatus(t, src).State != "STARTING" })
		if st := snapshotStatus(t, src); len(st.Tables) == 0 || st.Tables[0].RowsScanned+3*chunkRows < scanned {
			t.Fatalf("after kill %d the snapshot did not resume where it was (%d rows read before): %+v", kills, scanned, st)
		}
	}
	l.lag = 2
	l.read(t, src, 3*time.Minute, func() bool { return tableDone(snapshotStatus(t, src), id) })
	w.halt(t)
	l.catchUp(t, m, src)
	topic := "test." + db + ".t"
	if d := diffStates(tableState(t, m, db, "t"), l.fold(t, topic)); d != "" {
		t.Fatalf("derived state differs from the table after %d kills:\n%s", kills, d)
	}
	chunks, reread := rereadRows(t, l.recs, topic, starts)
	t.Logf("%d kills, %d writes, %d chunks, read again: %v (before the first kill, after each)", kills, w.writes.Load(), chunks, reread)
	if kills < 3 {
		t.Fatalf("only %d kills happened during the snapshot", kills)
	}
	if reread[0] != 0 {
		t.Fatalf("%d snapshot rows were read twice before any kill", reread[0])
	}
	for i, n := range reread[1:] {
		if n > chunkRows {
			t.Fatalf("%d snapshot rows were read again after kill %d; at most one chunk (%d rows) per kill may be (read again: %v)", n, i+1, chunkRows, reread)
		}
	}
}

// TestIncrementalSnapshotFilter emits only the rows of an additional condition, and writes
// nothing to the server: its binlog does not move. The request is taken at once on an idle
// server.
func TestIncrementalSnapshotFilter(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	exec(t, m, fmt.Sprintf("CREATE TABLE %s.t (id INT PRIMARY KEY, v INT NOT NULL, note TEXT)", quoteName(db)),
		fmt.Sprintf("INSERT INTO %s.t SELECT seq, seq * 7, IF(seq %% 3 = 0, 'eu', 'us') FROM %s.seq_0_to_2999", quoteName(db), quoteName(db)))
	cfg := baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotNoData, snapshot.KeyChunkSize: "100"})
	l := &incrLog{}
	src := l.open(t, cfg, &memStore{})
	id := db + ".t"
	file, pos := binlogHeadOf(t, m)
	if err := signalSource(t, src, snapshot.SignalExecute, `{"data-collections":["`+id+`"],"additional-conditions":[{"data-collection":"`+id+`","filter":"note = 'eu' AND id < 2000"}]}`); err != nil {
		t.Fatal(err)
	}
	// nothing is written and heartbeat.interval.ms is not set: no binlog event comes (the
	// server's replication heartbeat every 30 s at the earliest), so the request itself must
	// wake the stream
	l.read(t, src, 10*time.Second, func() bool { return tableDone(snapshotStatus(t, src), id) })
	if f, p := binlogHeadOf(t, m); f != file || p != pos {
		t.Fatalf("the binlog moved from %s:%d to %s:%d during the snapshot: it wrote to the server", file, pos, f, p)
	}
	want := tableState(t, m, db, "t")
	for k, v := range want {
		if !strings.Contains(v, `"note":"eu"`) || len(k) > len(`{"id":1999}`) || k >= `{"id":2000}` && len(k) == len(`{"id":2000}`) {
			delete(want, k)
		}
	}
	if d := diffStates(want, l.fold(t, "test."+db+".t")); d != "" {
		t.Fatalf("filtered snapshot:\n%s", d)
	}
	st := snapshotStatus(t, src)
	last := st.Tables[len(st.Tables)-1]
	if len(want) != 667 || last.RowsScanned != int64(len(want)) || last.Percent != 100 {
		t.Fatalf("status %+v, want %d rows (of 667) at 100%%", last, len(want))
	}
}

// TestBlockingSnapshot reads a table while the stream waits: the view equals the table and no
// stream event comes between the snapshot's rows.
func TestBlockingSnapshot(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	seedTable(t, m, db, "t", 5000)
	cfg := baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotNoData, KeyHeartbeatInterval: "200", snapshot.KeyChunkSize: "700"})
	l := &incrLog{}
	src := l.open(t, cfg, &memStore{})
	w := startHammer(t, m, db, "t", 5000, 3)
	l.read(t, src, time.Minute, func() bool { return w.writes.Load() > 100 })
	id := db + ".t"
	if err := signalSource(t, src, snapshot.SignalExecute, `{"data-collections":["`+id+`"],"type":"blocking"}`); err != nil {
		t.Fatal(err)
	}
	l.read(t, src, time.Minute, func() bool { return tableDone(snapshotStatus(t, src), id) })
	w.halt(t)
	l.catchUp(t, m, src)
	topic := "test." + db + ".t"
	if d := diffStates(tableState(t, m, db, "t"), l.fold(t, topic)); d != "" {
		t.Fatalf("derived state differs from the table:\n%s", d)
	}
	first, last, reads := -1, -1, 0
	for i, r := range l.recs {
		if r.Topic == topic && r.Value != nil && event(t, r).Op == connect.OpRead {
			if first < 0 {
				first = i
			}
			last = i
			reads++
		}
	}
	for _, r := range l.recs[first : last+1] {
		if r.Topic == topic && (r.Value == nil || event(t, r).Op != connect.OpRead) {
			t.Fatalf("a stream event between the rows of the blocking snapshot: %v", r.Value)
		}
	}
	if reads < 4000 {
		t.Fatalf("blocking snapshot read %d rows", reads)
	}
}

// TestSnapshotSignalTable drives snapshots through Debezium's signal table: its inserts are
// read from the binlog (the table is not captured) and never emitted.
func TestSnapshotSignalTable(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	seedTable(t, m, db, "t", 3000)
	exec(t, m, fmt.Sprintf("CREATE TABLE %s.dbz_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)", quoteName(db)))
	cfg := baseConfig(m, db, map[string]string{
		KeySnapshotMode: SnapshotNoData, KeyHeartbeatInterval: "200", snapshot.KeyChunkSize: "100", snapshot.KeyMaxRowsPerSec: "3000",
		KeyTableInclude: db + `\.t`, snapshot.KeySignalTable: db + ".dbz_signal",
	})
	l := &incrLog{}
	src := l.open(t, cfg, &memStore{})
	c := appConn(t, m, db)
	sig := func(id, typ, data string) {
		t.Helper()
		if _, err := c.Execute("INSERT INTO dbz_signal VALUES (?, ?, ?)", id, typ, data); err != nil {
			t.Fatal(err)
		}
	}
	id := db + ".t"
	sig("s1", "execute-snapshot", `{"data-collections": ["`+id+`"], "type": "INCREMENTAL"}`)
	l.read(t, src, time.Minute, func() bool { return snapshotStatus(t, src).ChunkID >= 3 })
	sig("s2", "pause-snapshot", `{}`)
	l.read(t, src, time.Minute, func() bool { return snapshotStatus(t, src).State == "PAUSED" })
	paused := snapshotStatus(t, src).ChunkID
	if _, err := c.Execute("UPDATE t SET v = -1 WHERE id = 2999"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	l.read(t, src, 10*time.Second, func() bool { return time.Now().After(deadline) })
	if c := snapshotStatus(t, src).ChunkID; c > paused+1 {
		t.Fatalf("chunks went on while paused: %d, then %d", paused, c)
	}
	sig("s3", "resume-snapshot", `{}`)
	l.read(t, src, time.Minute, func() bool { return tableDone(snapshotStatus(t, src), id) })
	l.catchUp(t, m, src)
	if d := diffStates(tableState(t, m, db, "t"), l.fold(t, "test."+db+".t")); d != "" {
		t.Fatalf("derived state differs from the table:\n%s", d)
	}
	for _, r := range l.recs {
		if strings.Contains(r.Topic, "dbz_signal") {
			t.Fatalf("the signal table's rows were emitted: %s", r.Topic)
		}
	}
	// a second snapshot is stopped through a signal before its end
	sig("s4", "execute-snapshot", `{"data-collections": ["`+id+`"]}`)
	l.read(t, src, time.Minute, func() bool { return snapshotStatus(t, src).RemainingTables == 1 })
	sig("s5", "stop-snapshot", `{"data-collections": ["`+id+`"], "type": "incremental"}`)
	l.read(t, src, time.Minute, func() bool { return snapshotStatus(t, src).RemainingTables == 0 })
	st := snapshotStatus(t, src)
	if last := st.Tables[len(st.Tables)-1]; last.State != "STOPPED" || last.Request != "s4" {
		t.Fatalf("after stop-snapshot: %+v", last)
	}
}

// TestSnapshotControlThroughAPI pauses (across a restart), resumes and stops snapshots of two
// tables through the API, and checks the throttled state of max.rows.per.second.
func TestSnapshotControlThroughAPI(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	seedTable(t, m, db, "a", 2000)
	seedTable(t, m, db, "b", 2000)
	cfg := baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotNoData, KeyHeartbeatInterval: "200", snapshot.KeyChunkSize: "100", snapshot.KeyMaxRowsPerSec: "1000"})
	store := &memStore{}
	l := &incrLog{}
	src := l.open(t, cfg, store)
	if err := signalSource(t, src, snapshot.SignalExecute, `{"data-collections":["`+db+`\\.(a|b)"]}`); err != nil {
		t.Fatal(err)
	}
	// The source's reader may already have queued the tables (QUEUED) or not yet (PENDING).
	if st := snapshotStatus(t, src); len(st.Tables) != 2 || st.State == "IDLE" || st.Tables[0].State != "PENDING" && st.Tables[0].State != "QUEUED" {
		t.Fatalf("status right after the request: %+v", st)
	}
	throttled := false
	l.read(t, src, time.Minute, func() bool {
		st := snapshotStatus(t, src)
		throttled = throttled || st.State == "THROTTLED" && st.Throttled == "max.rows.per.second"
		return st.ChunkID >= 4
	})
	if !throttled {
		t.Fatal("the status never said THROTTLED by max.rows.per.second at 1000 rows/s")
	}
	if err := signalSource(t, src, snapshot.SignalPause, ""); err != nil {
		t.Fatal(err)
	}
	l.read(t, src, time.Minute, func() bool { return snapshotStatus(t, src).State == "PAUSED" })
	if st := src.Stats(); !st.IncrementalSnapshotPaused || st.IncrementalSnapshotRunning || st.RemainingTableCount != 2 {
		t.Fatalf("stats while paused: %+v", st)
	}
	// a restart keeps the pause and the progress
	src.Close(context.Background())
	l.committed = l.last
	src = l.open(t, cfg, store)
	deadline := time.Now().Add(time.Second)
	l.read(t, src, 5*time.Second, func() bool { return time.Now().After(deadline) })
	st := snapshotStatus(t, src)
	if st.State != "PAUSED" || st.Tables[0].RowsScanned == 0 {
		t.Fatalf("after a restart: %+v", st)
	}
	if err := signalSource(t, src, snapshot.SignalResume, ""); err != nil {
		t.Fatal(err)
	}
	l.read(t, src, time.Minute, func() bool { return snapshotStatus(t, src).RemainingTables == 1 })
	if err := signalSource(t, src, snapshot.SignalStop, `{"data-collections":["`+db+`.b"]}`); err != nil {
		t.Fatal(err)
	}
	l.read(t, src, time.Minute, func() bool { return snapshotStatus(t, src).RemainingTables == 0 })
	st = snapshotStatus(t, src)
	states := map[string]string{}
	for _, ts := range st.Tables {
		states[ts.Table] = ts.State
	}
	if states[db+".a"] != "SUCCEEDED" || states[db+".b"] != "STOPPED" || st.State != "IDLE" {
		t.Fatalf("final status: %+v", st)
	}
	if d := diffStates(tableState(t, m, db, "a"), l.fold(t, "test."+db+".a")); d != "" {
		t.Fatalf("table a:\n%s", d)
	}
}

// TestSnapshotRequestErrors checks the requests the source refuses, and the message of each.
func TestSnapshotRequestErrors(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	exec(t, m, fmt.Sprintf("CREATE TABLE %s.t (id INT PRIMARY KEY, v INT)", quoteName(db)), fmt.Sprintf("CREATE TABLE %s.nokey (v INT)", quoteName(db)))
	l := &incrLog{}
	src := l.open(t, baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotNoData}), &memStore{})
	for _, tc := range []struct{ typ, data, want string }{
		{snapshot.SignalExecute, `{"data-collections":["` + db + `.none"]}`, `data-collections[0]: "` + db + `.none" matches no captured table (captured: ` + db + `.nokey, ` + db + `.t)`},
		{snapshot.SignalExecute, `{"data-collections":["` + db + `.nokey"]}`, "table " + db + ".nokey has no primary key: set message.key.columns for it (a unique, non-null column list) or give a surrogate-key"},
		{snapshot.SignalExecute, `{"data-collections":["` + db + `.t"],"surrogate-key":"v"}`, "surrogate-key is not supported by the MySQL source: set message.key.columns for the table (a unique, non-null column list) instead"},
		{snapshot.SignalExecute, `{"data-collections":["` + db + `.t"],"type":"full"}`, `type must be incremental or blocking (got "full")`},
		{"snapshot-now", `{}`, `unknown signal type "snapshot-now"`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := src.SnapshotSignal(ctx, snapshot.OriginAPI, "", tc.typ, []byte(tc.data))
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !connect.IsPermanent(err) {
			t.Errorf("%s %s: got %v, want a permanent error containing %q", tc.typ, tc.data, err, tc.want)
		}
	}
	only := newSource(t, baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotInitialOnly}), nil)
	_, err := only.SnapshotSignal(context.Background(), snapshot.OriginAPI, "", snapshot.SignalExecute, []byte(`{"data-collections":["`+db+`.t"]}`))
	if err == nil || !connect.IsPermanent(err) || !strings.Contains(err.Error(), "snapshot.mode=initial_only: the connector does not stream") {
		t.Errorf("a snapshot request to an initial_only connector: %v", err)
	}
	_, errs := Plugin().ParseConfig(baseConfig(m, db, map[string]string{snapshot.KeyWatermark: "message"}))
	if len(errs) != 1 || errs[0].Key != snapshot.KeyWatermark || !strings.Contains(errs[0].Message, "MySQL and MariaDB have no logical decoding messages") {
		t.Errorf("incremental.snapshot.watermark=message: %v", errs)
	}
}

// TestSnapshotKeylessTableWithMessageKeyColumns snapshots a table without a primary key in the
// order of its message.key.columns.
func TestSnapshotKeylessTableWithMessageKeyColumns(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	exec(t, m, fmt.Sprintf("CREATE TABLE %s.nokey (code VARCHAR(20) NOT NULL, v INT)", quoteName(db)),
		fmt.Sprintf("INSERT INTO %s.nokey SELECT CONCAT('c', LPAD(seq, 5, '0')), seq FROM %s.seq_1_to_1500", quoteName(db), quoteName(db)))
	keys := map[string]string{KeyMessageKeyColumns: db + `\.nokey:code`}
	cfg := baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotNoData, KeyHeartbeatInterval: "200", snapshot.KeyChunkSize: "200"})
	for k, v := range keys {
		cfg[k] = v
	}
	l := &incrLog{lag: 1}
	src := l.open(t, cfg, &memStore{})
	if err := signalSource(t, src, snapshot.SignalExecute, `{"data-collections":["`+db+`.nokey"]}`); err != nil {
		t.Fatal(err)
	}
	exec(t, m, fmt.Sprintf("UPDATE %s.nokey SET v = -v WHERE code = 'c01000'", quoteName(db)))
	l.read(t, src, time.Minute, func() bool { return tableDone(snapshotStatus(t, src), db+".nokey") })
	l.catchUp(t, m, src)
	want := tableStateWith(t, m, db, "nokey", keys)
	if d := diffStates(want, l.fold(t, "test."+db+".nokey")); d != "" || len(want) != 1500 {
		t.Fatalf("derived state differs from the table (%d rows):\n%s", len(want), d)
	}
}

// TestSnapshotOfTablesAddedToTheCapture restarts the source with a table added to
// table.include.list: only that table is snapshotted, then streamed; a further restart with
// the same configuration snapshots nothing.
func TestSnapshotOfTablesAddedToTheCapture(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	seedTable(t, m, db, "a", 500)
	seedTable(t, m, db, "b", 1500)
	store := &memStore{}
	cfg := baseConfig(m, db, map[string]string{KeyHeartbeatInterval: "200", KeyTableInclude: db + `\.a`, snapshot.KeyChunkSize: "200"})
	l := &incrLog{}
	src := l.open(t, cfg, store)
	l.read(t, src, time.Minute, func() bool { return l.count("test."+db+".a") >= 500 })
	exec(t, m, fmt.Sprintf("UPDATE %s.b SET v = -v WHERE id <= 10", quoteName(db)), fmt.Sprintf("INSERT INTO %s.a VALUES (1001, 1, 'x')", quoteName(db)))
	l.read(t, src, time.Minute, func() bool { return len(l.fold(t, "test."+db+".a")) == 501 })
	src.Close(context.Background())
	l.committed = l.last

	cfg[KeyTableInclude] = db + `\.a,` + db + `\.b`
	src = l.open(t, cfg, store)
	l.read(t, src, time.Minute, func() bool { return tableDone(snapshotStatus(t, src), db+".b") })
	exec(t, m, fmt.Sprintf("UPDATE %s.b SET v = 0 WHERE id = 1499", quoteName(db)), fmt.Sprintf("DELETE FROM %s.b WHERE id = 1", quoteName(db)))
	l.catchUp(t, m, src)
	if d := diffStates(tableState(t, m, db, "b"), l.fold(t, "test."+db+".b")); d != "" {
		t.Fatalf("table b:\n%s", d)
	}
	if n := countOps(t, l.recs, "test."+db+".a")["r"]; n != 500 {
		t.Fatalf("table a was read %d times, want its 500 rows once", n)
	}
	src.Close(context.Background())
	l.committed = l.last
	src = l.open(t, cfg, store)
	before := countOps(t, l.recs, "test."+db+".b")["r"]
	deadline := time.Now().Add(2 * time.Second)
	l.read(t, src, 10*time.Second, func() bool { return time.Now().After(deadline) })
	if st := snapshotStatus(t, src); st.RemainingTables != 0 || countOps(t, l.recs, "test."+db+".b")["r"] != before {
		t.Fatalf("a restart without a change read again: %+v", st)
	}
}

// TestIncrementalSnapshotTruncate truncates a table while its chunk waits for the stream: the
// chunk's rows are not emitted after the truncate event.
func TestIncrementalSnapshotTruncate(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	seedTable(t, m, db, "t", 3000)
	cfg := baseConfig(m, db, map[string]string{KeySnapshotMode: SnapshotNoData, KeyHeartbeatInterval: "200", snapshot.KeyChunkSize: "1000"})
	l := &incrLog{lag: 3}
	src := l.open(t, cfg, &memStore{})
	if err := signalSource(t, src, snapshot.SignalExecute, `{"data-collections":["`+db+`.t"]}`); err != nil {
		t.Fatal(err)
	}
	l.read(t, src, time.Minute, func() bool { return snapshotStatus(t, src).ChunkID >= 1 })
	exec(t, m, fmt.Sprintf("TRUNCATE TABLE %s.t", quoteName(db)), fmt.Sprintf("INSERT INTO %s.t VALUES (5, 5, 'after')", quoteName(db)))
	l.read(t, src, time.Minute, func() bool { return tableDone(snapshotStatus(t, src), db+".t") })
	l.catchUp(t, m, src)
	if d := diffStates(tableState(t, m, db, "t"), l.fold(t, "test."+db+".t")); d != "" {
		t.Fatalf("derived state differs from the table:\n%s", d)
	}
}

// versionsGrow checks DESIGN.md's version rule on a topic in log order: a key's versions never
// go down. A chunk row is versioned at its read's binlog position, above every change the read
// holds and below every change the stream delivers after it (the others drop it from the chunk).
func versionsGrow(t testing.TB, recs []connect.Record, topic string) error {
	t.Helper()
	last := map[string]int64{}
	snapshotRows := 0
	for i, r := range recs {
		if r.Topic != topic || r.Value == nil {
			continue
		}
		k, err := connect.AppendJSON(nil, r.Key)
		if err != nil {
			t.Fatal(err)
		}
		op := event(t, r).Op
		if op == connect.OpRead {
			snapshotRows++
		}
		if v, ok := last[string(k)]; ok && r.Version < v {
			return fmt.Errorf("record #%d (op %s) of key %s has version %x, below the key's earlier %x", i, op, k, r.Version, v)
		}
		last[string(k)] = r.Version
	}
	if snapshotRows == 0 {
		return fmt.Errorf("no snapshot rows in %s", topic)
	}
	return nil
}

// keyHistory lists the records of the keys whose folded state differs from the table, for a
// failure message.
func keyHistory(t testing.TB, recs []connect.Record, topic string, want, got map[string]string) string {
	t.Helper()
	bad := map[string]bool{}
	for k, v := range want {
		if got[k] != v {
			bad[k] = true
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			bad[k] = true
		}
	}
	var out []string
	for i, r := range recs {
		if r.Topic != topic {
			continue
		}
		k, _ := connect.AppendJSON(nil, r.Key)
		if !bad[string(k)] || len(out) > 40 {
			continue
		}
		if r.Value == nil {
			out = append(out, fmt.Sprintf("#%d %s tombstone", i, k))
			continue
		}
		ev := event(t, r)
		file, _ := ev.Source.Get("file")
		pos, _ := ev.Source.Get("pos")
		img, _ := connect.AppendJSON(nil, ev.After)
		out = append(out, fmt.Sprintf("#%d %s op %s at %v:%v version %x order %x: %s", i, k, ev.Op, file, pos, r.Version, r.Position.Order, img))
	}
	return strings.Join(out, "\n")
}

// TestIncrementalSnapshotLag checks the lag that incremental.snapshot.max.lag.ms compares: the
// last batch's while decoded binlog events wait, none once the stream has caught up.
func TestIncrementalSnapshotLag(t *testing.T) {
	src := newSource(t, map[string]string{KeyHostname: "h", KeyUser: "u", KeyServerID: "5", KeyTopicPrefix: "p", snapshot.KeyMaxLagMs: "1000"}, nil)
	src.strm = &streamer{s: src, events: make(chan binlogItem, 4)}
	src.stats.behindMs.Store(5000)
	if got := src.incrLag(); got != 0 {
		t.Fatalf("lag with no event waiting: %v, want 0", got)
	}
	src.strm.events <- binlogItem{}
	if got := src.incrLag(); got != 5*time.Second {
		t.Fatalf("lag with events waiting: %v, want 5s", got)
	}
	if src.incr.set.MaxLag != time.Second {
		t.Fatalf("max lag setting: %v", src.incr.set.MaxLag)
	}
}

// TestIncrementalSnapshotParallelTables reads two tables at the same time
// (incremental.snapshot.parallel.tables=2) while writers change both.
func TestIncrementalSnapshotParallelTables(t *testing.T) {
	m := sharedMariaDB(t)
	db := testDB(t, m)
	seedTable(t, m, db, "a", 8000)
	seedTable(t, m, db, "b", 5000)
	cfg := baseConfig(m, db, map[string]string{
		KeySnapshotMode: SnapshotNoData, KeyHeartbeatInterval: "200", KeyMaxBatchSize: "300",
		snapshot.KeyChunkSize: "400", snapshot.KeyParallelTables: "2",
	})
	l := &incrLog{lag: 2}
	src := l.open(t, cfg, &memStore{})
	wa := startHammer(t, m, db, "a", 8000, 11)
	wb := startHammer(t, m, db, "b", 5000, 12)
	if err := signalSource(t, src, snapshot.SignalExecute, `{"data-collections":["`+db+`\\.(a|b)"]}`); err != nil {
		t.Fatal(err)
	}
	both := false
	l.read(t, src, 2*time.Minute, func() bool {
		st := snapshotStatus(t, src)
		running := 0
		for _, ts := range st.Tables {
			if ts.State == "RUNNING" {
				running++
			}
		}
		both = both || running == 2
		return tableDone(st, db+".a") && tableDone(st, db+".b")
	})
	wa.halt(t)
	wb.halt(t)
	l.catchUp(t, m, src)
	if !both {
		t.Fatal("the two tables were never read at the same time")
	}
	for _, tbl := range []string{"a", "b"} {
		topic := "test." + db + "." + tbl
		want, got := tableState(t, m, db, tbl), l.fold(t, topic)
		if d := diffStates(want, got); d != "" {
			t.Fatalf("table %s differs:\n%s\n%s", tbl, d, keyHistory(t, l.recs, topic, want, got))
		}
	}
}

// TestIncrementalChunkSizeDefault: the MySQL source reads chunks of 16384 rows unless told
// otherwise (the shared default, PostgreSQL's, is 4096), and a configured size wins.
func TestIncrementalChunkSizeDefault(t *testing.T) {
	for _, tc := range []struct {
		raw  map[string]string
		want int
	}{
		{map[string]string{}, 16384},
		{map[string]string{snapshot.KeyChunkSize: "1024"}, 1024},
	} {
		raw := map[string]string{KeyHostname: "127.0.0.1", KeyUser: "u", KeyTopicPrefix: "test", KeyServerID: "5400"}
		for k, v := range tc.raw {
			raw[k] = v
		}
		cfg, errs := Plugin().ParseConfig(raw)
		if len(errs) > 0 {
			t.Fatalf("config: %v", errs)
		}
		if got := snapshot.SettingsFrom(cfg).ChunkSize; got != tc.want {
			t.Fatalf("chunk size with %v: %d, want %d", tc.raw, got, tc.want)
		}
	}
	if snapshot.DefaultChunkSize != 4096 {
		t.Fatalf("shared default chunk size %d, want 4096", snapshot.DefaultChunkSize)
	}
}
