package snapshot_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/e2e/harness"
)

// sourceDB is a database of one of the servers, with what the tests need of it.
type sourceDB interface {
	// class is the connector class; config the source configuration capturing tables.
	class() string
	config(tables []string, extra map[string]string) map[string]string
	// id is a table's data collection name (<schema|database>.<table>), topic its topic.
	id(table string) string
	topic(table string) string
	exec(t testing.TB, stmts ...string)
	// createTable creates table (id int primary key, v int, note text) with rows rows.
	createTable(t testing.TB, table string, rows int)
	// state renders a table as the fold does: key JSON → row JSON.
	state(t testing.TB, table string) map[string]string
	// conn opens a connection for a writer.
	writerExec(t testing.TB) func(q string) error
	// position is the server's current stream position; caughtUp says whether a committed
	// offset is at or past it.
	position(t testing.TB) string
	caughtUp(t testing.TB, offset map[string]any, pos string) bool
	// mark is a snapshot row's chunk watermark (from its source block).
	mark(ev *connect.ChangeEvent) string
	// signalTable creates a Debezium signal table; signal inserts a signal.
	signalTable(t testing.TB, table string)
	signal(t testing.TB, table, id, typ, data string)
	// insertIfAbsent is a statement inserting row id unless the table has it.
	insertIfAbsent(table string, id, v int) string
	// second adapts a configuration for a second connector of the same database (its own
	// replication slot or server id); offsetField is a field every stream offset has.
	second(cfg map[string]string)
	offsetField() string
}

// PostgreSQL.

type pgDB struct {
	pg   *harness.Postgres
	name string
	conn *pgx.Conn
}

var dbSeq atomic.Int64

func newPG(t testing.TB) *pgDB {
	t.Helper()
	pg := postgres(t)
	ctx := context.Background()
	d := &pgDB{pg: pg, name: fmt.Sprintf("snap%d_%d", os.Getpid(), dbSeq.Add(1))}
	if err := pg.Exec(ctx, "CREATE DATABASE "+d.name); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, pg.ConnStringFor(pg.User, d.name, false))
	if err != nil {
		t.Fatal(err)
	}
	d.conn = c
	t.Cleanup(func() {
		_ = c.Close(ctx)
		admin, err := pgx.Connect(ctx, pg.ConnString())
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer admin.Close(ctx)
		for range 100 {
			_, _ = admin.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL", d.name)
			if _, err = admin.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1", d.name); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := admin.Exec(ctx, "DROP DATABASE "+d.name+" WITH (FORCE)"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return d
}

func (d *pgDB) class() string             { return "io.debezium.connector.postgresql.PostgresConnector" }
func (d *pgDB) id(table string) string    { return "public." + table }
func (d *pgDB) topic(table string) string { return "pg.public." + table }

func (d *pgDB) config(tables []string, extra map[string]string) map[string]string {
	ids := make([]string, len(tables))
	for i, tb := range tables {
		ids[i] = "public\\." + tb
	}
	cfg := map[string]string{
		"database.hostname":           d.pg.Host,
		"database.port":               strconv.Itoa(d.pg.Port),
		"database.user":               d.pg.User,
		"database.dbname":             d.name,
		"database.sslmode":            "disable",
		"topic.prefix":                "pg",
		"slot.name":                   d.name,
		"publication.name":            "sluice_pub",
		"publication.autocreate.mode": "filtered",
		"table.include.list":          strings.Join(ids, ","),
		"snapshot.mode":               "no_data",
		"slot.retry.delay.ms":         "200",
		"slot.max.retries":            "100",
		"status.update.interval.ms":   "500",
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

func (d *pgDB) exec(t testing.TB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := d.conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func (d *pgDB) createTable(t testing.TB, table string, rows int) {
	t.Helper()
	d.exec(t, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL, note text)", table),
		fmt.Sprintf("INSERT INTO %s SELECT g, g %% 1000, 'row ' || g FROM generate_series(0, %d) g", table, rows-1))
}

func (d *pgDB) state(t testing.TB, table string) map[string]string {
	t.Helper()
	rows, err := d.conn.Query(context.Background(), fmt.Sprintf("SELECT id, v, note FROM %s", table))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, v int64
		var note *string
		if err := rows.Scan(&id, &v, &note); err != nil {
			t.Fatal(err)
		}
		out[rowKey(id)] = rowJSON(id, v, note)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func rowKey(id int64) string {
	k, _ := connect.AppendJSON(nil, connect.Row{{Name: "id", Value: id}})
	return string(k)
}

func rowJSON(id, v int64, note *string) string {
	var n any
	if note != nil {
		n = *note
	}
	b, _ := connect.AppendJSON(nil, connect.Row{{Name: "id", Value: id}, {Name: "v", Value: v}, {Name: "note", Value: n}})
	return string(b)
}

func (d *pgDB) writerExec(t testing.TB) func(q string) error {
	t.Helper()
	c, err := pgx.Connect(context.Background(), d.pg.ConnStringFor(d.pg.User, d.name, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return func(q string) error {
		_, err := c.Exec(context.Background(), q)
		return err
	}
}

func (d *pgDB) position(t testing.TB) string {
	t.Helper()
	var s string
	if err := d.conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (d *pgDB) caughtUp(t testing.TB, off map[string]any, pos string) bool {
	want, err := pglogrepl.ParseLSN(pos)
	if err != nil {
		t.Fatal(err)
	}
	at, _ := off["end"].(string)
	if at == "" {
		at, _ = off["lsn"].(string)
	}
	got, err := pglogrepl.ParseLSN(at)
	return err == nil && got >= want
}

func (d *pgDB) mark(ev *connect.ChangeEvent) string {
	v, _ := ev.Source.Get("lsn")
	return fmt.Sprint(v)
}

func (d *pgDB) insertIfAbsent(table string, id, v int) string {
	return fmt.Sprintf("INSERT INTO %s (id, v, note) SELECT %d, %d, 'w' WHERE NOT EXISTS (SELECT 1 FROM %s WHERE id = %d)", table, id, v, table, id)
}

func (d *pgDB) second(cfg map[string]string) { cfg["slot.name"] = "api_" + d.name }
func (d *pgDB) offsetField() string          { return "lsn" }

func (d *pgDB) signalTable(t testing.TB, table string) {
	d.exec(t, fmt.Sprintf("CREATE TABLE %s (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)", table))
}

func (d *pgDB) signal(t testing.TB, table, id, typ, data string) {
	t.Helper()
	if _, err := d.conn.Exec(context.Background(), fmt.Sprintf("INSERT INTO %s VALUES ($1, $2, $3)", table), id, typ, data); err != nil {
		t.Fatal(err)
	}
}

// MariaDB.

type mariaDB struct {
	m        *harness.MariaDB
	name     string
	serverID int64
	conn     *client.Conn
}

func newMaria(t testing.TB) *mariaDB {
	t.Helper()
	m := mariadb(t)
	n := dbSeq.Add(1)
	d := &mariaDB{m: m, name: fmt.Sprintf("snap%d_%d", os.Getpid(), n), serverID: 7000 + 10*n}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Exec(ctx, "CREATE DATABASE "+d.name); err != nil {
		t.Fatal(err)
	}
	d.conn = d.connect(t)
	t.Cleanup(func() {
		d.conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Exec(ctx, "DROP DATABASE "+d.name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return d
}

func (d *mariaDB) connect(t testing.TB) *client.Conn {
	t.Helper()
	c, err := client.Connect(d.m.Addr(), d.m.AppUser, d.m.AppPassword, d.name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (d *mariaDB) class() string             { return "io.debezium.connector.mysql.MySqlConnector" }
func (d *mariaDB) id(table string) string    { return d.name + "." + table }
func (d *mariaDB) topic(table string) string { return "my." + d.name + "." + table }

func (d *mariaDB) config(tables []string, extra map[string]string) map[string]string {
	ids := make([]string, len(tables))
	for i, tb := range tables {
		ids[i] = d.name + "\\." + tb
	}
	cfg := map[string]string{
		"database.hostname":     d.m.Host,
		"database.port":         strconv.Itoa(d.m.Port),
		"database.user":         d.m.ReplUser,
		"database.password":     d.m.ReplPassword,
		"database.server.id":    strconv.FormatInt(d.serverID, 10),
		"topic.prefix":          "my",
		"table.include.list":    strings.Join(ids, ","),
		"snapshot.mode":         "no_data",
		"heartbeat.interval.ms": "500",
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

func (d *mariaDB) exec(t testing.TB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := d.conn.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func (d *mariaDB) createTable(t testing.TB, table string, rows int) {
	t.Helper()
	d.exec(t, fmt.Sprintf("CREATE TABLE %s (id INT PRIMARY KEY, v INT NOT NULL, note TEXT)", table))
	for lo := 0; lo < rows; lo += 100000 {
		hi := min(lo+100000, rows) - 1
		d.exec(t, fmt.Sprintf("INSERT INTO %s SELECT seq, seq %% 1000, CONCAT('row ', seq) FROM seq_%d_to_%d", table, lo, hi))
	}
}

func (d *mariaDB) state(t testing.TB, table string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var res mysql.Result
	err := d.conn.ExecuteSelectStreaming(fmt.Sprintf("SELECT id, v, note FROM %s", table), &res, func(row []mysql.FieldValue) error {
		var note *string
		if row[2].Type != mysql.FieldValueTypeNull {
			s := string(row[2].AsString())
			note = &s
		}
		id, v := row[0].AsInt64(), row[1].AsInt64()
		out[rowKey(id)] = rowJSON(id, v, note)
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (d *mariaDB) writerExec(t testing.TB) func(q string) error {
	t.Helper()
	c := d.connect(t)
	t.Cleanup(func() { c.Close() })
	return func(q string) error {
		_, err := c.Execute(q)
		return err
	}
}

func (d *mariaDB) position(t testing.TB) string {
	t.Helper()
	r, err := d.conn.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	file, _ := r.GetString(0, 0)
	pos, _ := r.GetUint(0, 1)
	return fmt.Sprintf("%s:%d", file, pos)
}

// binlogMark is a binlog position as one number: file number << 32 | position.
func binlogMark(file string, pos uint64) uint64 {
	i := strings.LastIndexByte(file, '.')
	seq, _ := strconv.ParseUint(file[i+1:], 10, 32)
	return seq<<32 | pos
}

func (d *mariaDB) caughtUp(t testing.TB, off map[string]any, pos string) bool {
	i := strings.LastIndexByte(pos, ':')
	wantPos, _ := strconv.ParseUint(pos[i+1:], 10, 64)
	want := binlogMark(pos[:i], wantPos)
	if _, snap := off["snapshot"]; snap {
		return false
	}
	file, _ := off["file"].(string)
	at, ok := off["pos"].(float64)
	return file != "" && ok && binlogMark(file, uint64(at)) >= want
}

func (d *mariaDB) mark(ev *connect.ChangeEvent) string {
	f, _ := ev.Source.Get("file")
	p, _ := ev.Source.Get("pos")
	file, _ := f.(string)
	pos, _ := connect.AsInt64(p)
	return strconv.FormatUint(binlogMark(file, uint64(pos)), 10)
}

func (d *mariaDB) signalTable(t testing.TB, table string) {
	d.exec(t, fmt.Sprintf("CREATE TABLE %s (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)", table))
}

func (d *mariaDB) signal(t testing.TB, table, id, typ, data string) {
	t.Helper()
	if _, err := d.conn.Execute(fmt.Sprintf("INSERT INTO %s VALUES (?, ?, ?)", table), id, typ, data); err != nil {
		t.Fatal(err)
	}
}

func (d *mariaDB) insertIfAbsent(table string, id, v int) string {
	return fmt.Sprintf("INSERT IGNORE INTO %s (id, v, note) VALUES (%d, %d, 'w')", table, id, v)
}

func (d *mariaDB) second(cfg map[string]string) {
	cfg["database.server.id"] = strconv.FormatInt(d.serverID+1, 10)
}
func (d *mariaDB) offsetField() string { return "file" }

// writer hammers a table with single-statement transactions: inserts, updates, deletes and
// primary key changes, until halted.
type writer struct {
	stop   chan struct{}
	done   chan struct{}
	writes atomic.Int64
	mu     sync.Mutex
	err    error
}

// startWriter writes to keys 0..keys*2 (key changes move rows to keys above keys).
func startWriter(t testing.TB, d sourceDB, table string, keys int, seed uint64) *writer {
	t.Helper()
	exec := d.writerExec(t)
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		rng := rand.New(rand.NewPCG(seed, seed^0xabcdef))
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
				q = fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, k)
				if rng.IntN(2) == 0 {
					q = d.insertIfAbsent(table, k, rng.IntN(1000000))
				}
			case r < 7:
				q = fmt.Sprintf("UPDATE %s SET v = %d, note = 'u%d' WHERE id = %d", table, rng.IntN(1000000), rng.IntN(100), k)
			case r < 8:
				q = fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, k)
			default:
				to := keys + rng.IntN(keys)
				if rng.IntN(2) == 0 {
					k, to = to, rng.IntN(keys) // and back into the snapshot's range
				}
				q = fmt.Sprintf("UPDATE %s SET id = %d WHERE id = %d", table, to, k)
			}
			if err := exec(q); err != nil {
				if s := err.Error(); strings.Contains(s, "duplicate key") || strings.Contains(s, "Duplicate entry") {
					continue
				}
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
			w.writes.Add(1)
		}
	}()
	t.Cleanup(func() { w.halt(t) })
	return w
}

func (w *writer) halt(t testing.TB) {
	t.Helper()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
}
