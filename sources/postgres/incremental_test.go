package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// memStore is a connect.Store in memory (the runtime keeps it in a topic of the log).
type memStore struct {
	mu      sync.Mutex
	entries [][2][]byte
}

func (s *memStore) Append(_ context.Context, key, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = append(s.entries, [2][]byte{append([]byte(nil), key...), append([]byte(nil), value...)})
	return nil
}

func (s *memStore) Scan(_ context.Context, fn func(key, value []byte) error) error {
	s.mu.Lock()
	entries := append([][2][]byte(nil), s.entries...)
	s.mu.Unlock()
	for _, e := range entries {
		if err := fn(e[0], e[1]); err != nil {
			return err
		}
	}
	return nil
}

// openWithStore builds and opens a source whose env has a store.
func openWithStore(t testing.TB, cfg map[string]string, after connect.Position, store connect.Store) *Source {
	t.Helper()
	src, err := NewFromConfig(cfg, connect.Env{Connector: "test", Logger: testLogger(t), Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Open(testCtx(t), after); err != nil {
		_ = src.Close(context.Background())
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src
}

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

func execSnapshot(t testing.TB, src *Source, data string) {
	t.Helper()
	if _, err := src.SnapshotSignal(testCtx(t), snapshot.OriginAPI, "", snapshot.SignalExecute, []byte(data)); err != nil {
		t.Fatalf("execute-snapshot %s: %v", data, err)
	}
}

// hammer hammers a table with single-row transactions (inserts, updates, deletes and primary
// key changes) until stopped.
type hammer struct {
	stop   chan struct{}
	done   chan struct{}
	writes atomic.Int64
	err    error
}

func startHammer(t testing.TB, db *testDB, table string, keys int, seed uint64) *hammer {
	t.Helper()
	w := &hammer{stop: make(chan struct{}), done: make(chan struct{})}
	c, err := pgx.Connect(testCtx(t), db.pg.ConnStringFor(db.pg.User, db.name, false))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		defer c.Close(context.Background())
		rng := rand.New(rand.NewPCG(seed, seed+1))
		ctx := context.Background()
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
				q = fmt.Sprintf("INSERT INTO %s (id, v, note) VALUES (%d, %d, 'w') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", table, k, rng.IntN(1000000))
			case r < 6:
				q = fmt.Sprintf("UPDATE %s SET v = %d, note = 'u' WHERE id = %d", table, rng.IntN(1000000), k)
			case r < 8:
				q = fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, k)
			default:
				// a primary key change (to a free key, else nothing)
				q = fmt.Sprintf("UPDATE %s SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM %s WHERE id = %d)", table, keys+rng.IntN(keys), k, table, keys+rng.IntN(keys))
			}
			if _, err := c.Exec(ctx, q); err != nil {
				if strings.Contains(err.Error(), "duplicate key") {
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

// readAll reads batches into the log, acknowledging each, until done.
func readAcked(t testing.TB, src *Source, log *memLog, timeout time.Duration, done func() bool) {
	t.Helper()
	readUntil(t, src, log, true, timeout, done)
}

func TestIncrementalSnapshotUnderWrites(t *testing.T) {
	pg := sharedPG(t)
	for _, tc := range []struct {
		name      string
		watermark string
		seed      uint64
	}{
		{"message", "message", 1},
		{"position", "position", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB(t, pg)
			db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)",
				"INSERT INTO t SELECT g, g * 7, 'seed' FROM generate_series(0, 19999) g")
			cfg := db.config(map[string]string{
				KeySnapshotMode:            SnapshotNoData,
				snapshot.KeyChunkSize:      "500",
				snapshot.KeyWatermark:      tc.watermark,
				KeyPublicationMode:         PublicationFiltered,
				KeyTableInclude:            "public.t",
				snapshot.KeyNotifyChannels: "sink",
				snapshot.KeyNotifyTopic:    "notes",
			})
			src := openWithStore(t, cfg, connect.Position{}, &memStore{})
			log := newMemLog()
			w := startHammer(t, db, "t", 20000, tc.seed)
			readAcked(t, src, log, time.Minute, func() bool { return w.writes.Load() > 200 })
			execSnapshot(t, src, `{"data-collections":["public\\.t"]}`)
			var last float64
			readAcked(t, src, log, 3*time.Minute, func() bool {
				st := snapshotStatus(t, src)
				for _, ts := range st.Tables {
					if ts.Table == "public.t" && ts.State == "RUNNING" {
						if ts.Percent < last {
							t.Fatalf("percent went down: %v after %v", ts.Percent, last)
						}
						last = ts.Percent
					}
				}
				return tableDone(st, "public.t")
			})
			w.halt(t)
			end := currentLSN(t, db)
			readAcked(t, src, log, time.Minute, func() bool {
				_, pos := log.snapshot()
				p, err := decodePosition(pos)
				if err != nil {
					return false
				}
				lsn, _ := p.resumeLSN()
				return lsn >= end
			})
			recs, _ := log.snapshot()
			want := tableState(t, db, "t")
			if d := diffStates(want, fold(t, recs, "srv.public.t")); d != "" {
				t.Fatalf("derived state differs from the table (%d writes):\n%s", w.writes.Load(), d)
			}
			if err := versionsGrow(t, recs, "srv.public.t"); err != nil {
				t.Fatal(err)
			}
			ops := countOps(t, recs, "srv.public.t")
			if ops["r"] == 0 {
				t.Fatalf("no snapshot reads: %v", ops)
			}
			// a chunk row's version is the chunk's high watermark, which its source block names
			for _, r := range recs {
				if r.Topic != "srv.public.t" || r.Value == nil {
					continue
				}
				if ev := eventOf(t, r); ev.Op == connect.OpRead {
					lsn, _ := ev.Source.Get("lsn")
					if high, err := connect.AsInt64(lsn); err != nil || r.Version != high {
						t.Fatalf("chunk row with version %d, its source.lsn (the high watermark) %v", r.Version, lsn)
					}
				}
			}
			notes := 0
			for _, r := range recs {
				if r.Topic == "notes" {
					notes++
				}
			}
			st := snapshotStatus(t, src)
			t.Logf("%d writes, ops %v, %d notifications, %d chunks", w.writes.Load(), ops, notes, st.ChunkID)
			if notes < 3 {
				t.Fatalf("want STARTED, IN_PROGRESS..., TABLE_SCAN_COMPLETED, COMPLETED notifications; got %d", notes)
			}
		})
	}
}

// versionsGrow checks DESIGN.md's version rule on a topic in log order: a key's versions never
// go down. A chunk row is versioned at its high watermark, above every commit its read sees and
// below every commit the stream delivers after it (the others drop it from the chunk).
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
		op := eventOf(t, r).Op
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

// acker acknowledges each batch a few reads after it was appended, like the runtime's
// commit interval: a kill loses the positions not yet acknowledged.
type acker struct {
	lag     int
	pending []connect.Position
	acked   connect.Position
}

func (a *acker) add(t testing.TB, src *Source, pos connect.Position) {
	t.Helper()
	if pos.IsZero() {
		return
	}
	a.pending = append(a.pending, pos)
	for len(a.pending) > a.lag {
		p := a.pending[0]
		a.pending = a.pending[1:]
		if err := src.Ack(context.Background(), p); err != nil {
			t.Fatalf("ack: %v", err)
		}
		a.acked = p
	}
}

// readWithAcker reads into the log until done, acknowledging through a.
func readWithAcker(t testing.TB, src *Source, log *memLog, a *acker, timeout time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v; snapshot status %s", timeout, src.SnapshotStatus())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		b, err := src.Read(ctx)
		expired := ctx.Err() != nil
		cancel()
		if err != nil {
			if expired {
				continue
			}
			t.Fatalf("read: %v", err)
		}
		log.add(t, b)
		a.add(t, src, b.Position)
	}
}

// rereadRows counts the snapshot chunks of a topic (by their high watermark, source.lsn) and
// the snapshot rows read again: rows whose key an earlier snapshot read already emitted.
// starts are the lengths of the log at each restart: reread[i] counts the rows read again
// after the i-th kill, reread[0] those before any (within one run chunks never overlap, so
// none). A kill may make the source read again at most the one chunk it had not had
// acknowledged, so at most a chunk's rows; rows the writer inserts meanwhile may spread that
// range over two new chunks, which is why rows are counted rather than chunks.
func rereadRows(t testing.TB, recs []connect.Record, topic string, starts []int) (chunks int, reread []int) {
	t.Helper()
	reread = make([]int, len(starts)+1)
	run := 0
	seen := map[int64]bool{}
	var cur any
	for i, r := range recs {
		for run < len(starts) && i >= starts[run] {
			run++
		}
		if r.Topic != topic || r.Value == nil {
			continue
		}
		ev := eventOf(t, r)
		if ev.Op != connect.OpRead {
			continue
		}
		lsn, _ := ev.Source.Get("lsn")
		id, _ := ev.After.Get("id")
		k, err := connect.AsInt64(id)
		if err != nil {
			t.Fatal(err)
		}
		if lsn != cur {
			cur = lsn
			chunks++
		}
		if seen[k] {
			reread[run]++
		}
		seen[k] = true
	}
	return chunks, reread
}

func TestIncrementalSnapshotResumesAfterKills(t *testing.T) {
	const chunkRows = 300
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)",
		"INSERT INTO t SELECT g, g * 7, 'seed' FROM generate_series(0, 29999) g")
	cfg := db.config(map[string]string{
		KeySnapshotMode:           SnapshotNoData,
		snapshot.KeyChunkSize:     strconv.Itoa(chunkRows),
		snapshot.KeyMaxRowsPerSec: "10000",
		KeyPublicationMode:        PublicationFiltered,
		KeyTableInclude:           "public.t",
	})
	store := &memStore{}
	log := newMemLog()
	a := &acker{lag: 2}
	src := openWithStore(t, cfg, connect.Position{}, store)
	w := startHammer(t, db, "t", 30000, 7)
	readWithAcker(t, src, log, a, time.Minute, func() bool { return w.writes.Load() > 100 })
	execSnapshot(t, src, `{"data-collections":["public.t"]}`)
	kills := 0
	var starts []int // the log's length at each restart
	for kills < 6 {
		// acknowledgements two batches late, or none for 300 batches (a stalled log: a chunk
		// waits for the acknowledgement of the one before, so that a kill reads at most one
		// again)
		stalled := kills%2 == 1
		a.lag = 2
		if stalled {
			a.lag = 1 << 30
		}
		before := snapshotStatus(t, src)
		reads := 0
		readWithAcker(t, src, log, a, time.Minute, func() bool {
			st := snapshotStatus(t, src)
			if stalled {
				reads++
				return reads > 300 || tableDone(st, "public.t")
			}
			return st.ChunkID >= before.ChunkID+2+uint64(kills%3) || tableDone(st, "public.t")
		})
		if tableDone(snapshotStatus(t, src), "public.t") {
			break
		}
		// kill: what was not acknowledged is lost to the source; the log keeps it
		_ = src.Close(context.Background())
		kills++
		recs, _ := log.snapshot()
		starts = append(starts, len(recs))
		src = openWithStore(t, cfg, a.acked, store)
		a.pending = nil
	}
	a.lag = 2
	readWithAcker(t, src, log, a, 3*time.Minute, func() bool { return tableDone(snapshotStatus(t, src), "public.t") })
	w.halt(t)
	end := currentLSN(t, db)
	readWithAcker(t, src, log, a, time.Minute, func() bool {
		_, pos := log.snapshot()
		p, err := decodePosition(pos)
		if err != nil {
			return false
		}
		lsn, _ := p.resumeLSN()
		return lsn >= end
	})
	recs, _ := log.snapshot()
	if d := diffStates(tableState(t, db, "t"), fold(t, recs, "srv.public.t")); d != "" {
		t.Fatalf("derived state differs from the table after %d kills:\n%s", kills, d)
	}
	chunks, reread := rereadRows(t, recs, "srv.public.t", starts)
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

func TestIncrementalSnapshotFilter(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)",
		"INSERT INTO t SELECT g, g * 7, CASE WHEN g % 3 = 0 THEN 'eu' ELSE 'us' END FROM generate_series(0, 2999) g")
	cfg := db.config(map[string]string{KeySnapshotMode: SnapshotNoData, snapshot.KeyChunkSize: "100", KeyPublicationMode: PublicationFiltered, KeyTableInclude: "public.t"})
	src := openWithStore(t, cfg, connect.Position{}, &memStore{})
	log := newMemLog()
	execSnapshot(t, src, `{"data-collections":["public.t"],"additional-conditions":[{"data-collection":"public.t","filter":"note = 'eu' AND id < 2000"}]}`)
	readAcked(t, src, log, time.Minute, func() bool { return tableDone(snapshotStatus(t, src), "public.t") })
	recs, _ := log.snapshot()
	got := fold(t, recs, "srv.public.t")
	want := tableStateQuery(t, db, `SELECT json_build_object('id', id)::text, row_to_json(x)::text FROM t x WHERE note = 'eu' AND id < 2000`)
	if d := diffStates(want, got); d != "" {
		t.Fatalf("filtered snapshot:\n%s", d)
	}
	st := snapshotStatus(t, src)
	last := st.Tables[len(st.Tables)-1]
	if last.RowsScanned != int64(len(want)) || last.Percent != 100 {
		t.Fatalf("status %+v, want %d rows at 100%%", last, len(want))
	}
}

func TestBlockingSnapshot(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)",
		"INSERT INTO t SELECT g, g, 'seed' FROM generate_series(0, 4999) g")
	cfg := db.config(map[string]string{KeySnapshotMode: SnapshotNoData, snapshot.KeyChunkSize: "700", KeyPublicationMode: PublicationFiltered, KeyTableInclude: "public.t"})
	src := openWithStore(t, cfg, connect.Position{}, &memStore{})
	log := newMemLog()
	w := startHammer(t, db, "t", 5000, 3)
	readAcked(t, src, log, time.Minute, func() bool { return w.writes.Load() > 100 })
	execSnapshot(t, src, `{"data-collections":["public.t"],"type":"blocking"}`)
	readAcked(t, src, log, time.Minute, func() bool { return tableDone(snapshotStatus(t, src), "public.t") })
	w.halt(t)
	end := currentLSN(t, db)
	readAcked(t, src, log, time.Minute, func() bool {
		_, pos := log.snapshot()
		p, err := decodePosition(pos)
		if err != nil {
			return false
		}
		lsn, _ := p.resumeLSN()
		return lsn >= end
	})
	recs, _ := log.snapshot()
	if d := diffStates(tableState(t, db, "t"), fold(t, recs, "srv.public.t")); d != "" {
		t.Fatalf("derived state differs from the table:\n%s", d)
	}
	// the stream waited while the table was read: its rows are contiguous in the topic
	first, last, reads := -1, -1, 0
	for i, r := range recs {
		if r.Topic == "srv.public.t" && r.Value != nil && eventOf(t, r).Op == connect.OpRead {
			if first < 0 {
				first = i
			}
			last = i
			reads++
		}
	}
	for _, r := range recs[first : last+1] {
		if r.Topic == "srv.public.t" && (r.Value == nil || eventOf(t, r).Op != connect.OpRead) {
			t.Fatalf("a stream event between the rows of the blocking snapshot: %v", r.Value)
		}
	}
	if reads < 4000 {
		t.Fatalf("blocking snapshot read %d rows", reads)
	}
}

func TestSnapshotSignalTable(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)",
		"INSERT INTO t SELECT g, g, 'seed' FROM generate_series(0, 2999) g",
		"CREATE TABLE dbz_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)")
	cfg := db.config(map[string]string{
		KeySnapshotMode: SnapshotNoData, snapshot.KeyChunkSize: "100", snapshot.KeyMaxRowsPerSec: "3000",
		KeyPublicationMode: PublicationFiltered, KeyTableInclude: "public.t", snapshot.KeySignalTable: "public.dbz_signal",
	})
	src := openWithStore(t, cfg, connect.Position{}, &memStore{})
	log := newMemLog()
	readAcked(t, src, log, 10*time.Second, func() bool { return true })
	db.exec(t, `INSERT INTO dbz_signal VALUES ('s1', 'execute-snapshot', '{"data-collections": ["public.t"], "type": "INCREMENTAL"}')`)
	readAcked(t, src, log, time.Minute, func() bool { return snapshotStatus(t, src).ChunkID >= 3 })
	db.exec(t, `INSERT INTO dbz_signal VALUES ('s2', 'pause-snapshot', '{}')`)
	readAcked(t, src, log, time.Minute, func() bool { return snapshotStatus(t, src).State == "PAUSED" })
	paused := snapshotStatus(t, src).ChunkID
	// paused: no chunk for a while, though the stream goes on
	db.exec(t, "UPDATE t SET v = -1 WHERE id = 2999")
	deadline := time.Now().Add(time.Second)
	readAcked(t, src, log, 10*time.Second, func() bool { return time.Now().After(deadline) })
	if c := snapshotStatus(t, src).ChunkID; c > paused+1 {
		t.Fatalf("chunks went on while paused: %d, then %d", paused, c)
	}
	db.exec(t, `INSERT INTO dbz_signal VALUES ('s3', 'resume-snapshot', '{}')`)
	readAcked(t, src, log, time.Minute, func() bool { return tableDone(snapshotStatus(t, src), "public.t") })
	recs, _ := log.snapshot()
	if d := diffStates(tableState(t, db, "t"), fold(t, recs, "srv.public.t")); d != "" {
		t.Fatalf("derived state differs from the table:\n%s", d)
	}
	for _, r := range recs {
		if strings.Contains(r.Topic, "dbz_signal") {
			t.Fatalf("the signal table's rows were emitted: %s", r.Topic)
		}
	}
	// stop-snapshot through a signal: a second snapshot is stopped before its end
	db.exec(t, `INSERT INTO dbz_signal VALUES ('s4', 'execute-snapshot', '{"data-collections": ["public.t"]}')`)
	readAcked(t, src, log, time.Minute, func() bool { return snapshotStatus(t, src).RemainingTables == 1 })
	db.exec(t, `INSERT INTO dbz_signal VALUES ('s5', 'stop-snapshot', '{"data-collections": ["public.t"], "type": "incremental"}')`)
	readAcked(t, src, log, time.Minute, func() bool { return snapshotStatus(t, src).RemainingTables == 0 })
	st := snapshotStatus(t, src)
	if last := st.Tables[len(st.Tables)-1]; last.State != "STOPPED" || last.Request != "s4" {
		t.Fatalf("after stop-snapshot: %+v", last)
	}
}

func TestSnapshotControlThroughAPI(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int PRIMARY KEY, v int)",
		"INSERT INTO a SELECT g, g FROM generate_series(1, 2000) g", "INSERT INTO b SELECT g, g FROM generate_series(1, 2000) g")
	cfg := db.config(map[string]string{KeySnapshotMode: SnapshotNoData, snapshot.KeyChunkSize: "100", snapshot.KeyMaxRowsPerSec: "2000", KeyPublicationMode: PublicationFiltered, KeyTableInclude: "public.a,public.b"})
	store := &memStore{}
	src := openWithStore(t, cfg, connect.Position{}, store)
	log := newMemLog()
	ctx := testCtx(t)
	if _, err := src.SnapshotSignal(ctx, snapshot.OriginAPI, "r1", snapshot.SignalExecute, []byte(`{"data-collections":["public\\.(a|b)"]}`)); err != nil {
		t.Fatal(err)
	}
	// the request is stored before it is answered, and shown at once
	if st := snapshotStatus(t, src); len(st.Tables) != 2 || st.Tables[0].State != "PENDING" {
		t.Fatalf("status right after the request: %+v", st)
	}
	readAcked(t, src, log, time.Minute, func() bool { return snapshotStatus(t, src).ChunkID >= 2 })
	if _, err := src.SnapshotSignal(ctx, snapshot.OriginAPI, "", snapshot.SignalPause, nil); err != nil {
		t.Fatal(err)
	}
	readAcked(t, src, log, time.Minute, func() bool { return snapshotStatus(t, src).State == "PAUSED" })
	if !src.Stats().IncrementalSnapshotPaused {
		t.Fatal("stats do not say paused")
	}
	// a restart keeps the pause and the progress
	_, pos := log.snapshot()
	_ = src.Close(context.Background())
	src = openWithStore(t, cfg, pos, store)
	deadline := time.Now().Add(time.Second)
	readAcked(t, src, log, 5*time.Second, func() bool { return time.Now().After(deadline) })
	st := snapshotStatus(t, src)
	if st.State != "PAUSED" || st.Tables[0].RowsScanned == 0 {
		t.Fatalf("after a restart: %+v", st)
	}
	if _, err := src.SnapshotSignal(ctx, snapshot.OriginAPI, "", snapshot.SignalResume, nil); err != nil {
		t.Fatal(err)
	}
	readAcked(t, src, log, time.Minute, func() bool {
		return tableDone(snapshotStatus(t, src), "public.a") || snapshotStatus(t, src).RemainingTables == 1
	})
	if _, err := src.SnapshotSignal(ctx, snapshot.OriginAPI, "", snapshot.SignalStop, []byte(`{"data-collections":["public.b"]}`)); err != nil {
		t.Fatal(err)
	}
	readAcked(t, src, log, time.Minute, func() bool { return snapshotStatus(t, src).RemainingTables == 0 })
	st = snapshotStatus(t, src)
	states := map[string]string{}
	for _, ts := range st.Tables {
		states[ts.Table] = ts.State
	}
	if states["public.a"] != "SUCCEEDED" || states["public.b"] != "STOPPED" || st.State != "IDLE" {
		t.Fatalf("final status: %+v", st)
	}
	recs, _ := log.snapshot()
	if d := diffStates(tableState(t, db, "a"), fold(t, recs, "srv.public.a")); d != "" {
		t.Fatalf("table a:\n%s", d)
	}
}

func TestSnapshotRequestErrors(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v int)", "CREATE TABLE nokey (v int)", "ALTER TABLE nokey REPLICA IDENTITY FULL")
	cfg := db.config(map[string]string{KeySnapshotMode: SnapshotNoData, KeyPublicationMode: PublicationFiltered, KeyTableInclude: "public.t,public.nokey"})
	src := openWithStore(t, cfg, connect.Position{}, &memStore{})
	for _, tc := range []struct{ typ, data, want string }{
		{snapshot.SignalExecute, `{"data-collections":["public.none"]}`, `data-collections[0]: "public.none" matches no captured table (captured: public.nokey, public.t)`},
		{snapshot.SignalExecute, `{"data-collections":["public.nokey"]}`, "table public.nokey has no primary key: set message.key.columns for it (a unique, non-null column list) or give a surrogate-key"},
		{snapshot.SignalExecute, `{"data-colections":["public.t"]}`, `unknown field "data-colections"; did you mean "data-collections"?`},
		{snapshot.SignalExecute, `{"data-collections":[]}`, "data-collections is required"},
		{snapshot.SignalExecute, `{"data-collections":["public.t"],"type":"full"}`, `type must be incremental or blocking (got "full")`},
		{snapshot.SignalExecute, `{"data-collections":["public.t"],"additional-conditions":[{"data-collection":"public.x","filter":"v > 1"}]}`, `additional-conditions[0].data-collection "public.x" matches none of the requested tables`},
		{"snapshot-now", `{}`, `unknown signal type "snapshot-now"`},
	} {
		_, err := src.SnapshotSignal(testCtx(t), snapshot.OriginAPI, "", tc.typ, []byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !connect.IsPermanent(err) {
			t.Errorf("%s %s: got %v, want a permanent error containing %q", tc.typ, tc.data, err, tc.want)
		}
	}
}

func TestSnapshotKeylessTableWithMessageKeyColumns(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE nokey (code text NOT NULL, v int)", "ALTER TABLE nokey REPLICA IDENTITY FULL",
		"INSERT INTO nokey SELECT 'c' || lpad(g::text, 5, '0'), g FROM generate_series(1, 1500) g")
	cfg := db.config(map[string]string{KeySnapshotMode: SnapshotNoData, snapshot.KeyChunkSize: "200", KeyPublicationMode: PublicationFiltered,
		KeyTableInclude: "public.nokey", KeyMessageKeyColumns: "public.nokey:code"})
	src := openWithStore(t, cfg, connect.Position{}, &memStore{})
	log := newMemLog()
	execSnapshot(t, src, `{"data-collections":["public.nokey"]}`)
	db.exec(t, "UPDATE nokey SET v = -v WHERE code = 'c01000'")
	readAcked(t, src, log, time.Minute, func() bool { return tableDone(snapshotStatus(t, src), "public.nokey") })
	end := currentLSN(t, db)
	readAcked(t, src, log, time.Minute, func() bool {
		_, pos := log.snapshot()
		p, err := decodePosition(pos)
		if err != nil {
			return false
		}
		lsn, _ := p.resumeLSN()
		return lsn >= end
	})
	recs, _ := log.snapshot()
	want := tableStateQuery(t, db, `SELECT json_build_object('code', code)::text, row_to_json(x)::text FROM nokey x`)
	if d := diffStates(want, fold(t, recs, "srv.public.nokey")); d != "" {
		t.Fatalf("derived state differs from the table:\n%s", d)
	}
}

func TestSnapshotOfTablesAddedToTheCapture(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int PRIMARY KEY, v int)",
		"INSERT INTO a SELECT g, g FROM generate_series(1, 500) g", "INSERT INTO b SELECT g, g FROM generate_series(1, 1500) g")
	store := &memStore{}
	cfg := db.config(map[string]string{KeyPublicationMode: PublicationFiltered, KeyTableInclude: "public.a", snapshot.KeyChunkSize: "200"})
	src := openWithStore(t, cfg, connect.Position{}, store)
	log := newMemLog()
	readAcked(t, src, log, time.Minute, func() bool { recs, _ := log.snapshot(); return len(recs) >= 500 })
	db.exec(t, "UPDATE b SET v = -v WHERE id <= 10", "INSERT INTO a VALUES (1001, 1)")
	readAcked(t, src, log, time.Minute, func() bool { recs, _ := log.snapshot(); return len(fold(t, recs, "srv.public.a")) == 501 })
	_, pos := log.snapshot()
	_ = src.Close(context.Background())

	// b joins the capture: it is snapshotted incrementally, then streamed; a is not read again
	cfg[KeyTableInclude] = "public.a,public.b"
	src = openWithStore(t, cfg, pos, store)
	readAcked(t, src, log, time.Minute, func() bool { return tableDone(snapshotStatus(t, src), "public.b") })
	db.exec(t, "UPDATE b SET v = 0 WHERE id = 1500", "DELETE FROM b WHERE id = 1")
	end := currentLSN(t, db)
	readAcked(t, src, log, time.Minute, func() bool {
		_, pos := log.snapshot()
		p, err := decodePosition(pos)
		if err != nil {
			return false
		}
		lsn, _ := p.resumeLSN()
		return lsn >= end
	})
	recs, _ := log.snapshot()
	if d := diffStates(tableState(t, db, "b"), fold(t, recs, "srv.public.b")); d != "" {
		t.Fatalf("table b:\n%s", d)
	}
	if n := countOps(t, recs, "srv.public.a")["r"]; n != 500 {
		t.Fatalf("table a was read %d times, want its 500 rows once", n)
	}
	// a third start with the same configuration snapshots nothing
	_, pos = log.snapshot()
	_ = src.Close(context.Background())
	src = openWithStore(t, cfg, pos, store)
	before := countOps(t, recs, "srv.public.b")["r"]
	deadline := time.Now().Add(2 * time.Second)
	readAcked(t, src, log, 10*time.Second, func() bool { return time.Now().After(deadline) })
	recs, _ = log.snapshot()
	if st := snapshotStatus(t, src); st.RemainingTables != 0 || countOps(t, recs, "srv.public.b")["r"] != before {
		t.Fatalf("a restart without a change read again: %+v", st)
	}
}

// Updates that leave a TOASTed column unchanged arrive without it: a chunk row such an update
// touched in its window is emitted with the update applied rather than dropped, so the view
// never has a row that lacks the column.
func TestIncrementalSnapshotUnchangedToast(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, big text)",
		"ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL",
		"INSERT INTO t SELECT g, g, repeat(md5(g::text), 100) FROM generate_series(0, 5999) g")
	cfg := db.config(map[string]string{KeySnapshotMode: SnapshotNoData, snapshot.KeyChunkSize: "50", snapshot.KeyMaxRowsPerSec: "3000",
		KeyPublicationMode: PublicationFiltered, KeyTableInclude: "public.t"})
	src := openWithStore(t, cfg, connect.Position{}, &memStore{})
	log := newMemLog()
	c, err := pgx.Connect(testCtx(t), db.pg.ConnStringFor(db.pg.User, db.name, false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(3, 4))
		for n := 0; ; n++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			// only v changes: big arrives unchanged ('u')
			if _, err := c.Exec(context.Background(), "UPDATE t SET v = v + 1 WHERE id = $1", rng.IntN(6000)); err != nil {
				done <- err
				return
			}
		}
	}()
	execSnapshot(t, src, `{"data-collections":["public.t"]}`)
	readAcked(t, src, log, 2*time.Minute, func() bool { return tableDone(snapshotStatus(t, src), "public.t") })
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	end := currentLSN(t, db)
	readAcked(t, src, log, time.Minute, func() bool {
		_, pos := log.snapshot()
		p, err := decodePosition(pos)
		if err != nil {
			return false
		}
		lsn, _ := p.resumeLSN()
		return lsn >= end
	})
	recs, _ := log.snapshot()
	partial := 0
	for _, r := range recs {
		if _, ok := r.Headers.Get(connect.HeaderUnchanged); ok {
			partial++
		}
	}
	if partial == 0 {
		t.Fatal("no update arrived without its TOASTed column: the test tests nothing")
	}
	// The stream's updates of rows no chunk read yet arrive before the rows: a view holds
	// them without big until the chunk comes. At the end every row must be whole.
	state := map[string]connect.Row{}
	for _, r := range recs {
		if r.Topic != "srv.public.t" {
			continue
		}
		k := jsonOf(t, r.Key)
		if r.Value == nil {
			delete(state, k)
			continue
		}
		ev := eventOf(t, r)
		if _, ok := r.Headers.Get(connect.HeaderUnchanged); ok {
			merged := state[k].Clone()
			for _, f := range ev.After {
				merged = merged.Set(f.Name, f.Value)
			}
			state[k] = merged
			continue
		}
		state[k] = ev.After
	}
	got := map[string]string{}
	for k, row := range state {
		got[k] = jsonOf(t, row)
	}
	if d := diffStates(tableState(t, db, "t"), got); d != "" {
		t.Fatalf("derived state differs from the table:\n%s", d)
	}
	t.Logf("%d partial updates", partial)
}

// TestIncrementalSnapshotParallelTables reads two tables at the same time
// (incremental.snapshot.parallel.tables=2) while a writer changes each: both views equal their
// tables.
func TestIncrementalSnapshotParallelTables(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE a (id int PRIMARY KEY, v int NOT NULL, note text)",
		"INSERT INTO a SELECT g, g * 7, 'seed' FROM generate_series(0, 7999) g",
		"CREATE TABLE b (id int PRIMARY KEY, v int NOT NULL, note text)",
		"INSERT INTO b SELECT g, g * 7, 'seed' FROM generate_series(0, 4999) g")
	cfg := db.config(map[string]string{
		KeySnapshotMode:            SnapshotNoData,
		snapshot.KeyChunkSize:      "400",
		snapshot.KeyParallelTables: "2",
		snapshot.KeyMaxRowsPerSec:  "20000",
		KeyPublicationMode:         PublicationFiltered,
		KeyTableInclude:            "public.a,public.b",
	})
	src := openWithStore(t, cfg, connect.Position{}, &memStore{})
	log := newMemLog()
	wa := startHammer(t, db, "a", 8000, 11)
	wb := startHammer(t, db, "b", 5000, 12)
	execSnapshot(t, src, `{"data-collections":["public\\.(a|b)"]}`)
	both := false
	readAcked(t, src, log, 2*time.Minute, func() bool {
		st := snapshotStatus(t, src)
		running := 0
		for _, ts := range st.Tables {
			if ts.State == "RUNNING" {
				running++
			}
		}
		both = both || running == 2
		return tableDone(st, "public.a") && tableDone(st, "public.b")
	})
	wa.halt(t)
	wb.halt(t)
	end := currentLSN(t, db)
	readAcked(t, src, log, time.Minute, func() bool {
		_, pos := log.snapshot()
		p, err := decodePosition(pos)
		if err != nil {
			return false
		}
		lsn, _ := p.resumeLSN()
		return lsn >= end
	})
	if !both {
		t.Fatal("the two tables were never read at the same time")
	}
	recs, _ := log.snapshot()
	for _, tbl := range []string{"a", "b"} {
		topic := "srv.public." + tbl
		if d := diffStates(tableState(t, db, tbl), fold(t, recs, topic)); d != "" {
			t.Fatalf("table %s differs from its view:\n%s", tbl, d)
		}
		if err := versionsGrow(t, recs, topic); err != nil {
			t.Fatal(err)
		}
	}
}

// A signal row is consumed from the stream when it is handled, so a Read cancelled meanwhile
// (readUntil cancels each Read after 300 ms; resolving an execute-snapshot's tables opens a
// connection, which a loaded machine can make slower than that) must not drop the request:
// handled under an already cancelled context, the row still starts its snapshot.
func TestSignalRowSurvivesCancelledRead(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO t SELECT g, g FROM generate_series(1, 300) g",
		"CREATE TABLE dbz_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)")
	cfg := db.config(map[string]string{
		KeySnapshotMode: SnapshotNoData, snapshot.KeyChunkSize: "100",
		KeyPublicationMode: PublicationFiltered, KeyTableInclude: "public.t", snapshot.KeySignalTable: "public.dbz_signal",
	})
	src := openWithStore(t, cfg, connect.Position{}, &memStore{})
	log := newMemLog()
	readAcked(t, src, log, 10*time.Second, func() bool { return true })
	sig := &table{id: "public.dbz_signal", cols: []column{{name: "id"}, {name: "type"}, {name: "data"}}}
	row := []tupleCol{{kind: 't', data: []byte("c1")}, {kind: 't', data: []byte("execute-snapshot")}, {kind: 't', data: []byte(`{"data-collections": ["public.t"]}`)}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := src.signalRow(ctx, sig, row); err != nil {
		t.Fatalf("signal row under a cancelled Read: %v", err)
	}
	readAcked(t, src, log, 30*time.Second, func() bool { return tableDone(snapshotStatus(t, src), "public.t") })
	recs, _ := log.snapshot()
	if d := diffStates(tableState(t, db, "t"), fold(t, recs, "srv.public.t")); d != "" {
		t.Fatalf("derived state differs from the table:\n%s", d)
	}
}
