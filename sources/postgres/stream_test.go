package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// caughtUp reports whether the log's position has reached target: the source has emitted
// everything committed before it.
func caughtUp(log *memLog, target pglogrepl.LSN) bool {
	_, pos := log.snapshot()
	if pos.IsZero() {
		return false
	}
	p, err := decodePosition(pos)
	if err != nil || p.Snapshot != nil {
		return false
	}
	lsn, _ := p.resumeLSN()
	return lsn >= target
}

// writer runs random inserts, updates and deletes on table w (id int primary key, v int,
// s text) from its own connection until stopped.
type writer struct {
	stop chan struct{}
	done chan error
}

func startWriter(t *testing.T, db *testDB, keys int, seed uint64) *writer {
	t.Helper()
	c, err := pgx.Connect(testCtx(t), db.pg.ConnStringFor(db.pg.User, db.name, false))
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer c.Close(context.Background())
		rng := rand.New(rand.NewPCG(seed, 7))
		ctx := context.Background()
		for {
			select {
			case <-w.stop:
				w.done <- nil
				return
			default:
			}
			tx, err := c.Begin(ctx)
			if err != nil {
				w.done <- err
				return
			}
			for i := 0; i < 1+rng.IntN(5); i++ {
				id := rng.IntN(keys) + 1
				var q string
				switch rng.IntN(4) {
				case 0:
					q = fmt.Sprintf("INSERT INTO w VALUES (%d, 0, 'ins') ON CONFLICT (id) DO UPDATE SET v = w.v + 1", id)
				case 1:
					q = fmt.Sprintf("DELETE FROM w WHERE id = %d", id)
				default:
					q = fmt.Sprintf("UPDATE w SET v = v + 1, s = 'upd %d' WHERE id = %d", rng.IntN(1000), id)
				}
				if _, err := tx.Exec(ctx, q); err != nil {
					_ = tx.Rollback(ctx)
					w.done <- err
					return
				}
			}
			if err := tx.Commit(ctx); err != nil {
				w.done <- err
				return
			}
		}
	}()
	return w
}

func (w *writer) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	if err := <-w.done; err != nil {
		t.Fatalf("writer: %v", err)
	}
}

// The snapshot runs in small chunks while transactions change the table; once the stream
// has caught up, the state derived from the records equals the table row by row.
func TestSnapshotAndStreamUnderConcurrentWrites(t *testing.T) {
	for _, proto := range []string{"1", "2"} {
		t.Run("proto"+proto, func(t *testing.T) {
			db := newDB(t, sharedPG(t))
			db.exec(t,
				"CREATE TABLE w (id int PRIMARY KEY, v int NOT NULL, s text)",
				"INSERT INTO w SELECT g, 0, 'init' FROM generate_series(1, 20000) g",
			)
			w := startWriter(t, db, 25000, 1)
			src := openSource(t, db.config(map[string]string{KeyProtocolVersion: proto, KeySnapshotFetchSize: "1000", KeyMaxBatchSize: "300"}), connect.Position{})
			log := newMemLog()
			readUntil(t, src, log, true, 60*time.Second, func() bool { return src.Stats().SnapshotCompleted && len(log.records) > 25000 })
			w.finish(t)
			target := currentLSN(t, db)
			readUntil(t, src, log, true, 60*time.Second, func() bool { return caughtUp(log, target) })
			recs, _ := log.snapshot()
			ops := countOps(t, recs, "srv.public.w")
			if ops["r"] < 15000 || ops["u"] == 0 || ops["d"] == 0 || ops["c"] == 0 {
				t.Fatalf("ops %v: want snapshot reads and streamed inserts, updates and deletes", ops)
			}
			if diff := diffStates(tableState(t, db, "w"), fold(t, recs, "srv.public.w")); diff != "" {
				t.Fatalf("derived state differs from the table (%v):\n%s", ops, diff)
			}
			st := src.Stats()
			if st.RowsScanned["public.w"] != int64(ops["r"]) || !st.SnapshotCompleted || st.SnapshotRunning {
				t.Errorf("stats %+v, want %d rows scanned", st, ops["r"])
			}
		})
	}
}

// The slot confirms nothing that Ack did not allow: while acknowledgements are withheld its
// confirmed_flush_lsn stays put through many status updates; after an Ack of a position
// inside a transaction it moves exactly to that transaction's commit LSN (from where the
// transaction is sent again), and after the Ack of the end of a transaction to its end.
func TestSlotFollowsOnlyAcks(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE a (id int PRIMARY KEY, s text)")
	src := openSource(t, db.config(map[string]string{KeySnapshotMode: SnapshotNoData, KeyMaxBatchSize: "10", KeyStatusInterval: "100"}), connect.Position{})
	start := slotLSN(t, db)
	for i := 0; i < 5; i++ {
		db.exec(t, fmt.Sprintf("INSERT INTO a SELECT g, 'x' FROM generate_series(%d, %d) g", i*25+1, i*25+25))
	}
	log := newMemLog()
	var batches []connect.Batch
	deadline := time.Now().Add(30 * time.Second)
	for len(log.records) < 125 && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		b, err := src.Read(ctx)
		cancel()
		if err != nil {
			continue
		}
		log.add(t, b)
		batches = append(batches, b)
	}
	if len(log.records) != 125 {
		t.Fatalf("%d records, want 125", len(log.records))
	}
	// one more batch: the end of the last transaction
	for time.Now().Before(deadline) {
		if p, _ := decodePosition(batches[len(batches)-1].Position); p.End != 0 {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		b, err := src.Read(ctx)
		cancel()
		if err == nil {
			log.add(t, b)
			batches = append(batches, b)
		}
	}
	// withheld: many status intervals, keepalives answered, nothing confirmed
	time.Sleep(1500 * time.Millisecond)
	if got := slotLSN(t, db); got != start {
		t.Fatalf("confirmed_flush_lsn moved to %s without an ack (start %s)", got, start)
	}
	if !src.Stats().Connected {
		t.Fatal("not connected: the server dropped the stream while acks were withheld")
	}
	// the slot lag metric counts the WAL the slot holds back: at least up to the end of the
	// last transaction received, at most up to the server's insert position
	endLSN, _ := decodePosition(batches[len(batches)-1].Position)
	lagOK := func(lo, hi pglogrepl.LSN) bool {
		lag := src.Stats().SlotLagBytes
		return lag >= int64(lo) && lag <= int64(hi)
	}
	for deadline := time.Now().Add(5 * time.Second); !lagOK(endLSN.End-start, currentLSN(t, db)-start); {
		if time.Now().After(deadline) {
			t.Fatalf("slot lag %d bytes with acks withheld, want %d..%d", src.Stats().SlotLagBytes, endLSN.End-start, currentLSN(t, db)-start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// ack a batch that ends inside a transaction (batches end where the queue ran dry, so
	// which one depends on timing)
	var mid connect.Batch
	var p position
	for _, b := range batches[1 : len(batches)-1] {
		if q, _ := decodePosition(b.Position); q.End == 0 && len(b.Records) > 0 {
			mid, p = b, q
			break
		}
	}
	if mid.Position.IsZero() {
		t.Fatal("no batch ends inside a transaction")
	}
	if err := src.Ack(context.Background(), mid.Position); err != nil {
		t.Fatal(err)
	}
	waitSlot(t, db, p.LSN)
	time.Sleep(500 * time.Millisecond)
	if got := slotLSN(t, db); got != p.LSN {
		t.Fatalf("confirmed_flush_lsn = %s after ack of %s, want its commit LSN %s", got, mid.Position.State, p.LSN)
	}
	// ack the last batch: the end of the last transaction
	last := batches[len(batches)-1]
	pl, _ := decodePosition(last.Position)
	if pl.End == 0 {
		t.Fatalf("last batch %s does not end a transaction", last.Position.State)
	}
	if err := src.Ack(context.Background(), last.Position); err != nil {
		t.Fatal(err)
	}
	waitSlot(t, db, pl.End)
	// the statistic is set by the receiver around its status update: it may trail the slot
	for deadline := time.Now().Add(5 * time.Second); src.Stats().LastAckedLSN != pl.End.String(); {
		if time.Now().After(deadline) {
			t.Errorf("stats last acked %s, want %s", src.Stats().LastAckedLSN, pl.End)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for deadline := time.Now().Add(5 * time.Second); !lagOK(0, currentLSN(t, db)-pl.End); {
		if time.Now().After(deadline) {
			t.Fatalf("slot lag %d bytes after the last ack, want at most %d", src.Stats().SlotLagBytes, currentLSN(t, db)-pl.End)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitSlot(t *testing.T, db *testDB, want pglogrepl.LSN) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := slotLSN(t, db)
		if got == want {
			return
		}
		if got > want {
			t.Fatalf("confirmed_flush_lsn %s passed %s", got, want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("confirmed_flush_lsn %s, want %s", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A captured table that nobody writes, and steady writes to tables that are not captured:
// one in the publication (changes filtered out by the source) and one outside it (nothing
// sent at all). The slot follows the server's WAL end, so its lag stays bounded.
func TestIdleSlotAdvances(t *testing.T) {
	for _, mode := range []string{PublicationAllTables, PublicationFiltered} {
		t.Run(mode, func(t *testing.T) {
			db := newDB(t, sharedPG(t))
			db.exec(t,
				"CREATE TABLE captured (id int PRIMARY KEY)",
				"CREATE TABLE noise (id serial PRIMARY KEY, pad text)",
			)
			src := openSource(t, db.config(map[string]string{
				KeySnapshotMode: SnapshotNoData, KeyPublicationMode: mode, KeyTableInclude: `public\.captured`, KeyStatusInterval: "200",
			}), connect.Position{})
			start := slotLSN(t, db)
			log := newMemLog()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			var werr error
			go func() {
				defer wg.Done()
				c, err := pgx.Connect(context.Background(), db.pg.ConnStringFor(db.pg.User, db.name, false))
				if err != nil {
					werr = err
					return
				}
				defer c.Close(context.Background())
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := c.Exec(context.Background(), "INSERT INTO noise (pad) SELECT repeat('x', 200) FROM generate_series(1, 100)"); err != nil {
						werr = err
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
			var maxLag int64
			deadline := time.Now().Add(6 * time.Second)
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				b, err := src.Read(ctx)
				cancel()
				if err == nil {
					log.add(t, b)
					_ = src.Ack(context.Background(), b.Position)
				}
				if time.Until(deadline) < 3*time.Second {
					lag := int64(currentLSN(t, db) - slotLSN(t, db))
					maxLag = max(maxLag, lag)
				}
			}
			close(stop)
			wg.Wait()
			if werr != nil {
				t.Fatal(werr)
			}
			moved := slotLSN(t, db) - start
			t.Logf("slot moved %d bytes; highest lag in the last 3 s: %d bytes", moved, maxLag)
			if len(log.records) != 0 {
				t.Fatalf("%d records from tables that are not captured", len(log.records))
			}
			if moved < 1<<20 {
				t.Fatalf("slot moved only %d bytes while the server wrote WAL", moved)
			}
			if maxLag > 8<<20 {
				t.Fatalf("slot lag reached %d bytes: WAL piles up behind the idle slot", maxLag)
			}
		})
	}
}

// An update that does not touch a TOASTed column: with REPLICA IDENTITY DEFAULT the column is
// left out of the after image and named in the unchanged header (no placeholder); with FULL
// the old row carries the value, and the after image holds it with nothing marked. The
// derived state keeps the stored value.
func TestUnchangedToast(t *testing.T) {
	for _, ident := range []string{"DEFAULT", "FULL"} {
		t.Run(ident, func(t *testing.T) {
			db := newDB(t, sharedPG(t))
			db.exec(t,
				"CREATE TABLE doc (id int PRIMARY KEY, n int, body text, small text)",
				"ALTER TABLE doc REPLICA IDENTITY "+ident,
				"ALTER TABLE doc ALTER COLUMN body SET STORAGE EXTERNAL",
			)
			src := openSource(t, db.config(map[string]string{KeySnapshotMode: SnapshotNoData}), connect.Position{})
			db.exec(t,
				"INSERT INTO doc VALUES (1, 0, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 2000) g), 'a')",
				"UPDATE doc SET n = 1, small = 'b' WHERE id = 1",
			)
			log := newMemLog()
			readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 2 })
			upd := log.records[1]
			ev := eventOf(t, upd)
			if ev.Op != connect.OpUpdate {
				t.Fatalf("op %v", ev.Op)
			}
			h, marked := upd.Headers.Get(connect.HeaderUnchanged)
			if ident == "DEFAULT" {
				if got := jsonOf(t, ev.After); got != `{"id":1,"n":1,"small":"b"}` {
					t.Errorf("after = %s, want body left out", got)
				}
				if !marked || string(h) != "body" {
					t.Errorf("header %s = %q (present %v), want \"body\"", connect.HeaderUnchanged, h, marked)
				}
			} else {
				body, _ := ev.After.Get("body")
				if got, s := jsonOf(t, ev.After), fmt.Sprint(body); !strings.HasPrefix(got, `{"id":1,"n":1,"body":"`) || !strings.HasSuffix(got, `"small":"b"}`) || len(s) != 64000 {
					t.Errorf("after = %.80s..., want the whole row with body from the old row", got)
				}
				if marked {
					t.Errorf("header %s = %q with REPLICA IDENTITY FULL, want none", connect.HeaderUnchanged, h)
				}
			}
			if strings.Contains(jsonOf(t, upd.Value), "__debezium_unavailable_value") {
				t.Error("placeholder in the event")
			}
			if ident == "FULL" {
				// the old row of REPLICA IDENTITY FULL carries the TOASTed value in full
				body, _ := ev.Before.Get("body")
				if got := jsonOf(t, ev.Before); !strings.HasPrefix(got, `{"id":1,"n":0,"body":"`) || !strings.HasSuffix(got, `"small":"a"}`) || len(body.(string)) != 64000 {
					t.Errorf("before = %.80s...", got)
				}
			}
			if diff := diffStates(tableState(t, db, "doc"), fold(t, log.records, "srv.public.doc")); diff != "" {
				t.Fatalf("derived state:\n%.500s", diff)
			}
		})
	}
}

// A position whose slot is gone: a permanent error naming the slot, the position and the
// fix; with snapshot.mode=when_needed a new slot and a new snapshot in the next epoch.
func TestPositionLost(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE p (id int PRIMARY KEY, v int)", "INSERT INTO p VALUES (1, 1), (2, 2)")
	cfg := db.config(nil)
	src := openSource(t, cfg, connect.Position{})
	log := newMemLog()
	db.exec(t, "INSERT INTO p VALUES (3, 3)")
	readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 3 })
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, pos := log.snapshot()
	p, _ := decodePosition(pos)
	resume, _ := p.resumeLSN()
	db.dropSlot(t)
	db.exec(t, "INSERT INTO p VALUES (4, 4)")

	s2, err := NewFromConfig(cfg, connect.Env{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = s2.Open(testCtx(t), pos)
	_ = s2.Close(context.Background())
	want := fmt.Sprintf(`postgres source: position lost: replication slot %q does not exist, but the stored position (%s) needs it: `+
		`the changes since then are no longer available. To capture again, set snapshot.mode=when_needed (a new snapshot of every table) `+
		`or delete the connector's stored offsets and start over`, db.slot, resume)
	if err == nil || err.Error() != want || !connect.IsPermanent(err) {
		t.Fatalf("open error:\n got %v (permanent %v)\nwant %s", err, connect.IsPermanent(err), want)
	}

	cfg[KeySnapshotMode] = SnapshotWhenNeeded
	s3 := openSource(t, cfg, pos)
	readUntil(t, s3, log, true, 30*time.Second, func() bool { return len(log.records) >= 7 })
	recs, _ := log.snapshot()
	for _, r := range recs[3:] {
		if ev := eventOf(t, r); ev.Op != connect.OpRead || r.Position.Order[3] != 1 {
			t.Errorf("after the new snapshot: op %v order %x, want r in epoch 1", ev.Op, r.Position.Order)
		}
	}
	if diff := diffStates(tableState(t, db, "p"), fold(t, recs, "srv.public.p")); diff != "" {
		t.Fatalf("derived state:\n%s", diff)
	}
	db.exec(t, "UPDATE p SET v = 40 WHERE id = 4")
	readUntil(t, s3, log, true, 30*time.Second, func() bool { return len(log.records) >= 8 })
	recs, _ = log.snapshot()
	if diff := diffStates(tableState(t, db, "p"), fold(t, recs, "srv.public.p")); diff != "" {
		t.Fatalf("derived state after streaming in the new epoch:\n%s", diff)
	}
}

// A slot moved past the stored position by someone else is a lost position too.
func TestPositionPassedBySlot(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE p (id int PRIMARY KEY)")
	cfg := db.config(map[string]string{KeySnapshotMode: SnapshotNoData})
	src := openSource(t, cfg, connect.Position{})
	db.exec(t, "INSERT INTO p VALUES (1)")
	log := newMemLog()
	readUntil(t, src, log, false, 30*time.Second, func() bool { return len(log.records) >= 1 })
	_ = src.Close(context.Background())
	db.exec(t, "INSERT INTO p VALUES (2)")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := db.conn.Exec(testCtx(t), "SELECT pg_replication_slot_advance($1, pg_current_wal_insert_lsn())", db.slot)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	s2, _ := NewFromConfig(cfg, connect.Env{Logger: testLogger(t)})
	err := s2.Open(testCtx(t), log.records[0].Position)
	_ = s2.Close(context.Background())
	if err == nil || !connect.IsPermanent(err) || !strings.Contains(err.Error(), "past the stored position") {
		t.Fatalf("open error %v, want a permanent 'past the stored position'", err)
	}
}

// The server restarts while the source streams: Read reconnects by itself and goes on
// without losing or repeating a change. The fast shutdown waits for the slot to confirm
// everything, which the source's heartbeat through the log provides.
func TestReconnectAfterServerRestart(t *testing.T) {
	pg := sharedPG(t)
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE r (id int PRIMARY KEY, v int NOT NULL, s text)", "INSERT INTO r SELECT g, 0, 'x' FROM generate_series(1, 1000) g")
	src := openSource(t, db.config(map[string]string{KeyMaxBatchSize: "100"}), connect.Position{})
	log := newMemLog()
	readUntil(t, src, log, true, 30*time.Second, func() bool { return len(log.records) >= 1000 })
	db.exec(t, "UPDATE r SET v = v + 1 WHERE id <= 500")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the runtime: read, append, ack, all the time
		defer wg.Done()
		readUntil(t, src, log, true, 2*time.Minute, func() bool {
			select {
			case <-stop:
				return true
			default:
				return false
			}
		})
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if recs, _ := log.snapshot(); len(recs) >= 1500 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the updates before the restart did not arrive")
		}
	}
	_ = db.conn.Close(context.Background())
	t0 := time.Now()
	if err := pg.Restart(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// a fast shutdown waits until the slot confirmed everything sent; the source's
	// heartbeat (asked for by the server's ping) provides that within a status interval
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("server restart took %v: the shutdown waited for the slot", took)
	}
	t.Logf("server restarted in %v", time.Since(t0).Round(time.Millisecond))
	c, err := pgx.Connect(testCtx(t), pg.ConnStringFor(pg.User, db.name, false))
	if err != nil {
		t.Fatal(err)
	}
	db.conn = c
	db.exec(t, "UPDATE r SET v = v + 1 WHERE id > 500", "DELETE FROM r WHERE id % 10 = 0")
	target := currentLSN(t, db)
	deadline := time.Now().Add(time.Minute)
	for !caughtUp(log, target) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	recs, _ := log.snapshot()
	ops := countOps(t, recs, "srv.public.r")
	if ops["r"] != 1000 || ops["u"] != 1000 || ops["d"] != 100 {
		t.Fatalf("ops %v, want 1000 reads, 1000 updates, 100 deletes: each change once", ops)
	}
	if diff := diffStates(tableState(t, db, "r"), fold(t, recs, "srv.public.r")); diff != "" {
		t.Fatalf("derived state:\n%s", diff)
	}
}

// A new Source opened at any position the log holds (here: after every batch, as after a
// crash) goes on exactly after it, also inside a transaction, and also with a large
// transaction streamed in protocol 2: each change reaches the log once.
func TestResumeFromEveryBatch(t *testing.T) {
	for _, c := range []struct{ proto, key string }{{"1", "int"}, {"2", "int"}, {"2", "numeric"}} {
		proto := c.proto
		// a numeric key has no order-preserving encoding: the snapshot numbers its rows
		t.Run("proto"+proto+"-"+c.key, func(t *testing.T) {
			db := newDB(t, sharedPG(t))
			db.exec(t, "CREATE TABLE q (id "+c.key+" PRIMARY KEY, v int NOT NULL, s text)",
				"INSERT INTO q SELECT g, 0, 'x' FROM generate_series(1, 700) g")
			cfg := db.config(map[string]string{KeyProtocolVersion: proto, KeyMaxBatchSize: "97", KeySnapshotFetchSize: "300"})
			db.exec(t,
				"BEGIN; UPDATE q SET v = 1 WHERE id <= 350; DELETE FROM q WHERE id > 650; COMMIT")
			log := newMemLog()
			pos := connect.Position{}
			var firstStream bool
			for round := 0; round < 60; round++ {
				src, err := NewFromConfig(cfg, connect.Env{Logger: testLogger(t)})
				if err != nil {
					t.Fatal(err)
				}
				// a small logical_decoding_work_mem makes the server stream the big transaction
				src.set.replParams = map[string]string{"logical_decoding_work_mem": "64kB"}
				if err := src.Open(testCtx(t), pos); err != nil {
					t.Fatal(err)
				}
				if !firstStream && src.phase == phaseStreaming {
					firstStream = true
					db.exec(t,
						"BEGIN; INSERT INTO q SELECT g, 2, repeat('y', 300) FROM generate_series(1001, 3000) g; UPDATE q SET v = 3 WHERE id <= 100; DELETE FROM q WHERE id BETWEEN 2001 AND 2100; COMMIT")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				b, err := src.Read(ctx)
				cancel()
				if err == nil {
					log.add(t, b)
					if !b.Position.IsZero() {
						pos = b.Position
					}
				}
				_ = src.Close(context.Background())
			}
			target := currentLSN(t, db)
			src := openSource(t, cfg, pos)
			readUntil(t, src, log, true, 60*time.Second, func() bool { return caughtUp(log, target) })
			recs, _ := log.snapshot()
			if log.dropped != 0 {
				t.Errorf("%d records emitted twice", log.dropped)
			}
			ops := countOps(t, recs, "srv.public.q")
			// 700 snapshot rows (the first transaction committed before the slot), then 2000
			// inserts, 100 updates, 100 deletes + tombstones
			want := map[string]int{"r": 650, "c": 2000, "u": 100, "d": 100, "tombstone": 100}
			for k, v := range want {
				if ops[k] != v {
					t.Errorf("%s: %d records, want %d (all: %v)", k, ops[k], v, ops)
				}
			}
			wantState := tableState(t, db, "q")
			if c.key == "numeric" { // numeric values are strings in events
				wantState = tableStateQuery(t, db, `SELECT json_build_object('id', id::text)::text, json_build_object('id', id::text, 'v', v, 's', s)::text FROM q`)
			}
			if diff := diffStates(wantState, fold(t, recs, "srv.public.q")); diff != "" {
				t.Fatalf("derived state:\n%s", diff)
			}
		})
	}
}

// A snapshot resumed after every batch of one row goes on exactly after it: each batch ends at
// the row held back from the Read before, whose position state the source builds for it, also
// across a table switch and for a table whose rows are numbered (a numeric key).
func TestSnapshotResumeAfterEveryRow(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE a (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO a SELECT g, g FROM generate_series(1, 6) g",
		"CREATE TABLE b (id numeric PRIMARY KEY, v int NOT NULL)", "INSERT INTO b SELECT g, g FROM generate_series(1, 5) g")
	cfg := db.config(map[string]string{KeySnapshotMode: SnapshotInitialOnly, KeyMaxBatchSize: "1", KeySnapshotFetchSize: "2"})
	log := newMemLog()
	pos := connect.Position{}
	for round := 0; round < 40 && len(log.records) < 11; round++ {
		src := openSource(t, cfg, pos)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b, err := src.Read(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		log.add(t, b)
		if !b.Position.IsZero() {
			pos = b.Position
		}
		_ = src.Close(context.Background())
	}
	recs, _ := log.snapshot()
	if log.dropped != 0 {
		t.Errorf("%d records emitted twice", log.dropped)
	}
	for table, n := range map[string]int{"a": 6, "b": 5} {
		if got := countOps(t, recs, "srv.public."+table)["r"]; got != n {
			t.Errorf("table %s: %d snapshot rows, want %d", table, got, n)
		}
	}
	if diff := diffStates(tableState(t, db, "a"), fold(t, recs, "srv.public.a")); diff != "" {
		t.Errorf("table a:\n%s", diff)
	}
}

// heartbeat.interval.ms writes logical messages into the WAL; the source uses them as points
// where nothing is in flight, so the slot moves although nothing else is written.
// heartbeat.action.query runs a statement instead (here an insert into a captured table).
func TestHeartbeats(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE hb (id serial PRIMARY KEY, at timestamptz DEFAULT now())")
	src := openSource(t, db.config(map[string]string{KeySnapshotMode: SnapshotNoData, KeyHeartbeatInterval: "100", KeyTableInclude: `public\.a`}), connect.Position{})
	start := slotLSN(t, db)
	log := newMemLog()
	deadline := time.Now().Add(3 * time.Second)
	readUntil(t, src, log, true, 10*time.Second, func() bool { return time.Now().After(deadline) })
	if moved := slotLSN(t, db); moved <= start {
		t.Fatalf("slot did not move with heartbeats: %s", moved)
	}
	if st := src.Stats(); st.SlotLagBytes < 0 || st.LastAckedLSN == "0/0" {
		t.Errorf("stats %+v: want the slot lag measured and an acked LSN", st)
	}
	_ = src.Close(context.Background())

	db2 := newDB(t, sharedPG(t))
	db2.exec(t, "CREATE TABLE hb (id serial PRIMARY KEY)")
	src2 := openSource(t, db2.config(map[string]string{KeySnapshotMode: SnapshotNoData, KeyHeartbeatInterval: "100", KeyHeartbeatQuery: "INSERT INTO hb DEFAULT VALUES"}), connect.Position{})
	log2 := newMemLog()
	readUntil(t, src2, log2, true, 10*time.Second, func() bool { return len(log2.records) >= 3 })
	if ops := countOps(t, log2.records, "srv.public.hb"); ops["c"] < 3 {
		t.Fatalf("heartbeat query records %v", ops)
	}
}

// Ack and Stats run concurrently with Read, as under the runtime (run with -race).
func TestConcurrentAck(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE c (id int PRIMARY KEY, v int)", "INSERT INTO c SELECT g, 0 FROM generate_series(1, 3000) g")
	src := openSource(t, db.config(map[string]string{KeyMaxBatchSize: "100", KeyStatusInterval: "100"}), connect.Position{})
	positions := make(chan connect.Position, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range positions {
			if err := src.Ack(context.Background(), p); err != nil {
				t.Error(err)
			}
			_ = src.Stats()
		}
	}()
	log := newMemLog()
	wrote := make(chan error, 1)
	go func() {
		for i := 0; i < 20; i++ {
			if _, err := db.conn.Exec(context.Background(), fmt.Sprintf("UPDATE c SET v = v + 1 WHERE id %% 20 = %d", i)); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	deadline := time.Now().Add(60 * time.Second)
	for len(log.records) < 6000 && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		b, err := src.Read(ctx)
		cancel()
		if err != nil {
			continue
		}
		log.add(t, b)
		positions <- b.Position
	}
	close(positions)
	<-done
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if len(log.records) < 6000 {
		t.Fatalf("%d records", len(log.records))
	}
}

// A slot that exists before the connector's first start (made by someone else, or by a run
// that stored nothing): a fresh snapshot, then the stream from the slot's older position;
// the changes in between are replayed over the snapshot and the derived state is exact.
func TestExistingSlotWithoutPosition(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE e (id int PRIMARY KEY, v int NOT NULL, s text)", "INSERT INTO e SELECT g, 0, 'a' FROM generate_series(1, 500) g",
		"CREATE PUBLICATION "+db.pub+" FOR ALL TABLES",
		"SELECT pg_create_logical_replication_slot('"+db.slot+"', 'pgoutput')",
		"UPDATE e SET v = 1 WHERE id <= 100", "DELETE FROM e WHERE id > 450", "INSERT INTO e VALUES (1000, 5, 'new')")
	src := openSource(t, db.config(nil), connect.Position{})
	log := newMemLog()
	target := currentLSN(t, db)
	readUntil(t, src, log, true, 30*time.Second, func() bool { return caughtUp(log, target) })
	ops := countOps(t, log.records, "srv.public.e")
	if ops["r"] != 451 || ops["u"] != 100 || ops["d"] != 50 || ops["c"] != 1 {
		t.Errorf("ops %v: want the snapshot (451 rows) and the 151 changes since the slot", ops)
	}
	if diff := diffStates(tableState(t, db, "e"), fold(t, log.records, "srv.public.e")); diff != "" {
		t.Fatalf("derived state:\n%s", diff)
	}
}

// Streamed transactions (protocol 2) that abort leave nothing, and a rolled-back
// subtransaction inside a streamed transaction that commits leaves nothing of its own: its
// changes are cut off the spill file.
func TestStreamedAbort(t *testing.T) {
	db := newDB(t, sharedPG(t))
	db.exec(t, "CREATE TABLE s (id int PRIMARY KEY, pad text)")
	src, err := NewFromConfig(db.config(map[string]string{KeySnapshotMode: SnapshotNoData, KeyProtocolVersion: "2"}), connect.Env{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	src.set.replParams = map[string]string{"logical_decoding_work_mem": "64kB"}
	if err := src.Open(testCtx(t), connect.Position{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	db.exec(t,
		"BEGIN; INSERT INTO s SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g; ROLLBACK",
		"BEGIN; INSERT INTO s VALUES (100001, 'a'); SAVEPOINT p; INSERT INTO s SELECT g, repeat('y', 200) FROM generate_series(1, 5000) g; "+
			"ROLLBACK TO SAVEPOINT p; INSERT INTO s SELECT g, repeat('z', 200) FROM generate_series(200001, 203000) g; COMMIT",
		"INSERT INTO s VALUES (300001, 'after')",
	)
	log := newMemLog()
	readUntil(t, src, log, true, 60*time.Second, func() bool { return len(log.records) >= 3002 })
	target := currentLSN(t, db)
	readUntil(t, src, log, true, 30*time.Second, func() bool { return caughtUp(log, target) })
	if n := len(log.records); n != 3002 {
		t.Fatalf("%d records, want 3002 (1 + 3000 + 1)", n)
	}
	if diff := diffStates(tableState(t, db, "s"), fold(t, log.records, "srv.public.s")); diff != "" {
		t.Fatalf("derived state:\n%s", diff)
	}
	st := src.Stats()
	if st.StreamedTransactions < 2 {
		t.Errorf("%d streamed transactions, want the two large ones streamed", st.StreamedTransactions)
	}
	entries, _ := os.ReadDir(src.spill.dir)
	if len(entries) != 0 {
		t.Errorf("spill files left: %v", entries)
	}
}

// A reader that stalls (the log is slow) while the server has much to send: the receiver
// keeps answering within wal_sender_timeout, so the server keeps the connection.
func TestStalledReaderKeepsConnection(t *testing.T) {
	pg := harness.NewPostgres(t, harness.PostgresOptions{Settings: []string{"wal_sender_timeout = 2s"}})
	db := newDB(t, pg)
	db.exec(t, "CREATE TABLE k (id int PRIMARY KEY)")
	src := openSource(t, db.config(map[string]string{KeySnapshotMode: SnapshotNoData, KeyMaxQueueSize: "16", KeyStatusInterval: "500"}), connect.Position{})
	db.exec(t, "INSERT INTO k SELECT generate_series(1, 20000)")
	time.Sleep(7 * time.Second) // no Read: the queue is full, the server waits on us
	log := newMemLog()
	readUntil(t, src, log, true, 60*time.Second, func() bool { return len(log.records) >= 20000 })
	if st := src.Stats(); st.Reconnects != 0 {
		t.Fatalf("%d reconnects: the server dropped the stream while the reader stalled", st.Reconnects)
	}
}
