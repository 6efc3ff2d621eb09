package postgres

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// The package's tests share one PostgreSQL 15 server; each test works in its own database
// with its own slot and publication, and drops them.

var shared struct {
	mu sync.Mutex
	pg *harness.Postgres
}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	if shared.pg != nil {
		if err := shared.pg.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close postgres:", err)
			code = 1
		}
	}
	shared.mu.Unlock()
	// every source stopped its receiver and monitor goroutines in Close
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedPG starts the package's server on first use.
func sharedPG(t testing.TB) *harness.Postgres {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pg == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pg, err := harness.StartPostgres(ctx, harness.PostgresOptions{})
		if err != nil {
			t.Fatal(err)
		}
		shared.pg = pg
	}
	return shared.pg
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var dbSeq atomic.Int64

// testDB is a database of its own on a server.
type testDB struct {
	pg   *harness.Postgres
	name string
	conn *pgx.Conn // superuser, on the database
	slot string
	pub  string
}

// newDB creates a fresh database; cleanup drops its slots and the database.
func newDB(t testing.TB, pg *harness.Postgres) *testDB {
	t.Helper()
	ctx := testCtx(t)
	n := dbSeq.Add(1)
	db := &testDB{pg: pg, name: fmt.Sprintf("t%d_%d", os.Getpid(), n), slot: fmt.Sprintf("s%d_%d", os.Getpid(), n), pub: "sluice_pub"}
	if err := pg.Exec(ctx, "CREATE DATABASE "+db.name); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, pg.ConnStringFor(pg.User, db.name, false))
	if err != nil {
		t.Fatal(err)
	}
	db.conn = c
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c.Close(ctx)
		// inactive slots keep WAL forever: drop every slot of the database
		admin, err := pgx.Connect(ctx, pg.ConnString())
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer admin.Close(ctx)
		for i := 0; i < 100; i++ {
			_, _ = admin.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL", db.name)
			_, err = admin.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1", db.name)
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("cleanup: drop slots: %v", err)
		}
		if _, err := admin.Exec(ctx, "DROP DATABASE "+db.name+" WITH (FORCE)"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return db
}

func (db *testDB) exec(t testing.TB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := db.conn.Exec(testCtx(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// config is a source configuration for the database; overrides replace or add keys
// (an empty value deletes the key).
func (db *testDB) config(overrides map[string]string) map[string]string {
	cfg := map[string]string{
		KeyHostname:        db.pg.Host,
		KeyPort:            strconv.Itoa(db.pg.Port),
		KeyUser:            db.pg.User,
		KeyDBName:          db.name,
		KeySSLMode:         "disable",
		KeyTopicPrefix:     "srv",
		KeySlotName:        db.slot,
		KeyPublicationName: db.pub,
		KeyStatusInterval:  "200",
		KeySlotRetryDelay:  "200",
		KeyMaxBatchSize:    "500",
	}
	for k, v := range overrides {
		if v == "" {
			delete(cfg, k)
		} else {
			cfg[k] = v
		}
	}
	return cfg
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// openSource builds and opens a source, as the runtime does for a connector without
// transforms (snapshot rows rendered as JSON: connect.Env.RawJSON).
func openSource(t testing.TB, cfg map[string]string, after connect.Position) *Source {
	t.Helper()
	return openSourceEnv(t, cfg, after, true)
}

// openSourceEnv is openSource with connect.Env.RawJSON as given.
func openSourceEnv(t testing.TB, cfg map[string]string, after connect.Position, rawJSON bool) *Source {
	t.Helper()
	src, err := NewFromConfig(cfg, connect.Env{Connector: "test", Logger: testLogger(t), RawJSON: rawJSON})
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

// memLog is the test's log: records in append order, dropping a replayed record whose Order
// is not above the last one of its topic (the runtime's exactly-once rule, one partition per
// topic), and the position of the last batch.
type memLog struct {
	mu        sync.Mutex
	records   []connect.Record
	floor     map[string][]byte
	committed connect.Position
	dropped   int
}

func newMemLog() *memLog { return &memLog{floor: map[string][]byte{}} }

func (l *memLog) add(t testing.TB, b connect.Batch) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var prev []byte
	for _, r := range b.Records {
		if len(r.Position.Order) == 0 {
			t.Fatalf("record without a position: %+v", r)
		}
		if prev != nil && bytes.Compare(r.Position.Order, prev) <= 0 {
			t.Fatalf("orders do not grow within a batch: %x after %x", r.Position.Order, prev)
		}
		prev = r.Position.Order
		harness.CheckRendered(t, r)
		if f := l.floor[r.Topic]; f != nil && bytes.Compare(r.Position.Order, f) <= 0 {
			l.dropped++
			continue
		}
		l.floor[r.Topic] = r.Position.Order
		l.records = append(l.records, r)
	}
	if len(b.Records) > 0 && bytes.Compare(b.Position.Order, b.Records[len(b.Records)-1].Position.Order) < 0 {
		t.Fatalf("batch position %x below its last record %x", b.Position.Order, b.Records[len(b.Records)-1].Position.Order)
	}
	if !b.Position.IsZero() {
		l.committed = b.Position
	}
}

func (l *memLog) snapshot() ([]connect.Record, connect.Position) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]connect.Record(nil), l.records...), l.committed
}

// readUntil reads batches into the log (acknowledging each when ack is set) until done
// reports true or the deadline passes.
func readUntil(t testing.TB, src *Source, log *memLog, ack bool, timeout time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			recs, _ := log.snapshot()
			t.Fatalf("timed out after %v with %d records in the log", timeout, len(recs))
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
		if ack && !b.Position.IsZero() {
			if err := src.Ack(context.Background(), b.Position); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
	}
}

// values of the data model as JSON text, for compact assertions.
func jsonOf(t testing.TB, v any) string {
	t.Helper()
	b, err := connect.MarshalJSONValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// keyOf returns a record's key as a Row, parsing a rendered one.
func keyOf(t testing.TB, r connect.Record) connect.Row {
	t.Helper()
	k, err := connect.Materialize(r.Key)
	if err != nil {
		t.Fatalf("record %s: key: %v", r.Topic, err)
	}
	row, ok := k.(connect.Row)
	if !ok {
		t.Fatalf("record %s: key %s is not a row", r.Topic, jsonOf(t, r.Key))
	}
	return row
}

// event fields of a record.
func eventOf(t testing.TB, r connect.Record) *connect.ChangeEvent {
	t.Helper()
	ev, err := connect.ParseChangeEvent(r.Value)
	if err != nil {
		t.Fatalf("record %s: %v", r.Topic, err)
	}
	return ev
}

// fold derives the state of one topic: the last after image per key, without the deleted
// keys (connect's derived-state rule), rendered as JSON per key.
func fold(t testing.TB, recs []connect.Record, topic string) map[string]string {
	t.Helper()
	state := map[string]string{}
	for _, r := range recs {
		if r.Topic != topic {
			continue
		}
		k := jsonOf(t, r.Key)
		if r.Value == nil {
			delete(state, k)
			continue
		}
		ev := eventOf(t, r)
		switch ev.Op {
		case connect.OpDelete:
			delete(state, k)
		case connect.OpTruncate:
			clear(state)
		default:
			if unch, ok := r.Headers.Get(connect.HeaderUnchanged); ok {
				// partial update: keep the stored values of the unchanged columns
				old, _ := connect.ParseJSON([]byte(state[k]))
				merged, _ := old.(connect.Row)
				merged = merged.Clone()
				for _, f := range ev.After {
					merged = merged.Set(f.Name, f.Value)
				}
				for _, name := range strings.Split(string(unch), ",") {
					if merged.Index(name) < 0 {
						t.Fatalf("key %s: unchanged column %s has no stored value", k, name)
					}
				}
				state[k] = jsonOf(t, merged)
				continue
			}
			state[k] = jsonOf(t, ev.After)
		}
	}
	return state
}

// tableState reads a table as the fold renders it: key {"id":n} → the row as JSON, through
// a query that builds the same JSON with the column order of the table (for tables whose
// columns are integers and text).
func tableState(t testing.TB, db *testDB, table string) map[string]string {
	t.Helper()
	return tableStateQuery(t, db, fmt.Sprintf(`SELECT json_build_object('id', id)::text, row_to_json(x)::text FROM %s x ORDER BY id`, table))
}

// tableStateQuery is tableState with a query that returns the key's JSON and the row's JSON.
func tableStateQuery(t testing.TB, db *testDB, query string) map[string]string {
	t.Helper()
	rows, err := db.conn.Query(testCtx(t), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		kv, _ := connect.ParseJSON([]byte(k))
		vv, _ := connect.ParseJSON([]byte(v))
		out[jsonOf(t, kv)] = jsonOf(t, vv)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// diffStates describes how two derived states differ (at most a few keys).
func diffStates(want, got map[string]string) string {
	var out []string
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		w, wok := want[k]
		g, gok := got[k]
		switch {
		case !wok:
			out = append(out, fmt.Sprintf("%s: unexpected %s", k, g))
		case !gok:
			out = append(out, fmt.Sprintf("%s: missing, want %s", k, w))
		case w != g:
			out = append(out, fmt.Sprintf("%s: got %s, want %s", k, g, w))
		}
		if len(out) >= 10 {
			out = append(out, "...")
			break
		}
	}
	return strings.Join(out, "\n")
}

// slotLSN returns the slot's confirmed_flush_lsn.
func slotLSN(t testing.TB, db *testDB) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := db.conn.QueryRow(testCtx(t), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", db.slot).Scan(&s); err != nil {
		t.Fatalf("slot %s: %v", db.slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func currentLSN(t testing.TB, db *testDB) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := db.conn.QueryRow(testCtx(t), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, _ := pglogrepl.ParseLSN(s)
	return lsn
}

// countOps counts the records of a topic by op ("tombstone" for tombstones).
func countOps(t testing.TB, recs []connect.Record, topic string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range recs {
		if r.Topic != topic {
			continue
		}
		if r.Value == nil {
			out["tombstone"]++
			continue
		}
		out[eventOf(t, r).Op.String()]++
	}
	return out
}

// dropSlot drops the test's slot once its walsender has gone.
func (db *testDB) dropSlot(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := db.conn.Exec(testCtx(t), "SELECT pg_drop_replication_slot($1)", db.slot)
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "is active") {
			t.Fatalf("drop slot %s: %v", db.slot, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
